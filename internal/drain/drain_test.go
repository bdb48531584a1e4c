package drain

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

func TestNewValidatesAndDefaults(t *testing.T) {
	dir := t.TempDir()
	src := newDirSource(dir)
	s := &scriptSink{max: 10}
	for name, opts := range map[string]Options{
		"no dir":    {Source: src, Sink: s},
		"no source": {WABDir: dir, Sink: s},
		"no sink":   {WABDir: dir, Source: src},
		"batch 0":   {WABDir: dir, Source: src, Sink: &scriptSink{max: 0}},
	} {
		if _, err := New(opts); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	d, err := New(Options{WABDir: dir, Source: src, Sink: s})
	if err != nil {
		t.Fatal(err)
	}
	if d.retryBase != DefaultRetryBase || d.retryMax != DefaultRetryMax || d.maxRetries != DefaultMaxRetries ||
		d.dl.maxBytes != DefaultDeadLetterMaxBytes || d.dlCheck != DefaultDeadLetterCheckInterval ||
		d.healthEvery != DefaultHealthInterval || d.pollInterval != DefaultPollInterval {
		t.Errorf("zero options did not fall back to the defaults: %+v", d)
	}
	if !exists(DeadLetterDir(dir)) {
		t.Error("dead-letter directory not created")
	}
	if d.State() != Idle {
		t.Errorf("initial state %v", d.State())
	}
	d2, err := New(Options{WABDir: dir, Source: src, Sink: s, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if d2.maxRetries != 0 {
		t.Errorf("MaxRetries -1 gave %d retries", d2.maxRetries)
	}
}

func TestStateStrings(t *testing.T) {
	want := []string{"idle", "draining", "retrying_transient", "blocked_dead_letter_full"}
	for i, s := range States() {
		if s.String() != want[i] {
			t.Errorf("%d: %q, want %q", i, s, want[i])
		}
	}
}

func TestBackoff(t *testing.T) {
	d := &Drain{retryBase: 100 * time.Millisecond, retryMax: time.Second}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := d.backoff(i + 1); got != w*time.Millisecond {
			t.Errorf("retry %d: %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	if got := d.backoff(200); got != time.Second {
		t.Errorf("retry 200: %v (overflow?)", got)
	}
}

func TestInterleave(t *testing.T) {
	refs := []wab.SegmentRef{
		{Shard: 1, Seq: 9}, {Shard: 0, Seq: 3}, {Shard: 0, Seq: 1}, {Shard: 2, Seq: 5},
		{Shard: 0, Seq: 2}, {Shard: 1, Seq: 7},
	}
	var got [][2]uint64
	for _, r := range interleave(refs) {
		got = append(got, [2]uint64{uint64(r.Shard), r.Seq})
	}
	want := [][2]uint64{{0, 1}, {1, 7}, {2, 5}, {0, 2}, {1, 9}, {0, 3}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("interleave: %v, want %v", got, want)
	}
}

func TestRunTwice(t *testing.T) {
	dir := t.TempDir()
	r := start(t, fastOptions(dir, newDirSource(dir), &scriptSink{max: 1}, nil))
	waitFor(t, "idle", func() bool { return r.d.running.Load() })
	if err := r.d.Run(context.Background()); err == nil {
		t.Error("second Run succeeded")
	}
}

// Every record is delivered in order, in sub-batches of at most
// MaxBatchSize, shards interleaved, each segment removed only after all of
// its records were confirmed.
func TestDeliversAllInOrder(t *testing.T) {
	dir := t.TempDir()
	segA1, hA1 := writeSegment(t, dir, 0, 1, payloads("a1", 7)...)
	segA2, hA2 := writeSegment(t, dir, 0, 2, payloads("a2", 3)...)
	segB1, hB1 := writeSegment(t, dir, 1, 1, payloads("b1", 5)...)
	headers := map[string]wab.Header{"a1": hA1, "a2": hA2, "b1": hB1}
	paths := map[string]string{"a1": segA1, "a2": segA2, "b1": segB1}

	// Before each commit, the segment must still exist and its sidecar
	// must count exactly the records already sent from it.
	sent := map[string]uint64{}
	var violations atomic.Int64
	s := &scriptSink{max: 3}
	s.script = func(_ context.Context, _ int, b sink.Batch) (sink.CommitResult, error) {
		seg := strings.SplitN(string(b.Records[0].Payload), "-", 2)[0]
		if !exists(paths[seg]) {
			violations.Add(1)
		}
		if n, err := wab.ReadConfirmed(vfs.OS, paths[seg]); err != nil || n != sent[seg] {
			violations.Add(1)
		}
		sent[seg] += uint64(len(b.Records))
		return sink.CommitResult{}, nil
	}
	obs := &recObserver{}
	start(t, fastOptions(dir, newDirSource(dir), s, obs))
	waitFor(t, "all segments delivered", func() bool { return len(obs.snapshot().delivered) == 3 })

	if v := violations.Load(); v != 0 {
		t.Errorf("%d commits saw a removed segment or a wrong confirmed count", v)
	}
	var order []string
	perSeg := map[string][]string{}
	for _, b := range s.got() {
		if len(b.Records) == 0 || len(b.Records) > 3 {
			t.Errorf("batch of %d records, MaxBatchSize 3", len(b.Records))
		}
		if b.Token != sink.NewBatch(b.Records).Token {
			t.Error("batch token does not match its records")
		}
		seg := strings.SplitN(string(b.Records[0].Payload), "-", 2)[0]
		if len(order) == 0 || order[len(order)-1] != seg {
			order = append(order, seg)
		}
		for _, r := range b.Records {
			idx := uint64(len(perSeg[seg]))
			perSeg[seg] = append(perSeg[seg], string(r.Payload))
			if want := sink.RecordID(wab.RecordID(headers[seg], idx, r.Payload)); r.ID != want {
				t.Errorf("%s: record %d id %s, want %s", seg, idx, r.ID, want)
			}
			if r.Source != RecordSource {
				t.Errorf("source %q", r.Source)
			}
			if r.Durability != sink.Durability(idx%2) {
				t.Errorf("%s: record %d durability %v", seg, idx, r.Durability)
			}
			if want := time.Unix(0, baseReceived+int64(idx)*int64(time.Microsecond)); !r.Received.Equal(want) {
				t.Errorf("%s: record %d received %v, want %v", seg, idx, r.Received, want)
			}
		}
	}
	for seg, n := range map[string]int{"a1": 7, "a2": 3, "b1": 5} {
		if !reflect.DeepEqual(perSeg[seg], payloads(seg, n)) {
			t.Errorf("%s delivered %v", seg, perSeg[seg])
		}
	}
	if want := []string{"a1", "b1", "a2"}; !reflect.DeepEqual(order, want) {
		t.Errorf("segment order %v, want %v", order, want)
	}
	for _, sd := range []string{"shard-000", "shard-001"} {
		if left, _ := os.ReadDir(filepath.Join(dir, sd)); len(left) != 0 {
			t.Errorf("%s not empty after delivery: %v", sd, left)
		}
	}
	if files, _ := os.ReadDir(DeadLetterDir(dir)); len(files) != 0 {
		t.Errorf("dead letters written: %v", files)
	}
}

// A newly sealed segment is picked up after a notification.
func TestPicksUpNewSegments(t *testing.T) {
	dir := t.TempDir()
	src := newDirSource(dir)
	s := &scriptSink{max: 10}
	obs := &recObserver{}
	opts := fastOptions(dir, src, s, obs)
	opts.PollInterval = time.Hour // only the notification can wake it
	r := start(t, opts)
	waitFor(t, "idle", func() bool { return r.d.running.Load() && r.d.State() == Idle })
	seg, _ := writeSegment(t, dir, 0, 1, "x", "y")
	src.notify <- struct{}{}
	waitFor(t, "segment removed", func() bool { return !exists(seg) })
	if got := s.got(); len(got) != 1 || !reflect.DeepEqual(payloadsOf(got[0]), []string{"x", "y"}) {
		t.Errorf("sink got %v", got)
	}
}

// A partial rejection dead-letters exactly the rejected records, with the
// sink's reasons and their original identity, and commits the rest.
func TestPartialRejection(t *testing.T) {
	dir := t.TempDir()
	seg, h := writeSegment(t, dir, 2, 40, payloads("p", 5)...)
	s := &scriptSink{max: 5, script: func(_ context.Context, call int, b sink.Batch) (sink.CommitResult, error) {
		return sink.CommitResult{Rejected: []sink.Rejection{{Index: 3, Reason: "too big", Code: sink.CodeOversize}, {Index: 1, Reason: "bad json"}}}, nil
	}}
	obs := &recObserver{}
	before := time.Now()
	start(t, fastOptions(dir, newDirSource(dir), s, obs))
	waitFor(t, "segment removed", func() bool { return !exists(seg) })

	if got := s.got(); len(got) != 1 {
		t.Fatalf("sink got %d batches, want 1", len(got))
	}
	files, err := ListDeadLetters(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].Records != 2 || files[0].Name != DeadLetterName(0) {
		t.Fatalf("dead-letter files %+v", files)
	}
	if _, all, err := ReadDeadLetter(vfs.OS, files[0].Path); err == nil {
		var recs []wab.Record
		for _, r := range all {
			recs = append(recs, wab.Record{Meta: r.RawMeta, Payload: r.Payload})
		}
		if n := fileSize(recs); n != files[0].Bytes {
			t.Errorf("computed dead-letter size %d, file has %d", n, files[0].Bytes)
		}
	}
	dh, recs, err := ReadDeadLetter(vfs.OS, files[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	if dh.Shard != wab.DeadLetterShard || dh.Instance != testInstance {
		t.Errorf("dead-letter header %+v", dh)
	}
	want := []struct {
		idx    uint64
		reason string
		code   record.Code
	}{{1, "bad json", record.CodeSinkRefused}, {3, "too big", record.CodeOversize}}
	if len(recs) != len(want) {
		t.Fatalf("%d dead-letter records", len(recs))
	}
	for i, w := range want {
		r := recs[i]
		payload := payloads("p", 5)[w.idx]
		if r.MetaErr != nil {
			t.Fatalf("meta: %v", r.MetaErr)
		}
		wantMeta := record.Meta{
			ID: sink.RecordID(wab.RecordID(h, w.idx, []byte(payload))), HasID: true,
			Source: RecordSource,
			Reject: &record.Rejection{
				Code: w.code, Stage: record.StageDrain, Component: "script", Error: w.reason, Attempts: 1,
				FirstSeen: r.Meta.Reject.FirstSeen,
				Shard:     2, Seq: 40, Index: w.idx, HasLocation: true,
			},
		}
		if !reflect.DeepEqual(r.Meta, wantMeta) {
			t.Errorf("record %d meta %+v %+v, want %+v", i, r.Meta, r.Meta.Reject, wantMeta.Reject)
		}
		if fs := r.Meta.Reject.FirstSeen; fs < before.UnixNano() || fs > time.Now().UnixNano() {
			t.Errorf("record %d first seen %v, not during the test", i, time.Unix(0, fs))
		}
		if string(r.Payload) != payload || r.Durability != wab.Durability(w.idx%2) ||
			r.Received.UnixNano() != baseReceived+int64(w.idx)*int64(time.Microsecond) {
			t.Errorf("record %d: %+v", i, r)
		}
	}
	o := obs.snapshot()
	wantCodes := map[record.Code]int{record.CodeSinkRefused: 1, record.CodeOversize: 1}
	if o.dlRecords != 2 || !reflect.DeepEqual(o.dlByCode, wantCodes) || o.totals != [2]int64{1, files[0].Bytes} {
		t.Errorf("observer: %d records %v, totals %v", o.dlRecords, o.dlByCode, o.totals)
	}
}

// A permanent error dead-letters the whole sub-batch with the error as the
// reason; the other sub-batches are committed.
func TestPermanentErrorDeadLettersSubBatch(t *testing.T) {
	dir := t.TempDir()
	seg, _ := writeSegment(t, dir, 0, 1, payloads("p", 6)...)
	s := &scriptSink{max: 3, script: func(_ context.Context, call int, b sink.Batch) (sink.CommitResult, error) {
		if call == 0 {
			return sink.CommitResult{}, sink.Permanent(errors.New("schema mismatch"))
		}
		return sink.CommitResult{}, nil
	}}
	start(t, fastOptions(dir, newDirSource(dir), s, nil))
	waitFor(t, "segment removed", func() bool { return !exists(seg) })
	if got := s.got(); len(got) != 2 {
		t.Fatalf("sink got %d batches, want 2 (no retry of a permanent error)", len(got))
	}
	files, err := ListDeadLetters(vfs.OS, dir)
	if err != nil || len(files) != 1 || files[0].Records != 3 {
		t.Fatalf("dead-letter files %+v, %v", files, err)
	}
	_, recs, err := ReadDeadLetter(vfs.OS, files[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		rj := r.Meta.Reject
		if string(r.Payload) != payloads("p", 3)[i] || rj.Index != uint64(i) || rj.Error != "schema mismatch" ||
			rj.Code != record.CodeSinkRefused || rj.Stage != record.StageDrain || rj.Attempts != 1 {
			t.Errorf("record %d: %q %+v", i, r.Payload, rj)
		}
	}
}

// A dead letter keeps what the record carried in the buffer — key,
// headers, event time, source, origin position, its own id — and counts
// every Commit of its sub-batch as an attempt, with the drain's clock as
// its first-seen time. A version-1 origin meta (a source record of an
// older buffer) keeps its id and source.
func TestDeadLetterKeepsRecordMeta(t *testing.T) {
	dir := t.TempDir()
	sdir := filepath.Join(dir, "shard-000")
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		t.Fatal(err)
	}
	orig := record.Meta{ID: sink.RecordID{7}, HasID: true, Source: "kafka:orders", Key: []byte("k1"),
		Headers:   []sink.Header{{Key: "a", Value: []byte("1")}, {Key: "a", Value: []byte("2")}},
		EventTime: 1234, OriginPos: "orders/3@99", HasProducer: true, Producer: record.ProducerID{5}, Seq: 8}
	v1 := append([]byte{1}, sink.RecordID{8}.String()[:16]...)
	v1 = append(append(v1, 4), "file"...)
	recs := []wab.Record{{Payload: []byte("a"), Meta: record.Encode(&orig)}, {Payload: []byte("b"), Meta: v1}}
	seg := filepath.Join(sdir, fmt.Sprintf("%020d.wab.sealed", 3))
	if err := wab.WriteSealed(vfs.OS, seg, wab.Header{Shard: 0, Seq: 3, Instance: testInstance}, recs); err != nil {
		t.Fatal(err)
	}
	s := &scriptSink{max: 10, script: func(_ context.Context, call int, b sink.Batch) (sink.CommitResult, error) {
		if call < 2 {
			return sink.CommitResult{}, sink.Transient(errors.New("busy"))
		}
		return sink.CommitResult{Rejected: []sink.Rejection{{Index: 0, Reason: "no", Code: sink.CodeDecode}, {Index: 1, Reason: "no"}}}, nil
	}}
	clock := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	opts := fastOptions(dir, newDirSource(dir), s, nil)
	opts.Now = func() time.Time { return clock }
	start(t, opts)
	waitFor(t, "segment removed", func() bool { return !exists(seg) })
	files, err := ListDeadLetters(vfs.OS, dir)
	if err != nil || len(files) != 1 {
		t.Fatalf("dead-letter files %+v, %v", files, err)
	}
	_, got, err := ReadDeadLetter(vfs.OS, files[0].Path)
	if err != nil || len(got) != 2 {
		t.Fatalf("%d records, %v", len(got), err)
	}
	want := orig
	want.Reject = &record.Rejection{Code: record.CodeDecode, Stage: record.StageDrain, Component: "script", Error: "no",
		Attempts: 3, FirstSeen: clock.UnixNano(), Shard: 0, Seq: 3, Index: 0, HasLocation: true}
	if !reflect.DeepEqual(got[0].Meta, want) {
		t.Errorf("record 0:\n got %+v %+v\nwant %+v %+v", got[0].Meta, got[0].Meta.Reject, want, want.Reject)
	}
	m := got[1].Meta
	if m.ID != sink.RecordID([]byte(sink.RecordID{8}.String()[:16])) || m.Source != "file" ||
		m.Reject.Code != record.CodeSinkRefused || m.Reject.Index != 1 || m.Reject.Attempts != 3 {
		t.Errorf("record 1: %+v %+v", m, m.Reject)
	}
}

// Transient errors are retried with capped exponential backoff on the same
// batch, then the drain returns to Draining.
func TestTransientRetriedWithBackoff(t *testing.T) {
	dir := t.TempDir()
	seg, _ := writeSegment(t, dir, 0, 1, "a", "b")
	s := &scriptSink{max: 10, script: func(_ context.Context, call int, b sink.Batch) (sink.CommitResult, error) {
		if call < 3 {
			return sink.CommitResult{}, sink.Transient(errors.New("connection refused"))
		}
		return sink.CommitResult{}, nil
	}}
	obs := &recObserver{}
	opts := fastOptions(dir, newDirSource(dir), s, obs)
	opts.RetryBase, opts.RetryMax, opts.MaxRetries = 10*time.Millisecond, 25*time.Millisecond, 5
	opts.Sleep = func(ctx context.Context, _ time.Duration) error { return ctx.Err() }
	start(t, opts)
	waitFor(t, "segment removed", func() bool { return !exists(seg) })

	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 25 * time.Millisecond}
	o := obs.snapshot()
	if !reflect.DeepEqual(o.retries, want) {
		t.Errorf("backoffs %v, want %v", o.retries, want)
	}
	got := s.got()
	if len(got) != 4 {
		t.Fatalf("%d commits, want 4", len(got))
	}
	for _, b := range got[1:] {
		if b.Token != got[0].Token {
			t.Error("a retry sent a different batch")
		}
	}
	if !containsRun(o.states, Draining, RetryingTransient, Draining) {
		t.Errorf("states %v", o.states)
	}
	if files, _ := os.ReadDir(DeadLetterDir(dir)); len(files) != 0 {
		t.Errorf("transient errors dead-lettered: %v", files)
	}
}

// A segment set aside because the sink was down is attempted again as
// soon as the sink is back — its health poll finds it healthy, or a sink
// opened in the background signals SinkOpened — not RetryMax later.
func TestSinkBackEndsDeferral(t *testing.T) {
	for _, tc := range []struct {
		name string
		back func(s *scriptSink, opened chan struct{})
	}{
		{"health poll finds it healthy", func(s *scriptSink, _ chan struct{}) {
			s.health.Store(&sink.Health{State: sink.Healthy})
		}},
		{"the sink opens", func(_ *scriptSink, opened chan struct{}) { close(opened) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			seg, _ := writeSegment(t, dir, 0, 1, "a", "b")
			var down atomic.Bool
			down.Store(true)
			s := &scriptSink{max: 10, script: func(context.Context, int, sink.Batch) (sink.CommitResult, error) {
				if down.Load() {
					return sink.CommitResult{}, sink.Transient(errors.New("connection refused"))
				}
				return sink.CommitResult{}, nil
			}}
			s.health.Store(&sink.Health{State: sink.Down, Reason: "connection refused"})
			obs := &recObserver{}
			opened := make(chan struct{})
			opts := fastOptions(dir, newDirSource(dir), s, obs)
			opts.MaxRetries = 1
			opts.RetryMax = time.Hour // without the sink's return, never again in this test
			opts.PollInterval = time.Hour
			opts.HealthInterval = 20 * time.Millisecond
			opts.SinkOpened = opened
			start(t, opts)
			waitFor(t, "segment set aside", func() bool { return len(obs.snapshot().deferred) > 0 })
			down.Store(false)
			tc.back(s, opened)
			waitFor(t, "segment delivered once the sink is back", func() bool { return !exists(seg) })
		})
	}
}

// containsRun reports whether want appears in states as a contiguous run.
func containsRun(states []State, want ...State) bool {
	for i := 0; i+len(want) <= len(states); i++ {
		if reflect.DeepEqual(states[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

// After MaxRetries the segment stays on disk, unconfirmed, the drain moves
// on to the next one, and the set-aside segment is attempted again later.
func TestRetriesExhaustedMovesOn(t *testing.T) {
	dir := t.TempDir()
	bad, _ := writeSegment(t, dir, 0, 1, "bad-0", "bad-1")
	good, _ := writeSegment(t, dir, 0, 2, "good-0")
	var failing atomic.Bool
	failing.Store(true)
	var badCalls atomic.Int64
	s := &scriptSink{max: 10, script: func(_ context.Context, _ int, b sink.Batch) (sink.CommitResult, error) {
		if strings.HasPrefix(string(b.Records[0].Payload), "bad") {
			badCalls.Add(1)
			if failing.Load() {
				return sink.CommitResult{}, sink.Transient(errors.New("timeout"))
			}
		}
		return sink.CommitResult{}, nil
	}}
	obs := &recObserver{}
	opts := fastOptions(dir, newDirSource(dir), s, obs)
	opts.MaxRetries = 2
	opts.RetryMax = 50 * time.Millisecond
	start(t, opts)
	waitFor(t, "good segment removed", func() bool { return !exists(good) })

	if n := badCalls.Load(); n != 3 {
		t.Errorf("bad segment attempted %d times before moving on, want 1+MaxRetries = 3", n)
	}
	if !exists(bad) || confirmedCount(t, bad) != 0 {
		t.Error("set-aside segment removed or confirmed")
	}
	if o := obs.snapshot(); len(o.deferred) != 1 || o.deferred[0].Path != bad {
		t.Errorf("deferred %v", o.deferred)
	}
	if len(s.got()) != 4 {
		t.Errorf("%d commits, want 3 failed + 1 good", len(s.got()))
	}
	failing.Store(false)
	waitFor(t, "bad segment delivered on a later pass", func() bool { return !exists(bad) })
}

// A restart resumes past the confirmed sidecar: the sink never sees a
// confirmed sub-batch again. A commit cut short by cancellation is neither
// confirmed nor dead-lettered.
func TestRestartResumesPastConfirmed(t *testing.T) {
	dir := t.TempDir()
	seg, _ := writeSegment(t, dir, 0, 1, payloads("p", 10)...)
	var r1 *running
	s1 := &scriptSink{max: 3}
	s1.script = func(ctx context.Context, call int, b sink.Batch) (sink.CommitResult, error) {
		if call < 2 {
			return sink.CommitResult{}, nil
		}
		r1.cancel() // the daemon stops mid-commit
		<-ctx.Done()
		return sink.CommitResult{}, ctx.Err()
	}
	d1, err := New(fastOptions(dir, newDirSource(dir), s1, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r1 = &running{d: d1, cancel: cancel}
	if err := d1.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := confirmedCount(t, seg); n != 6 {
		t.Fatalf("confirmed %d after two sub-batches, want 6", n)
	}
	if !exists(seg) {
		t.Fatal("segment removed before it was delivered")
	}
	if files, _ := os.ReadDir(DeadLetterDir(dir)); len(files) != 0 {
		t.Errorf("cancelled commit dead-lettered: %v", files)
	}

	s2 := &scriptSink{max: 3}
	start(t, fastOptions(dir, newDirSource(dir), s2, nil))
	waitFor(t, "segment removed", func() bool { return !exists(seg) })
	var got []string
	for _, b := range s2.got() {
		got = append(got, payloadsOf(b)...)
	}
	if want := payloads("p", 10)[6:]; !reflect.DeepEqual(got, want) {
		t.Errorf("after restart the sink got %v, want %v", got, want)
	}
}

// A segment whose every record is already confirmed (a crash between the
// last confirmation and the removal) is removed without a commit.
func TestFullyConfirmedSegmentRemoved(t *testing.T) {
	dir := t.TempDir()
	seg, _ := writeSegment(t, dir, 0, 1, "a", "b")
	if err := wab.WriteConfirmed(vfs.OS, seg, 2); err != nil {
		t.Fatal(err)
	}
	s := &scriptSink{max: 10}
	start(t, fastOptions(dir, newDirSource(dir), s, nil))
	waitFor(t, "segment removed", func() bool { return !exists(seg) })
	if len(s.got()) != 0 {
		t.Errorf("sink got %v", s.got())
	}
}

// blockedSetup writes a segment of two sub-batches whose second is partly
// rejected, and fills the dead-letter lane past a small cap with
// dl_00000004.
func blockedSetup(t *testing.T, dir string) (seg string, full string, s *scriptSink, opts Options, obs *recObserver) {
	t.Helper()
	seg, _ = writeSegment(t, dir, 0, 1, "p-0", "p-1", "poison-2", "p-3")
	if err := os.MkdirAll(DeadLetterDir(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	full = filepath.Join(DeadLetterDir(dir), DeadLetterName(4))
	old := []wab.Record{{Payload: make([]byte, 2000), Meta: record.Encode(&record.Meta{HasID: true, Reject: &record.Rejection{Error: "old"}})}}
	if err := wab.WriteSealed(vfs.OS, full, wab.Header{Shard: wab.DeadLetterShard, Seq: 4}, old); err != nil {
		t.Fatal(err)
	}
	s = &scriptSink{max: 2, script: func(_ context.Context, _ int, b sink.Batch) (sink.CommitResult, error) {
		var res sink.CommitResult
		for i, r := range b.Records {
			if strings.HasPrefix(string(r.Payload), "poison") {
				res.Rejected = append(res.Rejected, sink.Rejection{Index: i, Reason: "poison"})
			}
		}
		return res, nil
	}}
	obs = &recObserver{}
	opts = fastOptions(dir, newDirSource(dir), s, obs)
	opts.DeadLetterMaxBytes = 1500
	opts.HealthInterval = 5 * time.Millisecond
	return seg, full, s, opts, obs
}

// A full dead-letter lane blocks the drain (counted once, however many
// wakes), removing files unblocks it, and the same sub-batch is sent again —
// never the sub-batch already confirmed.
func TestDeadLetterCapBlocksThenResumes(t *testing.T) {
	dir := t.TempDir()
	seg, full, s, opts, obs := blockedSetup(t, dir)
	r := start(t, opts)
	if files, bytes := r.d.DeadLetterTotals(); files != 1 || bytes <= 1500 {
		t.Fatalf("totals at start: %d files, %d bytes", files, bytes)
	}
	waitFor(t, "blocked", func() bool { return r.d.State() == BlockedDeadLetterFull })
	healthBefore := s.healthCalls.Load()
	time.Sleep(50 * time.Millisecond) // ten wakes
	if o := obs.snapshot(); o.full != 1 {
		t.Errorf("dead_letter_full counted %d times, want 1", o.full)
	}
	if s.healthCalls.Load() <= healthBefore {
		t.Error("sink health not polled while blocked")
	}
	if n := confirmedCount(t, seg); n != 2 {
		t.Errorf("confirmed %d while blocked, want 2 (first sub-batch only)", n)
	}
	if !exists(seg) {
		t.Fatal("segment removed while blocked")
	}

	if err := RemoveDeadLetter(vfs.OS, dir, filepath.Base(full)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "segment removed", func() bool { return !exists(seg) })

	got := s.got()
	var sent [][]string
	for _, b := range got {
		sent = append(sent, payloadsOf(b))
	}
	want := [][]string{{"p-0", "p-1"}, {"poison-2", "p-3"}, {"poison-2", "p-3"}}
	if !reflect.DeepEqual(sent, want) {
		t.Errorf("sink got %v, want %v", sent, want)
	}
	o := obs.snapshot()
	if o.full != 1 {
		t.Errorf("dead_letter_full counted %d times, want 1", o.full)
	}
	if !containsRun(o.states, BlockedDeadLetterFull, Draining) {
		t.Errorf("states %v", o.states)
	}
	files, err := ListDeadLetters(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].Name != DeadLetterName(5) || files[0].Records != 1 {
		t.Errorf("dead-letter files %+v, want one dl_00000005 of one record", files)
	}
	if o.totals != [2]int64{1, files[0].Bytes} {
		t.Errorf("observed totals %v", o.totals)
	}
}

// Cancelling while blocked returns without confirming the blocked
// sub-batch; the next run sends it (and only it) again.
func TestCancelWhileBlockedDoesNotConfirm(t *testing.T) {
	dir := t.TempDir()
	seg, full, _, opts, _ := blockedSetup(t, dir)
	r := start(t, opts)
	waitFor(t, "blocked", func() bool { return r.d.State() == BlockedDeadLetterFull })
	r.stop(t)
	if n := confirmedCount(t, seg); n != 2 {
		t.Errorf("confirmed %d after cancel while blocked, want 2", n)
	}
	if files, _ := ListDeadLetters(vfs.OS, dir); len(files) != 1 {
		t.Errorf("dead-letter files %+v", files)
	}

	if err := os.Remove(full); err != nil {
		t.Fatal(err)
	}
	s2 := &scriptSink{max: 2}
	opts.Sink = s2
	opts.Observer = nil
	start(t, opts)
	waitFor(t, "segment removed", func() bool { return !exists(seg) })
	if got := s2.got(); len(got) != 1 || !reflect.DeepEqual(payloadsOf(got[0]), []string{"poison-2", "p-3"}) {
		t.Errorf("after restart the sink got %v", got)
	}
}

// Sink health is polled on its interval while idle, and reported.
func TestHealthPolledWhileIdle(t *testing.T) {
	dir := t.TempDir()
	s := &scriptSink{max: 1}
	s.health.Store(&sink.Health{State: sink.Degraded, Reason: "replica lag"})
	obs := &recObserver{}
	opts := fastOptions(dir, newDirSource(dir), s, obs)
	opts.HealthInterval = 5 * time.Millisecond
	r := start(t, opts)
	waitFor(t, "three health polls", func() bool { return len(obs.snapshot().health) >= 3 })
	if r.d.State() != Idle {
		t.Errorf("state %v, want idle", r.d.State())
	}
	if h := obs.snapshot().health[0]; h.State != sink.Degraded || h.Reason != "replica lag" {
		t.Errorf("reported health %+v", h)
	}
	if st := obs.snapshot().states; len(st) == 0 || st[0] != Idle {
		t.Errorf("initial state not reported: %v", st)
	}
}

var _ Source = (*wab.Log)(nil)

// End to end with the real write-ahead buffer: records submitted to a
// wab.Log, sealed on close, are delivered in order with the ids the WAB
// assigns, and the segments removed.
func TestDrainsRealLog(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	l, err := wab.Open(ctx, wab.Options{Dir: dir, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]string{0: payloads("s0", 20), 1: payloads("s1", 7)}
	for shard, ps := range want {
		for _, p := range ps {
			done := make(chan error, 1)
			req := &wab.Request{Durability: wab.Durable, Payloads: [][]byte{[]byte(p)}, Received: baseReceived,
				Done: func(err error) { done <- err }}
			if err := l.Submit(ctx, shard, req, time.Second); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	refs, err := wab.ListSealed(vfs.OS, dir)
	if err != nil || len(refs) == 0 {
		t.Fatalf("sealed %v, %v", refs, err)
	}
	ids := map[sink.RecordID]bool{}
	for _, ref := range refs {
		r, err := wab.OpenSegment(vfs.OS, ref.Path)
		if err != nil {
			t.Fatal(err)
		}
		for i := uint64(0); ; i++ {
			rec, err := r.Next()
			if err != nil {
				break
			}
			if r.Header().Flags&wab.FlagTimeOrderedIDs == 0 {
				t.Fatal("a segment the log wrote lays ids out without time")
			}
			id := record.TimeOrdered(sink.RecordID(wab.RecordID(r.Header(), i, rec.Payload)), rec.Received)
			if at, ok := record.IDTime(id); !ok || at.UnixMilli() != rec.Received/1e6 {
				t.Fatalf("id %s carries %v, received %d", id, at, rec.Received)
			}
			ids[id] = true
		}
		r.Close()
	}

	s := &scriptSink{max: 4}
	obs := &recObserver{}
	start(t, fastOptions(dir, listSource{dir}, s, obs))
	waitFor(t, "all delivered", func() bool { return len(obs.snapshot().delivered) == len(refs) })
	got := map[int][]string{}
	for _, b := range s.got() {
		for _, r := range b.Records {
			p := string(r.Payload)
			shard := int(p[1] - '0')
			got[shard] = append(got[shard], p)
			if !ids[r.ID] {
				t.Errorf("%s: id %s not the WAB's", p, r.ID)
			}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("delivered %v, want %v", got, want)
	}
	if left, err := wab.ListSealed(vfs.OS, dir); err != nil || len(left) != 0 {
		t.Errorf("left %v, %v", left, err)
	}
}

// listSource lists a closed WAB directory.
type listSource struct{ dir string }

func (s listSource) Sealed() ([]wab.SegmentRef, error) { return wab.ListSealed(vfs.OS, s.dir) }
func (listSource) Notify() <-chan struct{}             { return nil }

// A segment that cannot be read is set aside and left on disk — never
// skipped or removed — and the other segments are still delivered.
func TestUnreadableSegmentLeftOnDisk(t *testing.T) {
	dir := t.TempDir()
	good, _ := writeSegment(t, dir, 1, 1, "ok")
	bad := filepath.Join(dir, "shard-000", "00000000000000000001.wab.sealed")
	if err := os.MkdirAll(filepath.Dir(bad), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("not a segment at all, definitely not"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &scriptSink{max: 10}
	obs := &recObserver{}
	start(t, fastOptions(dir, newDirSource(dir), s, obs))
	waitFor(t, "good segment removed", func() bool { return !exists(good) })
	waitFor(t, "bad segment set aside", func() bool { return len(obs.snapshot().deferred) > 0 })
	if !exists(bad) {
		t.Error("unreadable segment removed")
	}
	if got := s.got(); len(got) != 1 || !reflect.DeepEqual(payloadsOf(got[0]), []string{"ok"}) {
		t.Errorf("sink got %v", got)
	}
}
