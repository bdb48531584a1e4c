package flow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultInterval is how often the controller samples its signals.
const DefaultInterval = 250 * time.Millisecond

// Pausable is something that reads from upstream and can stop without
// losing its place: a Kafka source keeps its group membership, a JetStream
// source stops pulling, a file source stops reading. Pause and Resume are
// idempotent and safe from any goroutine. (source.Pausable is the same
// interface at the source seam.)
type Pausable interface {
	Pause()
	Resume()
}

// Observer receives the controller's samples (the metrics). Methods are
// called from the controller's goroutine.
type Observer interface {
	// Sampled reports one sample.
	Sampled(Sample)
	// Transition reports a change of state.
	Transition(from, to State)
	// StuckStage reports a change of the stuck detector's stage.
	StuckStage(from, to StuckStage)
}

// Sample is one reading of the controller.
type Sample struct {
	At      time.Time
	State   State
	Signals Signals
	Budget  BudgetStats
	Ratio   float64 // the estimator's expansion ratio (0 without one)
	Heap    int64   // live heap bytes
	Queues  map[string]float64
	Paused  bool
	Stuck   StuckStage
}

// Options configure a Controller.
type Options struct {
	Budget     *Budget
	Estimator  *Estimator // optional: its ratio is reported
	Thresholds Thresholds
	Stuck      StuckThresholds
	Interval   time.Duration // ≤ 0: DefaultInterval
	Log        *slog.Logger
	Observer   Observer // optional
	// MemoryLimit is the memory the process may use, which the live heap
	// is compared with (the memory signal): GOMEMLIMIT or the cgroup's
	// limit when one is set (ProcessLimit). 0 takes twice the budget's
	// limit, read at each sample — the budget counts only records, and is
	// by default half of what the process may use.
	MemoryLimit int64
	// HeapBytes reads the live heap (nil: runtime/metrics'
	// /gc/heap/live:bytes). A seam for tests.
	HeapBytes func() int64
	// Now is the clock (nil: time.Now). A seam for tests.
	Now func() time.Time
	// Exit is called once when the stuck detector reaches StuckExit (nil:
	// nothing happens beyond the log line; the daemon passes a function
	// that stops the process with ExitStuck).
	Exit func()
}

// Controller samples memory, the queues' fill and sink failures on an
// interval, steps the backpressure machine and the stuck detector, and
// pauses or resumes what reads from upstream. Its methods are safe for
// concurrent use; Run is its one goroutine.
//
// The fill funcs, Pause and Resume, the Observer and Exit are called
// without the controller's lock, so they may call any of its methods
// (Sample excepted, which they are called from). They should still be
// quick: a fill func is a channel's len against its cap or an atomic
// load, a Pause sets the source's flag; a sample waits for them all.
type Controller struct {
	opts Options
	log  *slog.Logger

	state    atomic.Int32 // State
	stuck    atomic.Int32 // StuckStage
	progress atomic.Uint64
	failures atomic.Int64

	// sampleMu serialises samples (Sample and Run's final resume); it
	// guards the fields below it.
	sampleMu sync.Mutex
	machine  Machine
	detector Stuck
	lastProg uint64
	exited   bool

	mu        sync.Mutex
	queues    map[string]queue
	pausables map[string]Pausable
	paused    bool
	pauseGen  uint64    // changes of paused; see AddPausable
	stuckAt   time.Time // when the condition behind the raised stage began
}

