package drain

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

// newBudget makes a budget of limit bytes, warm from the start unless
// warmup (the fraction grantable at first) is below 1; it never steps up
// during a test.
func newBudget(t *testing.T, limit int64, warmup float64) *flow.Budget {
	t.Helper()
	b := flow.NewBudget(flow.BudgetOptions{Limit: limit, WarmupFraction: warmup, WarmupAcks: 1 << 30, WarmupTimeout: time.Hour})
	t.Cleanup(b.Close)
	return b
}

// checkReleased fails the test unless the budget holds and waits for
// nothing.
func checkReleased(t *testing.T, b *flow.Budget) {
	t.Helper()
	if st := b.Stats(); st.InUse != 0 || st.Waiting != 0 {
		t.Errorf("budget after the drain stopped: %d bytes in use, %d waiting; want none", st.InUse, st.Waiting)
	}
}

// The drain holds a reservation covering every record of a sub-batch
// while the sink commits it, and gives back exactly what it took on every
// path: committed, retried after a transient error, dead-lettered after a
// permanent one or a rejection, set aside after exhausted retries, cut
// short by shutdown.
func TestAdmissionReleasesOnEveryPath(t *testing.T) {
	floor := flow.NewEstimator(0).Floor()
	type script = func(ctx context.Context, call int, b sink.Batch) (sink.CommitResult, error)
	for _, tc := range []struct {
		name   string
		script script
		// done reports when the scenario has played out.
		done func(seg string, o *recObserver) bool
	}{
		{"committed", nil, func(seg string, _ *recObserver) bool { return !exists(seg) }},
		{"transient then committed", func(_ context.Context, call int, _ sink.Batch) (sink.CommitResult, error) {
			if call%2 == 0 {
				return sink.CommitResult{}, sink.Transient(errors.New("busy"))
			}
			return sink.CommitResult{}, nil
		}, func(seg string, _ *recObserver) bool { return !exists(seg) }},
		{"permanent error to dead letter", func(context.Context, int, sink.Batch) (sink.CommitResult, error) {
			return sink.CommitResult{}, sink.Permanent(errors.New("no such table"))
		}, func(seg string, _ *recObserver) bool { return !exists(seg) }},
		{"rejections to dead letter", func(context.Context, int, sink.Batch) (sink.CommitResult, error) {
			return sink.CommitResult{Rejected: []sink.Rejection{{Index: 0, Reason: "bad"}}}, nil
		}, func(seg string, _ *recObserver) bool { return !exists(seg) }},
		{"retries exhausted", func(context.Context, int, sink.Batch) (sink.CommitResult, error) {
			return sink.CommitResult{}, sink.Transient(errors.New("down"))
		}, func(_ string, o *recObserver) bool { return len(o.deferred) > 0 }},
		{"shutdown mid-batch", func(ctx context.Context, _ int, _ sink.Batch) (sink.CommitResult, error) {
			<-ctx.Done()
			return sink.CommitResult{}, ctx.Err()
		}, func(_ string, o *recObserver) bool { return o.commits == 0 }}, // stopped while the first commit waits
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			seg, _ := writeSegment(t, dir, 0, 1, payloads("p", 10)...)
			budget := newBudget(t, 1<<20, 1)
			var short, calls atomic.Int64
			s := &scriptSink{max: 4, script: func(ctx context.Context, call int, b sink.Batch) (sink.CommitResult, error) {
				calls.Add(1)
				if in := budget.Stats().InUse; in < int64(len(b.Records))*floor {
					short.Add(1) // a record held without its reservation
				}
				if tc.script == nil {
					return sink.CommitResult{}, nil
				}
				return tc.script(ctx, call, b)
			}}
			obs := &recObserver{}
			opts := fastOptions(dir, newDirSource(dir), s, obs)
			opts.MaxRetries = 1
			opts.Budget = budget
			r := start(t, opts)
			waitFor(t, "first commit", func() bool { return calls.Load() > 0 })
			waitFor(t, tc.name, func() bool { o := obs.snapshot(); return tc.done(seg, &o) })
			r.stop(t)
			if n := short.Load(); n != 0 {
				t.Errorf("%d commits saw less reserved than their records' floor", n)
			}
			checkReleased(t, budget)
		})
	}
}

