package dqaudit_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/dqaudit"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/vfs"
)

// groups is the IDGroups of obs, in order of first appearance.
func groups(obs ...dqaudit.Obs) []dqaudit.IDGroup {
	var out []dqaudit.IDGroup
	var ids [][]byte
	for _, o := range obs {
		g := dqaudit.IDGroup{Outcome: o.Outcome, Warned: o.Warned}
		if o.Outcome == dqaudit.Rejected {
			g.Code, g.Rule = o.Code, o.Rule
		}
		j := slices.IndexFunc(out, func(h dqaudit.IDGroup) bool {
			return h.Outcome == g.Outcome && h.Code == g.Code && h.Rule == g.Rule && slices.Equal(h.Warned, g.Warned)
		})
		if j < 0 {
			out, ids = append(out, g), append(ids, nil)
			j = len(out) - 1
		}
		ids[j] = append(ids[j], o.ID[:]...)
	}
	for i := range out {
		out[i].IDs = base64.StdEncoding.EncodeToString(ids[i])
	}
	return out
}

// Append writes one entry per (stream, sink, contract) of the batch, at
// once and in one Write, filed under the window of the clock, with its
// records' ids by verdict.
func TestAppendWritesTheBatchAtOnce(t *testing.T) {
	c := newClock()
	w := &memWriter{}
	tr := dqaudit.New(dqaudit.Options{Writer: w, Now: c.Now})
	defer closeTrail(t, tr)

	orders := []dqaudit.Obs{
		{Outcome: dqaudit.Passed, ID: id(1)},
		{Outcome: dqaudit.Warned, Warned: []string{"has_currency", "small"}, ID: id(2)},
		{Outcome: dqaudit.Rejected, Code: "dq", Rule: "positive_amount", ID: id(3)},
		{Outcome: dqaudit.Rejected, Code: "contract", Rule: "schema", Warned: []string{"small"}, ID: id(4)},
		{Outcome: dqaudit.Duplicate, ID: id(5)},
		{Outcome: dqaudit.Rejected, Code: "dq", Rule: "positive_amount", ID: id(6)},
		{Outcome: dqaudit.Passed, ID: id(7)},
	}
	clicks := []dqaudit.Obs{{Outcome: dqaudit.Rejected, Code: "decode", Rule: "decode", ID: id(9)}}
	err := tr.Append(context.Background(), []dqaudit.Batch{
		{Stream: "orders", Sink: "pg", Contract: "orders@3", Obs: orders},
		{Stream: "clicks", Sink: "pg", Contract: "clicks@1", Obs: clicks},
		{Stream: "none", Sink: "pg", Contract: "none@1"}, // nothing: no entry of its own
	})
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 3, 4, 5, 6, 0, 0, time.UTC)
	to := from.Add(time.Minute)
	want := []dqaudit.Entry{
		{Kind: "outcomes", Stream: "orders", Sink: "pg", Contract: "orders@3", From: from, To: to,
			Outcomes: map[dqaudit.Outcome]int64{"pass": 2, "warn": 1, "reject": 3, "duplicate": 1},
			Codes:    map[string]int64{"dq": 2, "contract": 1},
			Rules:    map[string]int64{"has_currency": 1, "small": 2, "positive_amount": 2, "schema": 1},
			Sample:   []string{id(3).String(), id(4).String(), id(6).String()},
			Records:  groups(orders...)},
		{Kind: "outcomes", Stream: "clicks", Sink: "pg", Contract: "clicks@1", From: from, To: to,
			Outcomes: map[dqaudit.Outcome]int64{"reject": 1}, Codes: map[string]int64{"decode": 1},
			Rules: map[string]int64{"decode": 1}, Sample: []string{id(9).String()}, Records: groups(clicks...)},
	}
	if got := w.got(); !reflect.DeepEqual(got, want) || w.calls != 1 {
		t.Fatalf("%d writes of entries\n%+v\nwant one of\n%+v", w.calls, got, want)
	}
	one, seven := id(1), id(7)
	if g := want[0].Records; len(g) != 5 || g[0].IDs != base64.StdEncoding.EncodeToString(append(one[:], seven[:]...)) {
		t.Fatalf("groups %+v: want the two passes in one", g)
	}
	if s := tr.Stats(); s.Written != 2 || s.Pending != 0 || s.WriteErrors != 0 || s.Dropped != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// An Append whose write fails returns the error and keeps nothing: the
