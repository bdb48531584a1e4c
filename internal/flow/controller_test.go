package flow_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/testenv"
)

// pausable records Pause and Resume.
type pausable struct {
	mu      sync.Mutex
	paused  bool
	pauses  int
	resumes int
	onCall  func() // called inside Pause and Resume, if set
}

func (p *pausable) Pause() {
	p.call()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = true
	p.pauses++
}

func (p *pausable) Resume() {
	p.call()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = false
	p.resumes++
}

func (p *pausable) call() {
	if p.onCall != nil {
		p.onCall()
	}
}

func (p *pausable) state() (paused bool, pauses, resumes int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.pauses, p.resumes
}

// observer records what the controller reports.
type observer struct {
	mu          sync.Mutex
	samples     int
	transitions []string
	stuck       []string
}

func (o *observer) Sampled(flow.Sample) { o.mu.Lock(); o.samples++; o.mu.Unlock() }
func (o *observer) Transition(from, to flow.State) {
	o.mu.Lock()
	o.transitions = append(o.transitions, from.String()+"→"+to.String())
	o.mu.Unlock()
}
func (o *observer) StuckStage(from, to flow.StuckStage) {
	o.mu.Lock()
	o.stuck = append(o.stuck, from.String()+"→"+to.String())
	o.mu.Unlock()
}

// rig is a controller with an injected heap and clock, a 1000-byte budget
// and one queue.
type rig struct {
	c     *flow.Controller
	b     *flow.Budget
	clk   *testenv.Clock
	heap  atomic.Int64
	queue atomic.Uint64 // math.Float64bits of the fill
	obs   *observer
	exits atomic.Int32
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{clk: testenv.NewClock(t0), obs: &observer{}}
	r.b = warm(t, 1000)
	r.c = flow.NewController(flow.Options{
		Budget: r.b, MemoryLimit: 1000, Estimator: flow.NewEstimator(0), Thresholds: flow.DefaultThresholds(),
		Stuck: flow.StuckThresholds{Memory: 0.5, IdleQueue: 0.05, WarnAfter: time.Minute,
			FailAfter: 2 * time.Minute, ExitAfter: time.Minute, ClearAfter: 10 * time.Second},
		HeapBytes: r.heap.Load, Now: r.clk.Now, Observer: r.obs,
		Exit: func() { r.exits.Add(1) },
	})
	r.c.AddQueue("q", func() float64 { return math.Float64frombits(r.queue.Load()) })
	return r
}

func (r *rig) set(heap int64, queue float64) {
	r.heap.Store(heap)
	r.queue.Store(math.Float64bits(queue))
}

// step advances the clock by d and samples.
func (r *rig) step(d time.Duration) flow.Sample {
	r.clk.Advance(d)
	return r.c.Sample()
}

