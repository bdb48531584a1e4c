package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/sink"
)

// newBudget makes a budget of limit bytes, warm from the start.
func newBudget(t *testing.T, limit int64) *flow.Budget {
	t.Helper()
	b := flow.NewBudget(flow.BudgetOptions{Limit: limit, WarmupFraction: 1})
	t.Cleanup(b.Close)
	return b
}

// heldBytes is what a batch of records holds once numbered for the
// secondaries.
func heldBytes(recs []sink.Record) int64 {
	var n int64
	for i := range recs {
		n += int64(unsafe.Sizeof(sink.Positioned{}.Pos)) + recs[i].MemSize()
	}
	return n
}

// waitInUse polls until the budget holds want bytes.
func waitInUse(t *testing.T, b *flow.Budget, want int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("the budget to hold %d bytes", want), func() bool { return b.Stats().InUse == want })
}

// watchSink is a memSink that calls check with every batch before
// committing it and records the batch sizes.
type watchSink struct {
	*memSink
	check func(b sink.Batch)
	mu    sync.Mutex
	sizes []int
}

func (w *watchSink) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	w.mu.Lock()
	w.sizes = append(w.sizes, len(b.Records))
	w.mu.Unlock()
	if w.check != nil {
		w.check(b)
	}
	return w.memSink.Commit(ctx, b)
}

func (w *watchSink) batchSizes() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.sizes...)
}

// testPacer is a flow.Pacer with a fixed batch percent that counts what
// it is told.
type testPacer struct {
	percent           int
	failed, succeeded atomic.Int64
}

func (p *testPacer) Scale(n int) int { return max(1, n*p.percent/100) }
func (p *testPacer) WriteFailed()    { p.failed.Add(1) }
func (p *testPacer) WriteSucceeded() { p.succeeded.Add(1) }