// NewController makes a controller; nothing runs until Run.
func NewController(o Options) *Controller {
	if o.Budget == nil {
		panic("flow: controller without a budget")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.HeapBytes == nil {
		o.HeapBytes = liveHeap
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c := &Controller{opts: o, log: o.Log, queues: map[string]queue{}, pausables: map[string]Pausable{}}
	c.machine = Machine{State: Normal, Since: o.Now()}
	return c
}

// memoryLimit is what the live heap is compared with: Options.MemoryLimit,
// else twice the budget — the memory a derived budget is half of.
func (c *Controller) memoryLimit(budget int64) int64 {
	if c.opts.MemoryLimit > 0 {
		return c.opts.MemoryLimit
	}
	return 2 * budget
}

// queue is a watched queue: its fill, and whether it is pressure.
type queue struct {
	fill     func() float64
	pressure bool
}

// AddQueue adds a bounded queue whose fill (0–1) is read at each sample
// and counts as pressure (a second AddQueue or WatchQueue of the same name
// replaces the first).
func (c *Controller) AddQueue(name string, fill func() float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queues[name] = queue{fill, true}
}

// WatchQueue adds a bounded queue whose fill is read and reported at each
// sample but is not pressure: a queue whose overflow is relieved otherwise
// — a secondary's live queue drops to recovery when full, and a lagging
// secondary must never throttle live ingest (docs/flow_control.md).
func (c *Controller) WatchQueue(name string, fill func() float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queues[name] = queue{fill, false}
}

// AddPausable adds something the Critical state pauses; it is paused
// before AddPausable returns if the controller is throttling.
func (c *Controller) AddPausable(name string, p Pausable) {
	c.mu.Lock()
	c.pausables[name] = p
	paused, gen := c.paused, c.pauseGen
	c.mu.Unlock()
	if !paused {
		return // a later change sees p in the map and applies itself
	}
	// Pause is called without the lock, so a sample may resume p (it is
	// in the map) before this Pause lands; the generation tells, and the
	// state then in force is applied again until none changed it meanwhile.
	for {
		if paused {
			p.Pause()
		} else {
			p.Resume()
		}
		c.mu.Lock()
		now, g := c.paused, c.pauseGen
		c.mu.Unlock()
		if g == gen {
			return
		}
		paused, gen = now, g
	}
}

// RemovePausable forgets p (a source that stopped); it is not resumed.
func (c *Controller) RemovePausable(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pausables, name)
}

// Progress counts n completions: acknowledgements, sink calls returning
// (successfully or not), records read. The stuck detector needs only to
// know whether there were any.
func (c *Controller) Progress(n int) { c.progress.Add(uint64(n)) }

// WriteFailed counts a failed sink write; WriteSucceeded ends the run of
// failures. Both are progress.
func (c *Controller) WriteFailed()    { c.failures.Add(1); c.Progress(1) }
func (c *Controller) WriteSucceeded() { c.failures.Store(0); c.Progress(1) }

// State is the backpressure state.
func (c *Controller) State() State { return State(c.state.Load()) }

// Throttled reports whether the sources are paused (Critical): a producer
// is answered with a retryable refusal instead of waiting.
func (c *Controller) Throttled() bool { return c.State().Throttled() }

// Scale returns n scaled by the state's batch factor, at least 1.
func (c *Controller) Scale(n int) int {
	return max(1, int(math.Round(float64(n)*c.State().BatchFactor())))
}

// ErrStuck is wrapped by Liveness when the stuck detector has raised
// /live.
var ErrStuck = errors.New("flow: stuck: memory held, queues empty and no progress")

// Liveness is nil unless the stuck detector has reached StuckUnhealthy.
func (c *Controller) Liveness() error {
	if st := StuckStage(c.stuck.Load()); st >= StuckUnhealthy {
		c.mu.Lock()
		since := c.stuckAt
		c.mu.Unlock()
		return fmt.Errorf("%w since %s (stuck detector stage %s)", ErrStuck, since.Format(time.RFC3339), st)
	}
	return nil
}

// Run samples until ctx ends; it resumes everything it paused before it
// returns.
func (c *Controller) Run(ctx context.Context) error {
	t := time.NewTicker(c.opts.Interval)
	defer t.Stop()
	defer c.resumeAll()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.Sample()
		}
	}
}

type namedFill struct {
	name     string
	fill     func() float64
	pressure bool
}