// A record larger than the budget can grant during warm-up (it would fit
// the whole budget) goes at once to the dead-letter lane with code
// oversize, counted; the records before and behind it are delivered, in
// order, and the segment is removed.
func TestOversizeDuringWarmupDeadLettered(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("x", 100<<10) // ×4 (cold ratio) is more than 256 KiB, less than 1 MiB
	recs := append(append(payloads("a", 5), big), payloads("b", 5)...)
	seg, h := writeSegment(t, dir, 0, 1, recs...)
	budget := newBudget(t, 1<<20, 0.25)
	s := &scriptSink{max: 100}
	obs := &recObserver{}
	var oversize atomic.Int64
	opts := fastOptions(dir, newDirSource(dir), s, obs)
	opts.Budget = budget
	opts.Oversize = func() { oversize.Add(1) }
	start(t, opts)
	waitFor(t, "segment removed", func() bool { return !exists(seg) })

	var got []string
	for _, b := range s.got() {
		got = append(got, payloadsOf(b)...)
	}
	if want := append(payloads("a", 5), payloads("b", 5)...); !reflect.DeepEqual(got, want) {
		t.Errorf("sink got %v, want %v", got, want)
	}
	// Every successful commit told how fresh its records were.
	if o := obs.snapshot(); len(o.fresh) == 0 || o.fresh[0] <= 0 {
		t.Errorf("freshness observed %v, want an age for the delivered records", o.fresh)
	}
	files, err := ListDeadLetters(vfs.OS, dir)
	if err != nil || len(files) != 1 || files[0].Records != 1 {
		t.Fatalf("dead-letter files %+v, %v", files, err)
	}
	_, dl, err := ReadDeadLetter(vfs.OS, files[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	rj := dl[0].Meta.Reject
	if string(dl[0].Payload) != big || rj.Code != record.CodeOversize || rj.Stage != record.StageDrain ||
		rj.Index != 5 || rj.Attempts != 0 || !strings.Contains(rj.Error, "grantable") {
		t.Errorf("dead letter %+v", rj)
	}
	if id := sink.RecordID(wab.RecordID(h, 5, []byte(big))); dl[0].Meta.ID != id {
		t.Errorf("dead letter id %s, want %s", dl[0].Meta.ID, id)
	}
	if n := oversize.Load(); n != 1 {
		t.Errorf("oversize counted %d times", n)
	}
	if o := obs.snapshot(); !reflect.DeepEqual(o.dlByCode, map[record.Code]int{record.CodeOversize: 1}) {
		t.Errorf("dead letters by code %v", o.dlByCode)
	}
	checkReleased(t, budget)
}

// A sub-batch whose records outgrow what the budget can grant ends at the
// first record it cannot cover; that record opens the next one. Every
// record is delivered once, in order, and a restart resumes exactly past
// the confirmed ones.
func TestSubBatchEndsWhereBudgetRunsOut(t *testing.T) {
	dir := t.TempDir()
	seg, _ := writeSegment(t, dir, 0, 1, payloads("p", 300)...)
	budget := newBudget(t, 16<<10, 1) // 64 records at the 256-byte floor
	var confirmedAtCommit []uint64    // read once the drain has stopped
	s := &scriptSink{max: 100, script: func(_ context.Context, _ int, b sink.Batch) (sink.CommitResult, error) {
		confirmedAtCommit = append(confirmedAtCommit, confirmedCount(t, seg))
		return sink.CommitResult{}, nil
	}}
	opts := fastOptions(dir, newDirSource(dir), s, nil)
	opts.Budget = budget
	r := start(t, opts)
	waitFor(t, "segment removed", func() bool { return !exists(seg) })
	r.stop(t)

	var got []string
	var sent uint64
	for i, b := range s.got() {
		if n := len(b.Records); n == 0 || n > 64 {
			t.Errorf("sub-batch %d: %d records; the budget covers 64", i, n)
		}
		if confirmedAtCommit[i] != sent {
			t.Errorf("sub-batch %d: %d confirmed when sent, want %d", i, confirmedAtCommit[i], sent)
		}
		sent += uint64(len(b.Records))
		got = append(got, payloadsOf(b)...)
	}
	if !reflect.DeepEqual(got, payloads("p", 300)) {
		t.Errorf("delivered %d records, not the segment's 300 in order", len(got))
	}
	checkReleased(t, budget)
}

// While the budget is held elsewhere the drain waits for it — without
// counting as busy, holding nothing — and delivers once it is released.
func TestDrainWaitsForBudget(t *testing.T) {
	dir := t.TempDir()
	seg, _ := writeSegment(t, dir, 0, 1, payloads("p", 3)...)
	budget := newBudget(t, 1<<20, 1)
	if ok, err := budget.TryAcquire(1 << 20); !ok || err != nil {
		t.Fatal("cannot hold the whole budget", err)
	}
	s := &scriptSink{max: 10}
	opts := fastOptions(dir, newDirSource(dir), s, nil)
	opts.Budget = budget
	r := start(t, opts)
	waitFor(t, "drain waiting for the budget", func() bool { return budget.Stats().Waiting == 1 })
	if b := r.d.Busy(); b != 0 {
		t.Errorf("waiting for the budget counts as busy (%v)", b)
	}
	if got := s.got(); len(got) != 0 {
		t.Fatalf("delivered %v without a reservation", got)
	}
	budget.Release(1 << 20)
	waitFor(t, "segment removed", func() bool { return !exists(seg) })
	r.stop(t)
	checkReleased(t, budget)
}

// A drain stopped while it waits for the budget returns, and leaves no
// reservation behind.
func TestDrainStopsWhileWaitingForBudget(t *testing.T) {
	dir := t.TempDir()
	seg, _ := writeSegment(t, dir, 0, 1, payloads("p", 3)...)
	budget := newBudget(t, 1<<20, 1)
	if ok, _ := budget.TryAcquire(1 << 20); !ok {
		t.Fatal("cannot hold the whole budget")
	}
	opts := fastOptions(dir, newDirSource(dir), &scriptSink{max: 10}, nil)
	opts.Budget = budget
	r := start(t, opts)
	waitFor(t, "drain waiting for the budget", func() bool { return budget.Stats().Waiting == 1 })
	r.stop(t)
	budget.Release(1 << 20)
	checkReleased(t, budget)
	if !exists(seg) || confirmedCount(t, seg) != 0 {
		t.Error("records confirmed without being delivered")
	}
}

// pacer is a flow.Pacer for tests: a settable batch factor, and counts.
type pacer struct {
	percent           atomic.Int64
	failed, succeeded atomic.Int64
}

func (p *pacer) Scale(n int) int  { return max(1, n*int(p.percent.Load())/100) }
func (p *pacer) WriteFailed()     { p.failed.Add(1) }
func (p *pacer) WriteSucceeded()  { p.succeeded.Add(1) }
func newPacer(percent int) *pacer { p := &pacer{}; p.percent.Store(int64(percent)); return p }

// Every sub-batch is sized by flow control's state (asked at each one,
// not once) and by the profile's batch percent.
func TestSubBatchFollowsControllerState(t *testing.T) {
	for _, tc := range []struct {
		percent int
		want    []int // sub-batch sizes: Normal, Degraded, Critical, Recovery
	}{
		{100, []int{8, 4, 2, 6}},
		{50, []int{4, 2, 1, 3}},
	} {
		dir := t.TempDir()
		writeSegment(t, dir, 0, 1, payloads("p", 8+4+2+6)...)
		budget := newBudget(t, 1<<20, 1)
		th := flow.DefaultThresholds()
		th.CriticalHold, th.RecoveryHold, th.RecoveryTime = 0, 0, time.Hour
		ctl := flow.NewController(flow.Options{Budget: budget, Thresholds: th, Stuck: flow.DefaultStuckThresholds(),
			HeapBytes: func() int64 { return 0 }})
		var fill atomic.Value
		fill.Store(0.0)
		ctl.AddQueue("test", func() float64 { return fill.Load().(float64) })
		// Each commit moves the state on: Degraded, Critical, Recovery.
		next := []float64{0.8, 0.95, 0}
		var states []flow.State
		s := &scriptSink{max: 8, script: func(_ context.Context, call int, b sink.Batch) (sink.CommitResult, error) {
			states = append(states, ctl.State())
			if call < len(next) {
				fill.Store(next[call])
				ctl.Sample()
			}
			return sink.CommitResult{}, nil
		}}
		opts := fastOptions(dir, newDirSource(dir), s, nil)
		opts.Budget = budget
		opts.Pacer = flow.WithBatchPercent(ctl, func() int { return tc.percent })
		r := start(t, opts)
		waitFor(t, "four sub-batches", func() bool { return len(s.got()) >= 4 })
		r.stop(t)
		var sizes []int
		for _, b := range s.got()[:4] {
			sizes = append(sizes, len(b.Records))
		}
		if !reflect.DeepEqual(sizes, tc.want) {
			t.Errorf("batch percent %d: sub-batches %v in states %v, want %v", tc.percent, sizes, states[:4], tc.want)
		}
		if want := []flow.State{flow.Normal, flow.Degraded, flow.Critical, flow.Recovery}; !reflect.DeepEqual(states[:4], want) {
			t.Errorf("states %v, want %v", states[:4], want)
		}
	}
}

// Every Commit that returned tells flow control how it went; one cut
// short by shutdown tells nothing.
func TestDrainReportsWritesToPacer(t *testing.T) {
	dir := t.TempDir()
	seg, _ := writeSegment(t, dir, 0, 1, payloads("p", 3)...)
	seg2, _ := writeSegment(t, dir, 0, 2, payloads("q", 1)...)
	// seg: [p0 p1] fails, then succeeds; [p2] is refused. seg2: cut short.
	results := []error{sink.Transient(errors.New("busy")), nil, sink.Permanent(errors.New("refused"))}
	s := &scriptSink{max: 2, script: func(ctx context.Context, call int, b sink.Batch) (sink.CommitResult, error) {
		if call < len(results) {
			return sink.CommitResult{}, results[call]
		}
		<-ctx.Done() // the last segment's commit: cut short
		return sink.CommitResult{}, sink.Transient(ctx.Err())
	}}
	p := newPacer(100)
	opts := fastOptions(dir, newDirSource(dir), s, nil)
	opts.Pacer = p
	r := start(t, opts)
	waitFor(t, "first segment delivered", func() bool { return !exists(seg) })
	waitFor(t, "last commit started", func() bool { return len(s.got()) == len(results)+1 })
	r.stop(t)
	if f, ok := p.failed.Load(), p.succeeded.Load(); f != 2 || ok != 1 {
		t.Errorf("pacer told %d failed and %d succeeded writes, want 2 and 1", f, ok)
	}
	if !exists(seg2) {
		t.Error("the segment whose commit was cut short was removed")
	}
}