func TestControllerPausesInCritical(t *testing.T) {
	r := newRig(t)
	src := &pausable{}
	r.c.AddPausable("kafka", src)
	r.set(100, 0.2)
	if s := r.step(time.Second); s.State != flow.Normal || s.Paused || r.c.Throttled() {
		t.Fatalf("calm sample: %+v", s)
	}
	if got := r.c.Scale(100); got != 100 {
		t.Errorf("Scale(100) in normal = %d", got)
	}

	r.set(950, 0.2) // 95 % of the budget, records held
	s := r.step(time.Second)
	if s.State != flow.Critical || !s.Paused || !r.c.Throttled() || !r.c.Paused() {
		t.Fatalf("critical sample: %+v", s)
	}
	if p, n, _ := src.state(); !p || n != 1 {
		t.Fatalf("source paused %v (%d pauses)", p, n)
	}
	if got := r.c.Scale(100); got != 25 {
		t.Errorf("Scale(100) in critical = %d", got)
	}
	// A source added while throttled is paused at once.
	late := &pausable{}
	r.c.AddPausable("nats", late)
	if p, _, _ := late.state(); !p {
		t.Fatal("a source added in critical runs")
	}

	// Pressure falls: critical holds for CriticalHold, then Recovery resumes.
	r.set(100, 0.1)
	for range 5 { // the first calm sample starts the hold
		if s := r.step(time.Second); s.State != flow.Critical {
			t.Fatalf("left critical after %s of calm", s.At.Sub(t0))
		}
	}
	s = r.step(time.Second)
	if s.State != flow.Recovery || s.Paused || r.c.Throttled() {
		t.Fatalf("after the hold: %+v", s)
	}
	for _, p := range []*pausable{src, late} {
		if paused, _, n := p.state(); paused || n != 1 {
			t.Fatalf("not resumed in recovery (%d resumes)", n)
		}
	}
	if got := r.c.Scale(100); got != 75 {
		t.Errorf("Scale(100) in recovery = %d", got)
	}
	r.step(time.Minute)
	if r.c.State() != flow.Normal {
		t.Fatalf("state after recovery time: %s", r.c.State())
	}
	want := []string{"normal→critical", "critical→recovery", "recovery→normal"}
	r.obs.mu.Lock()
	defer r.obs.mu.Unlock()
	if fmt.Sprint(r.obs.transitions) != fmt.Sprint(want) {
		t.Errorf("transitions %v, want %v", r.obs.transitions, want)
	}
	if r.obs.samples != 9 {
		t.Errorf("%d samples observed", r.obs.samples)
	}
}

func TestControllerSignals(t *testing.T) {
	r := newRig(t)
	r.c.AddQueue("other", func() float64 { return 0.3 })
	r.set(400, 0.1)
	r.b.TryAcquire(200)
	tk, _ := r.b.Reserve(900) // waiting: demand counts as held
	defer tk.Cancel()
	s := r.c.Sample()
	if s.Signals.Memory != 0.4 || s.Signals.Queue != 0.3 || s.Signals.Held != 1.1 {
		t.Fatalf("signals %+v", s.Signals)
	}
	if s.Queues["q"] != 0.1 || s.Queues["other"] != 0.3 || s.Heap != 400 || s.Ratio != flow.DefaultColdRatio {
		t.Fatalf("sample %+v", s)
	}
	if s.State != flow.Degraded {
		t.Fatalf("budget over-subscribed, state %s, want degraded (admission bounds the budget; only memory and queues are critical)", s.State)
	}
	for range flow.DefaultFailures {
		r.c.WriteFailed()
	}
	r2 := newRig(t)
	for range flow.DefaultFailures {
		r2.c.WriteFailed()
	}
	if s := r2.c.Sample(); s.Signals.Failures != flow.DefaultFailures || s.State != flow.Degraded {
		t.Fatalf("after %d failures: %+v", flow.DefaultFailures, s)
	}
	r2.c.WriteSucceeded()
	if s := r2.c.Sample(); s.Signals.Failures != 0 {
		t.Fatalf("failures not reset: %d", s.Signals.Failures)
	}
}

// The working-set rule through the controller: a high heap with the queues
// and the budget empty changes nothing, and pauses nothing.
func TestControllerWorkingSet(t *testing.T) {
	r := newRig(t)
	src := &pausable{}
	r.c.AddPausable("src", src)
	r.set(990, 0.01)
	for range 10 {
		if s := r.step(time.Second); s.State != flow.Normal {
			t.Fatalf("high heap, nothing held: %s", s.State)
		}
	}
	if _, n, _ := src.state(); n != 0 {
		t.Fatal("paused on the working set")
	}
}

