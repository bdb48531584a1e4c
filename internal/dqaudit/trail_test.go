package dqaudit_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/dqaudit"
	"github.com/weir-io/weir/internal/engine"
)

func TestAddAggregatesPerStreamSinkContract(t *testing.T) {
	c := newClock()
	w := &memWriter{}
	tr := dqaudit.New(dqaudit.Options{Writer: w, Now: c.Now})
	defer closeTrail(t, tr)

	tr.Add("orders", "pg", "orders@3", []dqaudit.Obs{
		{Outcome: dqaudit.Passed, ID: id(1)},
		{Outcome: dqaudit.Warned, Warned: []string{"has_currency", "small"}, ID: id(2)},
		{Outcome: dqaudit.Rejected, Code: "dq", Rule: "positive_amount", ID: id(3)},
		{Outcome: dqaudit.Rejected, Code: "contract", Rule: "schema", Warned: []string{"small"}, ID: id(4)},
	})
	tr.Add("orders", "pg", "orders@3", []dqaudit.Obs{
		{Outcome: dqaudit.Duplicate, ID: id(5)},
		{Outcome: dqaudit.Rejected, Code: "dq", Rule: "positive_amount", ID: id(6)},
	})
	tr.Add("orders", "s3", "orders@3", []dqaudit.Obs{{Outcome: dqaudit.Passed, ID: id(1)}})
	tr.Add("clicks", "pg", "clicks@1", []dqaudit.Obs{{Outcome: dqaudit.Rejected, Code: "decode", Rule: "decode", ID: id(9)}})
	tr.Add("clicks", "pg", "clicks@1", nil) // nothing: no entry of its own

	if err := tr.Flush(context.Background()); err != nil || len(w.got()) != 0 {
		t.Fatalf("flush inside the window wrote %v (%v), want nothing yet", w.got(), err)
	}
	c.Advance(30 * time.Second) // 05:07:00, the window's end
	if err := tr.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 3, 4, 5, 6, 0, 0, time.UTC)
	to := from.Add(time.Minute)
	want := []dqaudit.Entry{
		{Kind: "outcomes", Stream: "clicks", Sink: "pg", Contract: "clicks@1", From: from, To: to,
			Outcomes: map[dqaudit.Outcome]int64{"reject": 1}, Codes: map[string]int64{"decode": 1},
			Rules: map[string]int64{"decode": 1}, Sample: []string{id(9).String()}},
		{Kind: "outcomes", Stream: "orders", Sink: "pg", Contract: "orders@3", From: from, To: to,
			Outcomes: map[dqaudit.Outcome]int64{"pass": 1, "warn": 1, "reject": 3, "duplicate": 1},
			Codes:    map[string]int64{"dq": 2, "contract": 1},
			Rules:    map[string]int64{"has_currency": 1, "small": 2, "positive_amount": 2, "schema": 1},
			Sample:   []string{id(3).String(), id(4).String(), id(6).String()}},
		{Kind: "outcomes", Stream: "orders", Sink: "s3", Contract: "orders@3", From: from, To: to,
			Outcomes: map[dqaudit.Outcome]int64{"pass": 1}},
	}
	if got := w.got(); !reflect.DeepEqual(got, want) {
		t.Fatalf("entries\n%+v\nwant\n%+v", got, want)
	}
	if s := tr.Stats(); s.Written != 3 || s.Pending != 0 || s.WriteErrors != 0 || s.Dropped != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// Each window's records land in that window's entry; the windows are
// aligned to multiples of Window.
func TestWindowsRollWithTheClock(t *testing.T) {
	c := newClock()
	w := &memWriter{}
	tr := dqaudit.New(dqaudit.Options{Writer: w, Now: c.Now, Window: 10 * time.Second})
	defer closeTrail(t, tr)
	pass := []dqaudit.Obs{{Outcome: dqaudit.Passed}}
	tr.Add("s", "pg", "s@1", pass) // 05:06:30 -> [30, 40)
	c.Advance(9 * time.Second)
	tr.Add("s", "pg", "s@1", pass) // 05:06:39, same window
	c.Advance(time.Second)
	tr.Add("s", "pg", "s@1", pass) // 05:06:40 -> [40, 50); [30, 40) closes
	if s := tr.Stats(); s.Pending != 1 {
		t.Fatalf("pending %d after the window passed, want 1", s.Pending)
	}
	c.Advance(25 * time.Second)
	tr.Add("s", "pg", "s@1", pass) // 05:07:05 -> [00, 10); an empty window between
	c.Advance(5 * time.Second)
	if err := tr.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 3, 4, 5, 6, 30, 0, time.UTC)
	wins := []struct {
		from time.Duration
		n    int64
	}{{0, 2}, {10 * time.Second, 1}, {30 * time.Second, 1}}
	got := w.got()
	if len(got) != len(wins) {
		t.Fatalf("%d entries, want %d: %+v", len(got), len(wins), got)
	}
	for i, win := range wins {
		e := got[i]
		if !e.From.Equal(base.Add(win.from)) || !e.To.Equal(base.Add(win.from+10*time.Second)) || e.Outcomes[dqaudit.Passed] != win.n {
			t.Fatalf("entry %d = %+v, want window from %v with %d passed", i, e, base.Add(win.from), win.n)
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
			tr.Add("s", "pg", "s@1", obs[:50])
			tr.Add("s", "pg", "s@1", obs[50:])
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
		tr.Add(fmt.Sprintf("s%02d", i), "pg", "c@1", []dqaudit.Obs{{Outcome: dqaudit.Passed}})
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
		if e.Stream != fmt.Sprintf("s%02d", i) {
			t.Fatalf("entry %d is stream %q: order lost or an entry written twice: %+v", i, e.Stream, got)
		}
	}
}