// With the budget exhausted, Commit still returns at once: the batches are
// dropped to recovery instead of holding raw back, and nothing is
// reserved for them. Once the budget frees up, recovery delivers them and
// gives back every window's reservation.
func TestFanoutDropsToRecoveryWhenBudgetExhausted(t *testing.T) {
	rawDir := t.TempDir()
	raw := openRaw(t, rawDir)
	mem := newMemSink("mem")
	budget := newBudget(t, 1<<20)
	if ok, _ := budget.TryAcquire(1 << 20); !ok {
		t.Fatal("cannot hold the whole budget")
	}
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: raw, Store: openStore(t, rawDir), FlushInterval: 10 * time.Millisecond, RecoveryInterval: 10 * time.Millisecond,
		Budget: budget, Secondaries: []engine.SecondaryConfig{{Sink: mem}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	batches := make([]sink.Batch, 20)
	for i := range batches {
		batches[i] = mkBatch(10)
	}
	commitWithin(t, f, batches, 10*time.Second, "the budget")
	st := f.Stats()
	if s := st.Sinks[0]; s.LiveDropped != 200 || s.Queued != 0 || s.LiveDelivered != 0 || mem.count() != 0 {
		t.Fatalf("with no budget to queue, stats %+v and %d delivered", s, mem.count())
	}
	if in := budget.Stats().InUse; in != 1<<20 {
		t.Fatalf("budget holds %d bytes besides the test's", in-(1<<20))
	}
	budget.Release(1 << 20)
	waitCaughtUp(t, f, 10*time.Second)
	if mem.count() != 200 {
		t.Fatalf("recovered %d records, want 200", mem.count())
	}
	waitInUse(t, budget, 0)
}

// A live batch queued to two secondaries reserves what it holds once, and
// keeps it until the slower one has committed it.
func TestFanoutLiveBatchHoldsBudgetUntilCommitted(t *testing.T) {
	rawDir := t.TempDir()
	raw := openRaw(t, rawDir)
	slow, fast := newMemSink("slow"), newMemSink("fast")
	slow.hold = make(chan struct{})
	budget := newBudget(t, 1<<20)
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: raw, Store: openStore(t, rawDir), Role: engine.RoleIngest, Budget: budget,
		Secondaries: []engine.SecondaryConfig{{Sink: slow}, {Sink: fast}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := mkBatch(10)
	if _, err := f.Commit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "fast has the batch", func() bool { return fast.count() == 10 })
	if in := budget.Stats().InUse; in != heldBytes(b.Records) {
		t.Fatalf("budget holds %d bytes while the slow secondary commits, want the batch's %d once", in, heldBytes(b.Records))
	}
	close(slow.hold)
	waitFor(t, "slow has the batch", func() bool { return slow.count() == 10 })
	waitInUse(t, budget, 0)
}

// A live queue is bounded in bytes as well as in batches: a batch that
// would take a non-empty queue past QueueBytes is dropped to recovery,
// holding nothing; the queue's fill, as flow control reads it, counts its
// bytes.
func TestFanoutQueueBoundedInBytes(t *testing.T) {
	rawDir := t.TempDir()
	raw := openRaw(t, rawDir)
	mem := newMemSink("mem")
	mem.hold = make(chan struct{})
	budget := newBudget(t, 1<<20)
	b1, b2 := mkBatch(10), mkBatch(10)
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: raw, Store: openStore(t, rawDir), Role: engine.RoleIngest, Budget: budget,
		Secondaries: []engine.SecondaryConfig{{Sink: mem, QueueBytes: heldBytes(b1.Records) + 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fill := f.QueueFills()["mem"]
	if fill == nil || fill() != 0 {
		t.Fatal("no empty queue fill for the secondary")
	}
	for _, b := range []sink.Batch{b1, b2} {
		if _, err := f.Commit(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	st := f.Stats().Sinks[0]
	if st.Queued != 10 || st.LiveDropped != 10 {
		t.Fatalf("queue bounded by one batch's bytes: %d queued, %d dropped; want 10 and 10", st.Queued, st.LiveDropped)
	}
	if got := fill(); got < 0.99 {
		t.Errorf("fill %v with the queue's bytes at its bound", got)
	}
	if in := budget.Stats().InUse; in != heldBytes(b1.Records) {
		t.Errorf("budget holds %d bytes, want the queued batch's %d", in, heldBytes(b1.Records))
	}
	close(mem.hold)
	waitFor(t, "queued batch delivered", func() bool { return mem.count() == 10 })
	waitInUse(t, budget, 0)
	waitFor(t, "queue empty", func() bool { return fill() == 0 })
}

// rawWith commits n batches of size records to a fresh raw through an
// ingest fan-out without secondaries, and returns raw and its directory;
// the offset store on disk knows raw's end.
func rawWith(t *testing.T, n, size int) (sink.Raw, string) {
	t.Helper()
	batches := make([]sink.Batch, n)
	for i := range batches {
		batches[i] = mkBatch(size)
	}
	return rawOf(t, batches...)
}

// rawOfPayloads is rawWith for one record of each payload size.
func rawOfPayloads(t *testing.T, sizes ...int) (sink.Raw, string) {
	t.Helper()
	batches := make([]sink.Batch, len(sizes))
	for i, n := range sizes {
		batches[i] = mkBatch(1)
		batches[i].Records[0].Payload = make([]byte, n)
	}
	return rawOf(t, batches...)
}

// rawOf is rawWith for the batches given.
func rawOf(t *testing.T, batches ...sink.Batch) (sink.Raw, string) {
	t.Helper()
	rawDir := t.TempDir()
	raw := openRaw(t, rawDir)
	store := openStore(t, rawDir)
	ingest, err := engine.NewFanout(context.Background(), engine.FanoutOptions{Raw: raw, Store: store, Role: engine.RoleIngest})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ingest.Close() })
	for _, b := range batches {
		if _, err := ingest.Commit(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return raw, rawDir
}

// A recovery-only node reserves each window before reading it from raw —
// no more than a quarter of what the budget can grant, so windows shrink
// to fit — holds it while the secondary commits, and gives it back
// afterwards.
func TestRecoveryWindowReservesBudget(t *testing.T) {
	raw, rawDir := rawWith(t, 10, 50)
	budget := newBudget(t, 64<<10)
	var short, over atomic.Int64
	sec := &watchSink{memSink: newMemSink("mem")}
	sec.check = func(b sink.Batch) {
		held := heldBytes(b.Records)
		if budget.Stats().InUse < held {
			short.Add(1)
		}
		if held > budget.Stats().Grantable/4 {
			over.Add(1)
		}
	}
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Reader: raw, Store: openStore(t, rawDir), Role: engine.RoleRecovery, RecoveryInterval: 10 * time.Millisecond,
		WindowRecords: 1000, Budget: budget, Secondaries: []engine.SecondaryConfig{{Sink: sec, Name: "mem"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	waitCaughtUp(t, f, 10*time.Second)
	if sec.count() != 500 {
		t.Fatalf("recovered %d records, want 500", sec.count())
	}
	if n := short.Load(); n != 0 {
		t.Errorf("%d recovery commits held less than their records", n)
	}
	// A window reads what a quarter of 64 KiB holds, however many
	// records that is, and no more.
	if n := over.Load(); n != 0 {
		t.Errorf("%d recovery windows held more than a quarter of the budget", n)
	}
	waitInUse(t, budget, 0)
}

// A recovery window waiting for the budget does not stop live delivery:
// the live batches queued meanwhile are committed — and release what they
// hold, which may be what the window waits for.
func TestRecoveryWindowWaitsBesideLiveQueue(t *testing.T) {
	rawDir := t.TempDir()
	raw := openRaw(t, rawDir)
	mem := newMemSink("mem")
	mem.hold = make(chan struct{})
	budget := newBudget(t, 1<<20)
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: raw, Store: openStore(t, rawDir), RecoveryInterval: 5 * time.Millisecond, Budget: budget,
		Secondaries: []engine.SecondaryConfig{{Sink: mem}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Ten live batches: the worker holds the first in Commit, nine wait.
	for range 10 {
		if _, err := f.Commit(context.Background(), mkBatch(10)); err != nil {
			t.Fatal(err)
		}
	}
	// The rest of the budget is taken, so the next batch is dropped: a
	// gap whose window (500 records at the 256-byte seed) is larger than
	// what the live batches will give back.
	rest := budget.Stats().Limit - budget.Stats().InUse
	if ok, _ := budget.TryAcquire(rest); !ok {
		t.Fatal("cannot take the rest of the budget")
	}
	if _, err := f.Commit(context.Background(), mkBatch(500)); err != nil {
		t.Fatal(err)
	}
	if st := f.Stats().Sinks[0]; st.LiveDropped != 500 || st.Queued != 100 {
		t.Fatalf("stats %+v, want 100 queued and 500 dropped", st)
	}
	close(mem.hold)
	// After eight live batches the window has its turn and waits; the two
	// batches still queued are delivered all the same.
	waitFor(t, "every live batch delivered while the window waits", func() bool {
		return mem.count() == 100 && budget.Stats().Waiting == 1
	})
	budget.Release(rest)
	waitCaughtUp(t, f, 10*time.Second)
	if mem.count() != 600 {
		t.Fatalf("delivered %d, want 600", mem.count())
	}
	waitInUse(t, budget, 0)
}

// The batches committed to a secondary, live and in recovery, follow the
// pacer, asked at each batch; every commit that returned is reported.
func TestFanoutFollowsPacer(t *testing.T) {
	t.Run("live", func(t *testing.T) {
		rawDir := t.TempDir()
		raw := openRaw(t, rawDir)
		sec := &watchSink{memSink: newMemSink("mem")} // MaxBatchSize 1000
		p := &testPacer{percent: 10}
		f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
			Raw: raw, Store: openStore(t, rawDir), Role: engine.RoleIngest, Pacer: p,
			Secondaries: []engine.SecondaryConfig{{Sink: sec, Name: "mem"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Commit(context.Background(), mkBatch(250)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "delivered", func() bool { return sec.count() == 250 })
		if got := sec.batchSizes(); len(got) != 3 || got[0] != 100 || got[1] != 100 || got[2] != 50 {
			t.Errorf("live batches %v, want [100 100 50]", got)
		}
		if p.succeeded.Load() != 3 || p.failed.Load() != 0 {
			t.Errorf("pacer told %d succeeded, %d failed", p.succeeded.Load(), p.failed.Load())
		}
	})
	t.Run("recovery", func(t *testing.T) {
		raw, rawDir := rawWith(t, 3, 100)
		sec := &watchSink{memSink: newMemSink("mem")}
		sec.down.Store(true)
		p := &testPacer{percent: 25}
		f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
			Reader: raw, Store: openStore(t, rawDir), Role: engine.RoleRecovery, RecoveryInterval: 5 * time.Millisecond,
			RetryMin: time.Millisecond, RetryMax: 2 * time.Millisecond, WindowRecords: 80, Pacer: p,
			Secondaries: []engine.SecondaryConfig{{Sink: sec, Name: "mem"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		waitFor(t, "failed writes reported", func() bool { return p.failed.Load() >= 3 })
		sec.down.Store(false)
		waitCaughtUp(t, f, 10*time.Second)
		for _, n := range sec.batchSizes() {
			if n > 20 {
				t.Errorf("a recovery window of %d records; 25%% of 80 is 20", n)
			}
		}
		if sec.count() != 300 || p.succeeded.Load() < 15 {
			t.Errorf("recovered %d, pacer told %d succeeded", sec.count(), p.succeeded.Load())
		}
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Live batches together hold at most a quarter of what the budget grants:
// a secondary that never commits keeps its queue full, and what it holds
// must not grow to starve the stages in front of raw; the rest drops to
// recovery.
func TestFanoutLiveBatchesKeepToTheirShare(t *testing.T) {
	rawDir := t.TempDir()
	raw := openRaw(t, rawDir)
	stuck := newMemSink("stuck")
	stuck.hold = make(chan struct{})
	defer close(stuck.hold)
	one := heldBytes(mkBatch(10).Records)
	budget := newBudget(t, 4*(3*one+one/2)) // a quarter holds three batches
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: raw, Store: openStore(t, rawDir), Role: engine.RoleIngest, Budget: budget,
		Secondaries: []engine.SecondaryConfig{{Sink: stuck, QueueBytes: 1 << 30}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 10 {
		if _, err := f.Commit(context.Background(), mkBatch(10)); err != nil {
			t.Fatal(err)
		}
	}
	quarter := budget.Stats().Limit / 4
	if in := budget.Stats().InUse; in > quarter || in < 2*one {
		t.Fatalf("live batches hold %d bytes, want at most a quarter of the budget (%d) and at least two batches", in, quarter)
	}
	if st := f.Stats().Sinks[0]; st.LiveDropped < 60 || st.LiveDropped > 80 {
		t.Fatalf("dropped %d records to recovery, want about 70 (the batches past the share)", st.LiveDropped)
	}
}

// countingReader is a sink.RawReader that records what each ReadFrom
// returned: the bytes its records hold (sink.Positioned.MemSize), and the
// byte bound it was asked for.
type countingReader struct {
	sink.RawReader
	mu    sync.Mutex
	reads []readCount
}

type readCount struct {
	records         int
	bytes, maxBytes int64
	first           int64 // the first record's bytes
}

func (c *countingReader) ReadFrom(ctx context.Context, from uint64, max int, maxBytes int64) ([]sink.Positioned, error) {
	recs, err := c.RawReader.ReadFrom(ctx, from, max, maxBytes)
	rc := readCount{records: len(recs), maxBytes: maxBytes}
	for i := range recs {
		rc.bytes += recs[i].MemSize()
	}
	if len(recs) > 0 {
		rc.first = recs[0].MemSize()
	}
	c.mu.Lock()
	c.reads = append(c.reads, rc)
	c.mu.Unlock()
	return recs, err
}

func (c *countingReader) counts() []readCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]readCount(nil), c.reads...)
}

// Issue #24: after a restart the first recovery window was sized from the
// 256-byte record_size_estimate and read a whole window of records
// whatever their size — with 48 KiB records, hundreds of times what it
// had reserved, held unreserved for as long as the secondary stalled. The
// window's reservation is now the byte bound of its read, so what
// recovery holds stays within a quarter of what the budget can grant from
// the first window on, and is reserved.
func TestRecoveryWindowBoundedByItsReservationFromTheFirstWindow(t *testing.T) {
	const size = 48 << 10
	sizes := make([]int, 200)
	for i := range sizes {
		sizes[i] = size
	}
	raw, rawDir := rawOfPayloads(t, sizes...)
	budget := newBudget(t, 1<<20)
	quarter := budget.Stats().Grantable / 4
	reader := &countingReader{RawReader: raw}
	sec := newMemSink("mem")
	sec.hold = make(chan struct{}) // stalled
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Reader: reader, Store: openStore(t, rawDir), Role: engine.RoleRecovery, RecoveryInterval: 5 * time.Millisecond,
		WindowRecords: 4096, RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
		RecordSizeEstimate: 256, Budget: budget, Secondaries: []engine.SecondaryConfig{{Sink: sec, Name: "mem"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	waitFor(t, "the first window read, its commit stalled", func() bool {
		return len(reader.counts()) > 0 && sec.calls.Load() > 0
	})
	// Stalled: the window read is all recovery holds, and it is reserved.
	for range 20 {
		rc := reader.counts()
		last := rc[len(rc)-1]
		in := budget.Stats().InUse
		if last.bytes > quarter || in > quarter {
			t.Fatalf("stalled, recovery read %d records holding %d bytes and reserves %d; a quarter of the budget is %d",
				last.records, last.bytes, in, quarter)
		}
		if in < last.bytes {
			t.Fatalf("stalled, recovery holds %d bytes read with %d reserved", last.bytes, in)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(sec.hold)
	waitCaughtUp(t, f, 20*time.Second)
	if sec.count() != 200 {
		t.Fatalf("recovered %d records, want 200", sec.count())
	}
	for i, rc := range reader.counts() {
		if rc.maxBytes <= 0 || rc.maxBytes > quarter {
			t.Errorf("read %d: asked for at most %d bytes; a quarter of the budget is %d", i, rc.maxBytes, quarter)
		}
		if rc.bytes > max(rc.maxBytes, rc.first) || (rc.bytes > rc.maxBytes && rc.records != 1) {
			t.Errorf("read %d: %d records holding %d bytes, bound %d", i, rc.records, rc.bytes, rc.maxBytes)
		}
	}
	waitInUse(t, budget, 0)
}

// A record larger than a window's reservation is admitted alone, its
// whole size reserved, as flow control admits a record larger than a
// share; one larger than the budget can grant at all goes to the
// secondary's quarantine lane with code oversize, and recovery goes on
// past it.
func TestRecoveryWindowOversizeRecords(t *testing.T) {
	budget := newBudget(t, 1<<20)
	g := budget.Stats().Grantable
	raw, rawDir := rawOfPayloads(t, 100, 100, int(g/2), 100, int(g+1), 100)
	var mu sync.Mutex
	var quarantined []lane.Rejected
	sec := &watchSink{memSink: newMemSink("mem")}
	var big atomic.Int64
	sec.check = func(b sink.Batch) {
		if len(b.Records[0].Payload) == int(g/2) {
			big.Store(budget.Stats().InUse)
		}
	}
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Reader: raw, Store: openStore(t, rawDir), Role: engine.RoleRecovery, RecoveryInterval: 5 * time.Millisecond,
		Budget: budget, Secondaries: []engine.SecondaryConfig{{Sink: sec, Name: "mem",
			Quarantine: lane.Func(func(_ context.Context, qs []lane.Rejected) error {
				mu.Lock()
				defer mu.Unlock()
				quarantined = append(quarantined, qs...)
				return nil
			})}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	waitCaughtUp(t, f, 10*time.Second)
	if sec.count() != 5 {
		t.Fatalf("recovered %d records, want the 5 the budget can grant", sec.count())
	}
	if n := big.Load(); n < int64(g/2) {
		t.Errorf("the record of half the budget was committed with %d bytes reserved", n)
	}
	waitFor(t, "the oversize record quarantined", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(quarantined) == 1
	})
	if q := quarantined[0]; q.Pos != 4 || q.Reject.Code != sink.CodeOversize || len(q.Record.Payload) != int(g+1) {
		t.Errorf("quarantined position %d, code %v, %d bytes; want position 4, oversize, %d bytes", q.Pos, q.Reject.Code, len(q.Record.Payload), g+1)
	}
	waitInUse(t, budget, 0)
}