func TestControllerRunResumesOnExit(t *testing.T) {
	r := newRig(t)
	src := &pausable{}
	r.c.AddPausable("src", src)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.c.Run(ctx) }()
	r.set(990, 0.5)
	if s := r.c.Sample(); !s.Paused {
		t.Fatalf("not paused: %+v", s)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if p, _, n := src.state(); p || n != 1 || r.c.Paused() {
		t.Fatalf("after Run: paused %v, %d resumes, controller paused %v", p, n, r.c.Paused())
	}
	// A source removed is not resumed.
	r2 := newRig(t)
	gone := &pausable{}
	r2.c.AddPausable("gone", gone)
	r2.set(990, 0.5)
	r2.c.Sample()
	r2.c.RemovePausable("gone")
	r2.set(0, 0)
	r2.step(time.Hour)
	if p, _, n := gone.state(); !p || n != 0 {
		t.Fatalf("a removed source was resumed (%d)", n)
	}
}

// Run samples on its own at the interval.
func TestControllerRunSamples(t *testing.T) {
	b := warm(t, 1000)
	obs := &observer{}
	c := flow.NewController(flow.Options{Budget: b, Thresholds: flow.DefaultThresholds(), Stuck: flow.DefaultStuckThresholds(),
		Interval: time.Millisecond, Observer: obs})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	waitFor(t, "samples", func() bool { obs.mu.Lock(); defer obs.mu.Unlock(); return obs.samples >= 3 })
	cancel()
	<-done
}

func TestControllerStuck(t *testing.T) {
	r := newRig(t)
	r.set(100, 0)
	r.b.TryAcquire(600) // records held, nothing moves
	r.c.Sample()
	if err := r.c.Liveness(); err != nil {
		t.Fatalf("live at start: %v", err)
	}
	stages := map[time.Duration]flow.StuckStage{}
	for i := 1; i <= 240; i++ {
		s := r.step(time.Second)
		if _, ok := stages[time.Duration(i)*time.Second]; !ok && (i == 1 || s.Stuck != stages[time.Duration(i-1)*time.Second]) {
			t.Logf("%3ds %s", i, s.Stuck)
		}
		stages[time.Duration(i)*time.Second] = s.Stuck
		if s.Stuck < flow.StuckUnhealthy {
			if err := r.c.Liveness(); err != nil {
				t.Fatalf("/live fails at %ds in stage %s: %v", i, s.Stuck, err)
			}
		} else if err := r.c.Liveness(); !errors.Is(err, flow.ErrStuck) {
			t.Fatalf("stage %s at %ds: Liveness = %v", s.Stuck, i, err)
		}
	}
	// The first sample saw the condition begin at 0 s.
	for sec, want := range map[int]flow.StuckStage{59: flow.StuckClear, 60: flow.StuckWarn, 119: flow.StuckWarn,
		120: flow.StuckUnhealthy, 179: flow.StuckUnhealthy, 180: flow.StuckExit, 240: flow.StuckExit} {
		if got := stages[time.Duration(sec)*time.Second]; got != want {
			t.Errorf("at %ds stage %s, want %s", sec, got, want)
		}
	}
	waitFor(t, "Exit", func() bool { return r.exits.Load() == 1 })
	if err := r.c.Liveness(); err == nil || !errors.Is(err, flow.ErrStuck) {
		t.Fatalf("Liveness at exit: %v", err)
	}
	t.Log(r.c.Liveness())

	// Progress for ClearAfter (from the first sample that saw it) clears
	// it; /live passes again.
	for range 11 {
		r.c.Progress(1)
		r.step(time.Second)
	}
	if err := r.c.Liveness(); err != nil {
		t.Fatalf("after sustained progress: %v", err)
	}
	// Stuck again all the way: Exit is not called a second time.
	for range 300 {
		r.step(time.Second)
	}
	if err := r.c.Liveness(); err == nil {
		t.Fatal("stuck again, /live passes")
	}
	time.Sleep(10 * time.Millisecond) // room for a wrong second Exit goroutine
	if n := r.exits.Load(); n != 1 {
		t.Fatalf("Exit called %d times", n)
	}
	r.obs.mu.Lock()
	defer r.obs.mu.Unlock()
	want := "[clear→warn warn→unhealthy unhealthy→exit exit→clear clear→warn warn→unhealthy unhealthy→exit]"
	if got := fmt.Sprint(r.obs.stuck); got != want {
		t.Errorf("stages %s, want %s", got, want)
	}
}

