package flow

import (
	"fmt"
	"time"
)

// State is the backpressure machine's state.
type State int

const (
	Normal   State = iota // full batches
	Degraded              // half batches
	Critical              // quarter batches; sources paused, producers told to retry
	Recovery              // three-quarter batches, on the way back to Normal
)

// States lists every state, in order (for pre-initialised metrics).
var States = []State{Normal, Degraded, Critical, Recovery}

func (s State) String() string {
	switch s {
	case Normal:
		return "normal"
	case Degraded:
		return "degraded"
	case Critical:
		return "critical"
	case Recovery:
		return "recovery"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// BatchFactor is the share of the configured batch sizes used in s.
func (s State) BatchFactor() float64 {
	switch s {
	case Degraded:
		return 0.5
	case Critical:
		return 0.25
	case Recovery:
		return 0.75
	}
	return 1
}

// Throttled reports whether s pauses the sources.
func (s State) Throttled() bool { return s == Critical }

// Signals are what the machine reads, each sampled at one instant.
type Signals struct {
	// Memory is the live heap as a share of the memory the process may
	// use (Options.MemoryLimit: GOMEMLIMIT or the cgroup's limit, else
	// twice the budget).
	Memory float64
	// Held is the budget in use as a share of what is grantable.
	Held float64
	// Queue is the fullest bounded queue's fill (0–1).
	Queue float64
	// Failures is the count of consecutive failed writes to a sink.
	Failures int
}

// Defaults of Thresholds: the seed design's numbers.
const (
	DefaultDegradedMemory = 0.80
	DefaultCriticalMemory = 0.90
	DefaultDegradedQueue  = 0.70
	DefaultCriticalQueue  = 0.90
	DefaultIdleQueue      = 0.05
	DefaultFailures       = 3
	DefaultCriticalHold   = 5 * time.Second
	DefaultRecoveryHold   = 30 * time.Second
	DefaultRecoveryTime   = 60 * time.Second
)

// Thresholds are the machine's settings (each a knob).
type Thresholds struct {
	DegradedMemory, CriticalMemory float64
	DegradedQueue, CriticalQueue   float64
	// IdleQueue: below this fill every queue — and the budget — counts as
	// empty; high memory then is not pressure (the working-set rule:
	// garbage and fragmentation, not records held).
	IdleQueue float64
	// Failures consecutive failed sink writes make the state Degraded.
	Failures int
	// CriticalHold is how long pressure must stay below Critical's level
	// before the machine leaves Critical (to Degraded, or to Recovery when
	// pressure is gone): short, because Critical stops the sources, and
	// the damping is Recovery's to do, at reduced batches, not a long pause.
	CriticalHold time.Duration
	// RecoveryHold is how long pressure must stay gone before Degraded
	// steps down to Recovery.
	RecoveryHold time.Duration
	// RecoveryTime is how long Recovery lasts, free of pressure, before
	// Normal.
	RecoveryTime time.Duration
}

// DefaultThresholds are the seed design's numbers.
func DefaultThresholds() Thresholds {
	return Thresholds{
		DegradedMemory: DefaultDegradedMemory, CriticalMemory: DefaultCriticalMemory,
		DegradedQueue: DefaultDegradedQueue, CriticalQueue: DefaultCriticalQueue,
		IdleQueue: DefaultIdleQueue, Failures: DefaultFailures,
		CriticalHold: DefaultCriticalHold, RecoveryHold: DefaultRecoveryHold, RecoveryTime: DefaultRecoveryTime,
	}
}

// Level is the pressure the signals show, as the state it calls for:
// Normal (none), Degraded or Critical.
func (t Thresholds) Level(s Signals) State {
	mem := s.Memory
	if max(s.Queue, s.Held) < t.IdleQueue {
		mem = 0 // nothing is held: high memory is not records (working-set rule)
	}
	// The budget's own fill is saturation for Degraded, not Critical:
	// admission already bounds it (a full budget makes producers wait or
	// retry), and refusing everything each time it fills only turns the
	// bound into a sawtooth.
	switch {
	case mem > t.CriticalMemory || s.Queue > t.CriticalQueue:
		return Critical
	case mem > t.DegradedMemory || max(s.Queue, s.Held) > t.DegradedQueue || (t.Failures > 0 && s.Failures >= t.Failures):
		return Degraded
	}
	return Normal
}

// Machine is the four-state backpressure machine. It is a value: Step
// returns the next one, a pure function of the current one, the time and
// the signals, so that a property test can drive it through any sequence.
type Machine struct {
	State State
	// Since is when State was entered.
	Since time.Time
	// CalmSince is when the pressure last fell below what holds State
	// (zero while it has not).
	CalmSince time.Time
}

// Step returns the machine after reading s at now.
//
//   - Pressure at a higher level than the state moves up at once.
//   - Critical steps down — to Degraded while pressure is still at that
//     level, else to Recovery — only after CriticalHold below Critical.
//   - Degraded steps down to Recovery after RecoveryHold free of pressure.
//   - Recovery returns to Normal after RecoveryTime in it; pressure sends
//     it back up. Nothing goes from Critical or Degraded to Normal without
//     passing through Recovery.
func (m Machine) Step(now time.Time, s Signals, t Thresholds) Machine {
	lvl := t.Level(s)
	enter := func(st State) Machine { return Machine{State: st, Since: now} }
	calm := func(below bool) Machine {
		if !below {
			m.CalmSince = time.Time{}
			return m
		}
		if m.CalmSince.IsZero() {
			m.CalmSince = now
		}
		return m
	}
	switch m.State {
	case Normal:
		if lvl != Normal {
			return enter(lvl)
		}
		return m
	case Degraded:
		if lvl == Critical {
			return enter(Critical)
		}
		m = calm(lvl == Normal)
		if !m.CalmSince.IsZero() && now.Sub(m.CalmSince) >= t.RecoveryHold {
			return enter(Recovery)
		}
		return m
	case Critical:
		m = calm(lvl != Critical)
		if !m.CalmSince.IsZero() && now.Sub(m.CalmSince) >= t.CriticalHold {
			if lvl == Degraded {
				return enter(Degraded)
			}
			return enter(Recovery)
		}
		return m
	default: // Recovery
		if lvl != Normal {
			return enter(lvl)
		}
		if now.Sub(m.Since) >= t.RecoveryTime {
			return enter(Normal)
		}
		return m
	}
}