// Past MaxPending the oldest entries are dropped and counted, and Add
// never waits for the writer.
func TestPendingIsBounded(t *testing.T) {
	c := newClock()
	w := &memWriter{fails: -1}
	tr := dqaudit.New(dqaudit.Options{Writer: w, Now: c.Now})
	const extra = 5
	obs := []dqaudit.Obs{{Outcome: dqaudit.Passed}}
	for i := range dqaudit.MaxPending + extra {
		tr.Add(fmt.Sprintf("s%06d", i), "pg", "c@1", obs)
	}
	c.Advance(time.Minute)
	if err := tr.Flush(context.Background()); !errors.Is(err, errDown) {
		t.Fatalf("flush: %v, want the writer's error", err)
	}
	if s := tr.Stats(); s.Pending != dqaudit.MaxPending || s.Dropped != extra || s.WriteErrors != 1 {
		t.Fatalf("stats %+v, want %d pending and %d dropped", s, dqaudit.MaxPending, extra)
	}
	tr.Add("late", "pg", "c@1", obs)
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
	if len(got) != dqaudit.MaxPending || got[0].Stream != fmt.Sprintf("s%06d", extra+1) || got[len(got)-1].Stream != "late" {
		t.Fatalf("%d entries written, first %q, last %q", len(got), got[0].Stream, got[len(got)-1].Stream)
	}
}

// Close writes the open window (ending at Close) and what is pending,
// closes the writer, and ignores what comes after.
func TestCloseFlushes(t *testing.T) {
	c := newClock()
	w := &memWriter{fails: 1}
	tr := dqaudit.New(dqaudit.Options{Writer: w, Now: c.Now})
	tr.Add("s", "pg", "c@1", []dqaudit.Obs{{Outcome: dqaudit.Rejected, Code: "dq", Rule: "r"}})
	c.Advance(time.Minute)
	_ = tr.Flush(context.Background()) // fails: the entry stays pending
	tr.Recovered("pg", 1, 2, "skip-quarantine")
	c.Advance(10 * time.Second)
	closeTrail(t, tr)
	got := w.got()
	if len(got) != 2 || got[0].Kind != "outcomes" || got[1].Kind != "recovery" || !got[1].To.Equal(c.Now()) {
		t.Fatalf("entries %+v, want the pending one and the open window ending now", got)
	}
	if !w.closed {
		t.Fatal("writer not closed")
	}
	tr.Add("s", "pg", "c@1", []dqaudit.Obs{{Outcome: dqaudit.Passed}})
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
	tr.Add("s", "pg", "c@1", []dqaudit.Obs{{Outcome: dqaudit.Passed}})
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

// Add costs one lock and map increments: no allocation per record once
// the entry exists.
func TestAddDoesNotAllocatePerRecord(t *testing.T) {
	c := newClock()
	tr := dqaudit.New(dqaudit.Options{Writer: &memWriter{}, Now: c.Now, Sample: -1})
	defer closeTrail(t, tr)
	obs := make([]dqaudit.Obs, 256)
	for i := range obs {
		obs[i] = dqaudit.Obs{Outcome: dqaudit.Rejected, Code: "dq", Rule: "positive_amount", Warned: []string{"w"}}
	}
	tr.Add("s", "pg", "c@1", obs)
	if a := testing.AllocsPerRun(100, func() { tr.Add("s", "pg", "c@1", obs) }); a > 0 {
		t.Fatalf("%v allocations per Add of 256 records, want 0", a)
	}
}

// go test ./internal/dqaudit -run '^$' -bench BenchmarkAdd -benchmem
func BenchmarkAdd(b *testing.B) {
	tr := dqaudit.New(dqaudit.Options{Writer: &memWriter{}})
	defer tr.Close(context.Background())
	obs := make([]dqaudit.Obs, 256)
	for i := range obs {
		obs[i] = dqaudit.Obs{Outcome: dqaudit.Passed, ID: id(i)}
		if i%10 == 0 {
			obs[i] = dqaudit.Obs{Outcome: dqaudit.Rejected, Code: "dq", Rule: "positive_amount", ID: id(i)}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		tr.Add("orders", "pg", "orders@3", obs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(obs)), "ns/record")
}

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
			tr.Add("s", "pg", "c@1", []dqaudit.Obs{{Outcome: dqaudit.Passed}})
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