// Releases of the budget are progress: a pipeline that acknowledges is not
// stuck whatever it holds.
func TestControllerReleasesAreProgress(t *testing.T) {
	r := newRig(t)
	r.set(100, 0)
	r.b.TryAcquire(900)
	for range 600 {
		r.b.TryAcquire(1)
		r.b.Release(1)
		if s := r.step(time.Second); s.Stuck != flow.StuckClear {
			t.Fatalf("stuck stage %s while acknowledging", s.Stuck)
		}
	}
}

// Pause, Resume and fill funcs run without the controller's lock: they may
// call its methods (Sample excepted).
func TestControllerCallbacksMayCallBack(t *testing.T) {
	r := newRig(t)
	var calls atomic.Int32
	back := func() {
		calls.Add(1)
		_ = r.c.Paused()
		_ = r.c.Liveness()
		r.c.AddQueue("x", func() float64 { return 0 })
		r.c.RemovePausable("nobody")
	}
	src := &pausable{onCall: back}
	r.c.AddPausable("src", src)
	r.c.AddQueue("calls back", func() float64 { back(); return 0 })
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.set(990, 0.5)
		r.c.Sample()
		r.set(0, 0)
		r.step(time.Hour) // the hold starts
		r.step(time.Hour) // recovery: resumed
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a callback calling the controller deadlocked")
	}
	if p, np, nr := src.state(); p || np != 1 || nr != 1 || calls.Load() < 4 {
		t.Fatalf("paused %v, %d pauses, %d resumes, %d callbacks", p, np, nr, calls.Load())
	}
}

// AddPausable pauses a new source without the controller's lock; a sample
// that resumes everything meanwhile (the new source included) must not be
// undone by AddPausable's late Pause.
func TestControllerAddPausableResumedMeanwhile(t *testing.T) {
	r := newRig(t)
	r.set(990, 0.5)
	r.c.Sample() // critical: paused
	inPause := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int32
	p := &pausable{}
	p.onCall = func() {
		if calls.Add(1) == 1 { // the first call is AddPausable's Pause
			close(inPause)
			<-release
		}
	}
	added := make(chan struct{})
	go func() { defer close(added); r.c.AddPausable("late", p) }()
	<-inPause
	r.set(0, 0)
	r.step(time.Hour) // the hold starts
	if s := r.step(time.Hour); s.Paused {
		t.Fatalf("still paused: %+v", s)
	}
	if _, _, n := p.state(); n != 1 {
		t.Fatalf("the sample did not resume the new source (%d)", n)
	}
	close(release) // AddPausable's Pause lands now, after the resume
	<-added
	if paused, _, _ := p.state(); paused {
		t.Fatal("a source added during a resume stays paused while the controller is not")
	}
}

// Pausables added while samples pause and resume end in the controller's
// state, whatever the interleaving.
func TestControllerAddPausableRace(t *testing.T) {
	b := warm(t, 1000)
	var heap atomic.Int64
	th := flow.DefaultThresholds()
	th.CriticalHold, th.RecoveryHold, th.RecoveryTime = 0, 0, 0 // flip on every sample
	c := flow.NewController(flow.Options{Budget: b, Thresholds: th, Stuck: flow.DefaultStuckThresholds(), HeapBytes: heap.Load, MemoryLimit: 1000})
	c.AddQueue("q", func() float64 { return 0.5 })
	var ps []*pausable
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			heap.Store([]int64{990, 0, 0}[i%3]) // critical, recovery, normal
			c.Sample()
		}
	})
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				p := &pausable{}
				c.AddPausable(fmt.Sprint(g, "/", i), p)
				mu.Lock()
				ps = append(ps, p)
				mu.Unlock()
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	want := c.Paused()
	for i, p := range ps {
		if paused, _, _ := p.state(); paused != want {
			t.Fatalf("pausable %d paused %v, controller paused %v", i, paused, want)
		}
	}
	heap.Store(0)
	for range 3 {
		c.Sample()
	}
	for i, p := range ps {
		if paused, _, _ := p.state(); paused {
			t.Fatalf("pausable %d still paused in %s", i, c.State())
		}
	}
}