// caller sends the batch again. After Close, Append fails.
func TestAppendFailsWithTheWriter(t *testing.T) {
	w := &memWriter{fails: 1}
	tr := dqaudit.New(dqaudit.Options{Writer: w})
	b := []dqaudit.Batch{{Stream: "s", Sink: "pg", Contract: "s@1", Obs: []dqaudit.Obs{{Outcome: dqaudit.Passed, ID: id(1)}}}}
	if err := tr.Append(context.Background(), b); !errors.Is(err, errDown) {
		t.Fatalf("append: %v, want the writer's error", err)
	}
	if s := tr.Stats(); s.Pending != 0 || s.WriteErrors != 1 || s.Written != 0 {
		t.Fatalf("stats %+v: want one write error and nothing kept", s)
	}
	if err := tr.Append(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	closeTrail(t, tr)
	if err := tr.Append(context.Background(), b); !errors.Is(err, dqaudit.ErrTrailClosed) {
		t.Fatalf("append after Close: %v", err)
	}
	if got := w.got(); len(got) != 1 {
		t.Fatalf("%d entries written, want 1", len(got))
	}
}

// Entries are filed under windows aligned to multiples of Window.
func TestAppendFilesUnderAlignedWindows(t *testing.T) {
	c := newClock()
	w := &memWriter{}
	tr := dqaudit.New(dqaudit.Options{Writer: w, Now: c.Now, Window: 10 * time.Second})
	defer closeTrail(t, tr)
	pass := []dqaudit.Batch{{Stream: "s", Sink: "pg", Contract: "s@1", Obs: []dqaudit.Obs{{Outcome: dqaudit.Passed}}}}
	base := time.Date(2026, 3, 4, 5, 6, 30, 0, time.UTC)
	for _, step := range []time.Duration{0, 9 * time.Second, time.Second, 25 * time.Second} { // at 0s, 9s, 10s, 35s
		c.Advance(step)
		if err := tr.Append(context.Background(), pass); err != nil {
			t.Fatal(err)
		}
	}
	got := w.got()
	for i, from := range []time.Duration{0, 0, 10 * time.Second, 30 * time.Second} {
		if e := got[i]; !e.From.Equal(base.Add(from)) || !e.To.Equal(base.Add(from+10*time.Second)) {
			t.Fatalf("entry %d = %+v, want window from %v", i, e, base.Add(from))
		}
	}
}

func TestSampleKeepsTheFirstRejectedIDs(t *testing.T) {
	for _, tc := range []struct {
		sample, want int
	}{{0, dqaudit.DefaultSample}, {3, 3}, {-1, 0}} {
		t.Run(fmt.Sprint(tc.sample), func(t *testing.T) {
			c := newClock()
			w := &memWriter{}
			tr := dqaudit.New(dqaudit.Options{Writer: w, Now: c.Now, Sample: tc.sample})
			obs := make([]dqaudit.Obs, 100)
			for i := range obs {
				obs[i] = dqaudit.Obs{Outcome: dqaudit.Rejected, Code: "dq", Rule: "r", ID: id(i)}
				if i%2 == 0 {
					obs[i].Outcome = dqaudit.Passed // passed records are never sampled
				}
			}
			if err := tr.Append(context.Background(), []dqaudit.Batch{{Stream: "s", Sink: "pg", Contract: "s@1", Obs: obs}}); err != nil {
				t.Fatal(err)
			}
			closeTrail(t, tr)
			got := w.got()
			if len(got) != 1 || len(got[0].Sample) != tc.want || got[0].Outcomes[dqaudit.Rejected] != 50 {
				t.Fatalf("entries %+v, want one with %d sampled ids of 50 rejected", got, tc.want)
			}
			for i, s := range got[0].Sample {
				if s != id(2*i+1).String() {
					t.Fatalf("sample %d = %s, want %s (the first rejected ids, in order)", i, s, id(2*i+1))
				}
			}
		})
	}
}

type span struct {
	sink   string
	lo, hi uint64
	mode   string
}

func TestRecoveredCoalescesAdjacentWindows(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []span
		want []span
	}{
		{"adjacent", []span{{"pg", 0, 100, "skip-quarantine"}, {"pg", 100, 250, "skip-quarantine"}, {"pg", 250, 260, "skip-quarantine"}},
			[]span{{"pg", 0, 260, "skip-quarantine"}}},
		{"overlapping", []span{{"pg", 0, 100, "rehydrate"}, {"pg", 50, 120, "rehydrate"}}, []span{{"pg", 0, 120, "rehydrate"}}},
		{"before", []span{{"pg", 100, 200, "rehydrate"}, {"pg", 40, 100, "rehydrate"}}, []span{{"pg", 40, 200, "rehydrate"}}},
		{"gap", []span{{"pg", 0, 100, "rehydrate"}, {"pg", 101, 200, "rehydrate"}}, []span{{"pg", 0, 100, "rehydrate"}, {"pg", 101, 200, "rehydrate"}}},
		{"modes apart", []span{{"pg", 0, 100, "rehydrate"}, {"pg", 100, 200, "skip-quarantine"}, {"pg", 200, 300, "rehydrate"}},
			[]span{{"pg", 0, 100, "rehydrate"}, {"pg", 100, 200, "skip-quarantine"}, {"pg", 200, 300, "rehydrate"}}},
		{"sinks apart", []span{{"pg", 0, 100, "rehydrate"}, {"s3", 100, 200, "rehydrate"}, {"pg", 100, 200, "rehydrate"}},
			[]span{{"pg", 0, 200, "rehydrate"}, {"s3", 100, 200, "rehydrate"}}},
		{"empty ignored", []span{{"pg", 5, 5, "rehydrate"}, {"pg", 9, 3, "rehydrate"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock()
			w := &memWriter{}
			tr := dqaudit.New(dqaudit.Options{Writer: w, Now: c.Now})
			for _, s := range tc.in {
				tr.Recovered(s.sink, s.lo, s.hi, s.mode)
			}
			closeTrail(t, tr)
			var got []span
			for _, e := range w.got() {
				if e.Kind != "recovery" || !e.From.Equal(time.Date(2026, 3, 4, 5, 6, 0, 0, time.UTC)) || !e.To.Equal(c.Now()) {
					t.Fatalf("entry %+v: want a recovery entry of the window closed at Close", e)
				}
				got = append(got, span{e.Sink, e.Lo, e.Hi, e.Mode})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// A window that has closed starts a new recovery entry even when the
// ranges touch.
func TestRecoveredDoesNotCoalesceAcrossWindows(t *testing.T) {
	c := newClock()
	w := &memWriter{}
	tr := dqaudit.New(dqaudit.Options{Writer: w, Now: c.Now})
	tr.Recovered("pg", 0, 100, "skip-quarantine")
	c.Advance(time.Minute)
	tr.Recovered("pg", 100, 200, "skip-quarantine")
	closeTrail(t, tr)
	got := w.got()
	if len(got) != 2 || got[0].Hi != 100 || got[1].Lo != 100 || !got[0].To.Equal(got[1].From) {
		t.Fatalf("entries %+v, want two consecutive windows", got)
	}
}

// A writer that fails keeps the entries pending; the goroutine writes
// them on a later tick, each once and in order.
func TestFailedWriterKeepsAndRetries(t *testing.T) {
	w := &memWriter{fails: 3}
	tr := dqaudit.New(dqaudit.Options{Writer: w, Window: 20 * time.Millisecond})
	defer closeTrail(t, tr)
	const n = 10
	for i := range n {
		tr.Recovered(fmt.Sprintf("s%02d", i), 0, 1, "rehydrate")
		time.Sleep(7 * time.Millisecond) // spread over a few windows
	}
	deadline := time.Now().Add(10 * time.Second)
	for tr.Stats().Written < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	s := tr.Stats()
	if s.Written != n || s.WriteErrors != 3 || s.Pending != 0 || s.Dropped != 0 {
		t.Fatalf("stats %+v, want %d written after 3 failed writes", s, n)
	}
	got := w.got()
	if len(got) != n {
		t.Fatalf("%d entries written, want %d", len(got), n)
	}
	for i, e := range got {
		if e.Sink != fmt.Sprintf("s%02d", i) {
			t.Fatalf("entry %d is sink %q: order lost or an entry written twice: %+v", i, e.Sink, got)
		}
	}
}

// Past MaxPending the oldest entries are dropped and counted, and
// Recovered never waits for the writer.
func TestPendingIsBounded(t *testing.T) {
	c := newClock()
	w := &memWriter{fails: -1}
	tr := dqaudit.New(dqaudit.Options{Writer: w, Now: c.Now})
	const extra = 5
	for i := range dqaudit.MaxPending + extra {
		tr.Recovered(fmt.Sprintf("s%06d", i), 0, 1, "rehydrate")
	}
	c.Advance(time.Minute)
	if err := tr.Flush(context.Background()); !errors.Is(err, errDown) {
		t.Fatalf("flush: %v, want the writer's error", err)
	}
	if s := tr.Stats(); s.Pending != dqaudit.MaxPending || s.Dropped != extra || s.WriteErrors != 1 {
		t.Fatalf("stats %+v, want %d pending and %d dropped", s, dqaudit.MaxPending, extra)
	}
	tr.Recovered("late", 0, 1, "rehydrate")
	c.Advance(time.Minute)
	_ = tr.Flush(context.Background())
	if s := tr.Stats(); s.Pending != dqaudit.MaxPending || s.Dropped != extra+1 {
		t.Fatalf("stats %+v, want the bound kept", s)
	}
	// The writer comes back: what is kept is the newest, oldest first.
	w.mu.Lock()
	w.fails = 0
	w.mu.Unlock()
	closeTrail(t, tr)
	got := w.got()
	if len(got) != dqaudit.MaxPending || got[0].Sink != fmt.Sprintf("s%06d", extra+1) || got[len(got)-1].Sink != "late" {
		t.Fatalf("%d entries written, first %q, last %q", len(got), got[0].Sink, got[len(got)-1].Sink)
	}
}

// Close writes the open window (ending at Close) and what is pending,
// closes the writer, and ignores what comes after.
func TestCloseFlushes(t *testing.T) {
	c := newClock()
	w := &memWriter{fails: 1}
	tr := dqaudit.New(dqaudit.Options{Writer: w, Now: c.Now})
	tr.Recovered("pg", 0, 1, "rehydrate")
	c.Advance(time.Minute)
	_ = tr.Flush(context.Background()) // fails: the entry stays pending
	tr.Recovered("pg", 1, 2, "skip-quarantine")
	c.Advance(10 * time.Second)
	closeTrail(t, tr)
	got := w.got()
	if len(got) != 2 || got[0].Mode != "rehydrate" || got[1].Mode != "skip-quarantine" || !got[1].To.Equal(c.Now()) {
		t.Fatalf("entries %+v, want the pending one and the open window ending now", got)
	}
	if !w.closed {
		t.Fatal("writer not closed")
	}
	tr.Recovered("pg", 2, 3, "rehydrate")
	if err := tr.Close(context.Background()); err != nil || len(w.got()) != 2 || tr.Stats().Pending != 0 {
		t.Fatalf("after Close: %v, %d entries, %+v", err, len(w.got()), tr.Stats())
	}
}

// A writer that never comes back: Close gives up within its context and
// says how many entries it could not write.
func TestCloseReportsUnwritten(t *testing.T) {
	w := &memWriter{fails: -1}
	tr := dqaudit.New(dqaudit.Options{Writer: w})
	tr.Recovered("pg", 0, 1, "rehydrate")
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := tr.Close(ctx)
	if !errors.Is(err, errDown) || time.Since(start) > 2*time.Second || !w.closed {
		t.Fatalf("close: %v after %v, want the writer's error promptly", err, time.Since(start))
	}
	if s := tr.Stats(); s.Pending != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// go test ./internal/dqaudit -run '^$' -bench BenchmarkAppend -benchmem
// (into memory: what building a batch's entry costs, not its fdatasync).
func BenchmarkAppend(b *testing.B) { benchAppend(b, discard{}, 256) }

// go test ./internal/dqaudit -run '^$' -bench BenchmarkAppendDir -benchmem
// (1000-record batches into a directory of the temporary file system:
// the entry, its JSON and the fdatasync, per batch).
func BenchmarkAppendDir(b *testing.B) {
	w, err := dqaudit.OpenDir(vfs.OS, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	benchAppend(b, w, 1000)
}

// benchAppend appends batches of n records, every tenth rejected, with w.
func benchAppend(b *testing.B, w dqaudit.Writer, n int) {
	tr := dqaudit.New(dqaudit.Options{Writer: w})
	defer tr.Close(context.Background())
	obs := make([]dqaudit.Obs, n)
	for i := range obs {
		obs[i] = dqaudit.Obs{Outcome: dqaudit.Passed, ID: id(i)}
		if i%10 == 0 {
			obs[i] = dqaudit.Obs{Outcome: dqaudit.Rejected, Code: "dq", Rule: "positive_amount", ID: id(i)}
		}
	}
	batch := []dqaudit.Batch{{Stream: "orders", Sink: "pg", Contract: "orders@3", Obs: obs}}
	b.ReportAllocs()
	for b.Loop() {
		if err := tr.Append(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(obs)), "ns/record")
}

type discard struct{}

func (discard) Write(context.Context, []dqaudit.Entry) error { return nil }
func (discard) Close() error                                 { return nil }

var _ engine.RecoveryAudit = (*dqaudit.Trail)(nil)

// blockingWriter holds every Write until release is closed or the write's
// context ends.
type blockingWriter struct {
	memWriter
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (w *blockingWriter) Write(ctx context.Context, es []dqaudit.Entry) error {
	w.once.Do(func() { close(w.entered) })
	select {
	case <-w.release:
		return w.memWriter.Write(ctx, es)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close lets the goroutine's write in progress finish rather than cancel
// it (a cancelled write may have been stored, and would be written
// twice); a Close whose context ends first cancels it and says so.
func TestCloseWaitsForTheWriteInProgress(t *testing.T) {
	for _, finish := range []bool{true, false} {
		t.Run(fmt.Sprintf("released=%v", finish), func(t *testing.T) {
			w := &blockingWriter{entered: make(chan struct{}), release: make(chan struct{})}
			tr := dqaudit.New(dqaudit.Options{Writer: w, Window: 10 * time.Millisecond})
			tr.Recovered("pg", 0, 1, "rehydrate")
			<-w.entered
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if finish {
				ctx = context.Background()
			}
			closed := make(chan error, 1)
			go func() { closed <- tr.Close(ctx) }()
			select {
			case err := <-closed:
				if finish {
					t.Fatalf("Close returned (%v) while the write was in progress", err)
				}
				if err == nil || tr.Stats().Pending != 1 {
					t.Fatalf("close: %v, %+v; want the unwritten entry reported", err, tr.Stats())
				}
				return
			case <-time.After(100 * time.Millisecond):
			}
			if !finish {
				if err := <-closed; err == nil {
					t.Fatal("Close after its context ended reported nothing unwritten")
				}
				return
			}
			close(w.release)
			if err := <-closed; err != nil {
				t.Fatal(err)
			}
			if got := w.got(); len(got) != 1 {
				t.Fatalf("%d entries written, want 1", len(got))
			}
		})
	}
}