// Sample takes one sample now (Run calls it on each tick; tests call it
// directly).
func (c *Controller) Sample() Sample {
	c.sampleMu.Lock()
	defer c.sampleMu.Unlock()
	now := c.opts.Now()
	b := c.opts.Budget.Stats()
	heap := c.opts.HeapBytes()
	c.mu.Lock()
	queues := make([]namedFill, 0, len(c.queues))
	for name, q := range c.queues {
		queues = append(queues, namedFill{name, q.fill, q.pressure})
	}
	c.mu.Unlock()

	s := Sample{At: now, Budget: b, Heap: heap, Queues: make(map[string]float64, len(queues))}
	sig := Signals{Failures: int(c.failures.Load())}
	if b.Limit > 0 {
		sig.Memory = float64(heap) / float64(c.memoryLimit(b.Limit))
	}
	if b.Grantable > 0 {
		sig.Held = float64(b.InUse+b.WaitBytes) / float64(b.Grantable)
	}
	for _, q := range queues {
		f := q.fill()
		s.Queues[q.name] = f
		if q.pressure {
			sig.Queue = max(sig.Queue, f)
		}
	}
	s.Signals = sig
	if c.opts.Estimator != nil {
		s.Ratio = c.opts.Estimator.Ratio()
	}

	prev := c.machine.State
	c.machine = c.machine.Step(now, sig, c.opts.Thresholds)
	if st := c.machine.State; st != prev {
		c.state.Store(int32(st))
		c.log.Info("flow state changed", "from", prev.String(), "to", st.String(),
			"memory", round2(sig.Memory), "held", round2(sig.Held), "queue", round2(sig.Queue), "failures", sig.Failures)
		if c.opts.Observer != nil {
			c.opts.Observer.Transition(prev, st)
		}
	}
	s.State, s.Paused = c.machine.State, c.machine.State.Throttled()
	c.setPaused(s.Paused)

	p := c.progress.Load() + b.Releases // a release is an acknowledgement
	progressed := p != c.lastProg
	c.lastProg = p
	prevStuck := c.detector.Stage
	c.detector = c.detector.Step(now, sig, progressed, c.opts.Stuck)
	if st := c.detector.Stage; st != prevStuck {
		if st >= StuckUnhealthy && prevStuck < StuckUnhealthy {
			c.mu.Lock()
			c.stuckAt = c.detector.Since
			c.mu.Unlock()
		}
		c.stuck.Store(int32(st))
		c.logStuck(prevStuck, st, sig)
		if c.opts.Observer != nil {
			c.opts.Observer.StuckStage(prevStuck, st)
		}
		if st == StuckExit && !c.exited && c.opts.Exit != nil {
			c.exited = true
			go c.opts.Exit() // it may wait for shutdown, which waits for Run
		}
	}
	s.Stuck = c.detector.Stage
	if c.opts.Observer != nil {
		c.opts.Observer.Sampled(s)
	}
	return s
}

func (c *Controller) logStuck(from, to StuckStage, sig Signals) {
	args := []any{"from", from.String(), "to", to.String(), "memory", round2(sig.Memory), "held", round2(sig.Held), "queue", round2(sig.Queue)}
	switch to {
	case StuckClear:
		c.log.Info("stuck detector cleared: progress resumed", args...)
	case StuckWarn:
		c.log.Warn("stuck detector: memory held, queues empty and no progress", args...)
	case StuckUnhealthy:
		c.log.Error("stuck detector: failing /live", args...)
	case StuckExit:
		c.log.Error("stuck detector: exiting", append(args, "exit_code", ExitStuck)...)
	}
}

// setPaused pauses or resumes every pausable when p changes; sampleMu is
// held, c.mu is not (Pause and Resume are called without it).
func (c *Controller) setPaused(p bool) {
	c.mu.Lock()
	if p == c.paused {
		c.mu.Unlock()
		return
	}
	c.paused = p
	c.pauseGen++
	ps := make(map[string]Pausable, len(c.pausables))
	maps.Copy(ps, c.pausables)
	c.mu.Unlock()
	for name, s := range ps {
		if p {
			s.Pause()
		} else {
			s.Resume()
		}
		c.log.Debug("source throttle", "source", name, "paused", p)
	}
}

func (c *Controller) resumeAll() {
	c.sampleMu.Lock()
	defer c.sampleMu.Unlock()
	c.setPaused(false)
}

// Paused reports whether the controller has paused its pausables.
func (c *Controller) Paused() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paused
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

// liveHeap reads the live heap: the bytes the last garbage collection
// found reachable.
func liveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}