func TestControllerScale(t *testing.T) {
	r := newRig(t)
	for _, c := range []struct{ n, want int }{{100, 100}, {1, 1}, {0, 1}, {3, 3}} {
		if got := r.c.Scale(c.n); got != c.want {
			t.Errorf("Scale(%d) = %d, want %d", c.n, got, c.want)
		}
	}
	r.set(990, 0.5)
	r.c.Sample()
	for _, c := range []struct{ n, want int }{{100, 25}, {1, 1}, {3, 1}, {10, 3}} {
		if got := r.c.Scale(c.n); got != c.want {
			t.Errorf("critical: Scale(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// TestControllerWatchedQueueIsNotPressure: a queue added with WatchQueue
// (a secondary's live queue, relieved by recovery) is reported but never
// moves the state, however full; the same fill through AddQueue does.
func TestControllerWatchedQueueIsNotPressure(t *testing.T) {
	r := newRig(t)
	r.set(0, 0)
	r.c.WatchQueue("secondary-x", func() float64 { return 1 })
	for range 5 {
		s := r.step(time.Second)
		if s.State != flow.Normal {
			t.Fatalf("a watched full queue moved the state to %s", s.State)
		}
		if s.Queues["secondary-x"] != 1 {
			t.Fatalf("watched queue not reported: %v", s.Queues)
		}
	}
	r.c.AddQueue("secondary-x", func() float64 { return 1 })
	if s := r.step(time.Second); s.State != flow.Critical {
		t.Fatalf("the same fill as pressure: %s, want critical", s.State)
	}
}

// TestControllerMemoryRatio pins the memory signal (weir_flow_memory_ratio,
// what flow.*_memory_percent compare with): the live heap ÷ the memory the
// process may use — Options.MemoryLimit (GOMEMLIMIT, the cgroup) when set,
// else twice the budget — never ÷ the budget itself.
func TestControllerMemoryRatio(t *testing.T) {
	for _, tc := range []struct {
		budget, limit, heap int64
		want                float64
		state               flow.State // with a busy queue (not the working-set rule)
	}{
		{budget: 1000, heap: 500, want: 0.25, state: flow.Normal},
		{budget: 1000, heap: 1000, want: 0.5, state: flow.Normal},    // a heap the size of the budget
		{budget: 1000, heap: 1700, want: 0.85, state: flow.Degraded}, // ÷ budget would be 1.7: critical
		{budget: 1000, heap: 1900, want: 0.95, state: flow.Critical},
		{budget: 1000, limit: 4000, heap: 1000, want: 0.25, state: flow.Normal}, // GOMEMLIMIT or the cgroup
		{budget: 1000, limit: 1000, heap: 850, want: 0.85, state: flow.Degraded},
	} {
		var heap atomic.Int64
		heap.Store(tc.heap)
		c := flow.NewController(flow.Options{Budget: warm(t, tc.budget), MemoryLimit: tc.limit, Thresholds: flow.DefaultThresholds(),
			Stuck: flow.DefaultStuckThresholds(), HeapBytes: heap.Load})
		c.AddQueue("q", func() float64 { return 0.5 })
		s := c.Sample()
		if math.Abs(s.Signals.Memory-tc.want) > 1e-9 || s.State != tc.state {
			t.Errorf("budget %d, limit %d, heap %d: memory %v in state %s, want %v in %s",
				tc.budget, tc.limit, tc.heap, s.Signals.Memory, s.State, tc.want, tc.state)
		}
	}
}
