package flow

import (
	"fmt"
	"time"
)

// ExitStuck is the exit code of a daemon the stuck detector stopped
// (EX_SOFTWARE): an orchestrator restarts it; an operator finds
// "stuck detector" in the last log lines.
const ExitStuck = 70

// StuckStage is how far the stuck detector has escalated.
type StuckStage int

const (
	StuckClear     StuckStage = iota // nothing wrong
	StuckWarn                        // logged
	StuckUnhealthy                   // /live fails
	StuckExit                        // the process exits with ExitStuck
)

// StuckStages lists every stage, in order.
var StuckStages = []StuckStage{StuckClear, StuckWarn, StuckUnhealthy, StuckExit}

func (s StuckStage) String() string {
	switch s {
	case StuckClear:
		return "clear"
	case StuckWarn:
		return "warn"
	case StuckUnhealthy:
		return "unhealthy"
	case StuckExit:
		return "exit"
	}
	return fmt.Sprintf("stage(%d)", int(s))
}

// Defaults of StuckThresholds. They assume a sink call completes in
// minutes; a pipeline whose sink routinely takes longer raises them (or
// lowers its batch sizes).
const (
	DefaultStuckMemory     = 0.50
	DefaultStuckWarnAfter  = 2 * time.Minute
	DefaultStuckFailAfter  = 5 * time.Minute
	DefaultStuckExitAfter  = 5 * time.Minute
	DefaultStuckClearAfter = 30 * time.Second
)

// StuckThresholds configure the stuck detector (each a knob).
type StuckThresholds struct {
	// Memory: held memory at or above this counts as high — the budget in
	// use as a share of what is grantable (Signals.Held), or the live heap
	// as a share of the memory the process may use (Signals.Memory) while
	// some of the budget is in use (see Condition).
	Memory float64
	// IdleQueue: every queue below this fill counts as empty.
	IdleQueue float64
	// WarnAfter the condition has held: a warning. FailAfter: /live
	// fails. ExitAfter more once /live fails: the process exits.
	WarnAfter, FailAfter, ExitAfter time.Duration
	// ClearAfter: the condition must stay false this long before a
	// raised stage clears (debounced, so it cannot oscillate).
	ClearAfter time.Duration
}

// DefaultStuckThresholds are the defaults.
func DefaultStuckThresholds() StuckThresholds {
	return StuckThresholds{
		Memory: DefaultStuckMemory, IdleQueue: DefaultIdleQueue,
		WarnAfter: DefaultStuckWarnAfter, FailAfter: DefaultStuckFailAfter,
		ExitAfter: DefaultStuckExitAfter, ClearAfter: DefaultStuckClearAfter,
	}
}

// Stuck is the stuck detector, separate from the backpressure machine:
// memory held high AND every queue empty AND no progress at all — no
// acknowledgement, no sink call returning, successfully or not — means
// something holds records and will never let them go (a sink call hanging
// forever, a deadlock). A sink that is down returns errors and a slow one
// returns late: both are progress, so neither is ever stuck.
//
// Like Machine it is a value stepped by a pure function.
type Stuck struct {
	Stage StuckStage
	// Since is when the condition began to hold (zero while it does not).
	Since time.Time
	// StageSince is when Stage was entered.
	StageSince time.Time
	// ClearSince is when the condition stopped holding while Stage was
	// raised (zero otherwise).
	ClearSince time.Time
}

// Condition reports whether the signals, and whether anything progressed
// since the last sample, show the stuck condition: no progress, every
// queue below IdleQueue, and memory held at or above Memory — the budget
// in use, or the live heap while the budget holds at least IdleQueue.
//
// The live heap alone does not count, for the machine's working-set
// reason: with the budget and every queue empty, no records are held, and
// a high heap is caches, garbage or fragmentation. An idle node whose heap
// is large against a small budget is not stuck, and must not be made to
// exit.
func (t StuckThresholds) Condition(s Signals, progressed bool) bool {
	if progressed || s.Queue >= t.IdleQueue {
		return false
	}
	return s.Held >= t.Memory || (s.Memory >= t.Memory && s.Held >= t.IdleQueue)
}

// Step returns the detector after one sample at now.
func (d Stuck) Step(now time.Time, s Signals, progressed bool, t StuckThresholds) Stuck {
	if !t.Condition(s, progressed) {
		d.Since = time.Time{}
		if d.Stage == StuckClear {
			return d
		}
		if d.ClearSince.IsZero() {
			d.ClearSince = now
		}
		if now.Sub(d.ClearSince) >= t.ClearAfter {
			return Stuck{Stage: StuckClear, StageSince: now}
		}
		return d
	}
	d.ClearSince = time.Time{}
	if d.Since.IsZero() {
		d.Since = now
	}
	held := now.Sub(d.Since)
	next := d.Stage
	switch d.Stage {
	case StuckClear:
		if held >= t.WarnAfter {
			next = StuckWarn
		}
	case StuckWarn:
		if held >= t.FailAfter {
			next = StuckUnhealthy
		}
	case StuckUnhealthy:
		if now.Sub(d.StageSince) >= t.ExitAfter {
			next = StuckExit
		}
	}
	if next != d.Stage {
		d.Stage, d.StageSince = next, now
	}
	return d
}
