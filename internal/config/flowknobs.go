package config

import (
	"fmt"
	"time"

	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/internal/flow"
)

// Flow control's defaults (docs/flow_control.md).
const (
	DefaultAdmissionWait       = 100 * time.Millisecond
	DefaultRetryAfter          = 100 * time.Millisecond
	DefaultFlowProfile         = "default"
	DefaultQuorumBudgetPercent = 50
	DefaultQuorumBatchPercent  = 50
	// MinMemoryBudget is the smallest memory_budget accepted.
	MinMemoryBudget = 4 * mib
	// minBudgetFrames: a memory_budget must hold this many frames of
	// max_frame_bytes, so that a largest frame always fits it once warm
	// (a frame the budget can never grant is refused for good).
	minBudgetFrames = 4
)

// FlowConfig is flow control's configuration ([flow], memory_budget,
// record_size_estimate).
type FlowConfig struct {
	// MemoryBudget is memory_budget as configured; 0 derives it at start
	// (flow.DefaultLimit).
	MemoryBudget       int64
	RecordSizeEstimate int // record_size_estimate

	Admission     bool          // flow.admission
	AdmissionWait time.Duration // flow.admission_wait
	RetryAfter    time.Duration // flow.retry_after

	WarmupPercent int           // flow.warmup_percent
	WarmupAcks    int           // flow.warmup_acks
	WarmupTimeout time.Duration // flow.warmup_timeout

	DegradedMemoryPercent, CriticalMemoryPercent int // flow.{degraded,critical}_memory_percent
	DegradedQueuePercent, CriticalQueuePercent   int // flow.{degraded,critical}_queue_percent
	IdleQueuePercent                             int // flow.idle_queue_percent
	Failures                                     int // flow.failures
	CriticalHold, RecoveryHold, RecoveryTime     time.Duration
	SampleInterval                               time.Duration

	StuckMemoryPercent              int // flow.stuck_memory_percent
	StuckWarnAfter, StuckFailAfter  time.Duration
	StuckExitAfter, StuckClearAfter time.Duration

	Profile             string // flow.profile: default|quorum
	QuorumBudgetPercent int    // flow.quorum_budget_percent
	QuorumBatchPercent  int    // flow.quorum_batch_percent
}

// flowPartial is one layer's view of FlowConfig.
type flowPartial struct {
	MemoryBudget       *int64
	RecordSizeEstimate *int

	Admission                                    *bool
	AdmissionWait, RetryAfter                    *time.Duration
	WarmupPercent, WarmupAcks                    *int
	WarmupTimeout                                *time.Duration
	DegradedMemoryPercent, CriticalMemoryPercent *int
	DegradedQueuePercent, CriticalQueuePercent   *int
	IdleQueuePercent, Failures                   *int
	CriticalHold                                 *time.Duration
	RecoveryHold, RecoveryTime, SampleInterval   *time.Duration
	StuckMemoryPercent                           *int
	StuckWarnAfter, StuckFailAfter               *time.Duration
	StuckExitAfter, StuckClearAfter              *time.Duration
	Profile                                      *string
	QuorumBudgetPercent, QuorumBatchPercent      *int
}

func pct(f float64) int { return int(f*100 + 0.5) }

// flowKnobs are flow control's settings, in documentation order.
func flowKnobs() []knob {
	fp := func(p *partial) *flowPartial { return &p.flow }
	fc := func(c *Config) *FlowConfig { return &c.Flow }
	pctKnob := func(key string, def int, help string, f func(*flowPartial) **int, o func(*FlowConfig) *int) knob {
		return intKnob(key, def, 1, 100, help, func(p *partial) **int { return f(fp(p)) }, func(c *Config) *int { return o(fc(c)) })
	}
	durKnob := func(key string, def, lo, hi time.Duration, help string, f func(*flowPartial) **time.Duration, o func(*FlowConfig) *time.Duration) knob {
		return durationKnob(key, def, lo, hi, help, func(p *partial) **time.Duration { return f(fp(p)) }, func(c *Config) *time.Duration { return o(fc(c)) })
	}
	budget := newKnob(spec[int64]{key: "memory_budget", typ: setting.OrZero(setting.Size(MinMemoryBudget, 1<<40), "derived"), def: 0,
		defText: "derived: half of GOMEMLIMIT or the cgroup's memory.max, else " + FormatSize(flow.FallbackLimit),
		help:    "Bytes of records the daemon may hold in memory at once, anywhere (socket frames, source fetches, shard queues, drain and secondary batches, recovery windows); admission waits, sources pause and producers are told to retry beyond it.",
		field:   func(p *partial) **int64 { return &p.flow.MemoryBudget }, out: func(c *Config) *int64 { return &c.Flow.MemoryBudget }})
	return []knob{
		budget,
		intSizeKnob("record_size_estimate", flow.DefaultRecordSizeEstimate, 16, 64*mib, "Least memory a record is assumed to take (seed and floor of the size estimate; estimates above it use the 95th percentile of measured expansion).",
			func(p *partial) **int { return &p.flow.RecordSizeEstimate }, func(c *Config) *int { return &c.Flow.RecordSizeEstimate }),
		boolKnob("flow.admission", true, "Reserve memory_budget for every record held in memory; false turns admission off (the state machine and stuck detector still run) — for measuring its cost, not for production.",
			func(p *partial) **bool { return &p.flow.Admission }, func(c *Config) *bool { return &c.Flow.Admission }),
		durKnob("flow.admission_wait", DefaultAdmissionWait, 0, time.Minute, "How long a producer's frame waits for memory before it is refused with the retryable Overloaded.",
			func(p *flowPartial) **time.Duration { return &p.AdmissionWait }, func(c *FlowConfig) *time.Duration { return &c.AdmissionWait }),
		durKnob("flow.retry_after", DefaultRetryAfter, time.Millisecond, time.Minute, "Retry-after hint sent with an Overloaded refusal.",
			func(p *flowPartial) **time.Duration { return &p.RetryAfter }, func(c *FlowConfig) *time.Duration { return &c.RetryAfter }),
		pctKnob("flow.warmup_percent", pct(flow.DefaultWarmupFraction), "Share of memory_budget grantable at start; it doubles after flow.warmup_acks releases or flow.warmup_timeout, whichever first (100 turns warm-up off).",
			func(p *flowPartial) **int { return &p.WarmupPercent }, func(c *FlowConfig) *int { return &c.WarmupPercent }),
		intKnob("flow.warmup_acks", flow.DefaultWarmupAcks, 1, 1<<30, "Releases (acknowledged records or batches) that step warm-up up.",
			func(p *partial) **int { return &p.flow.WarmupAcks }, func(c *Config) *int { return &c.Flow.WarmupAcks }),
		durKnob("flow.warmup_timeout", flow.DefaultWarmupTimeout, 10*time.Millisecond, time.Hour, "Time after which warm-up steps up without acknowledgements.",
			func(p *flowPartial) **time.Duration { return &p.WarmupTimeout }, func(c *FlowConfig) *time.Duration { return &c.WarmupTimeout }),
		pctKnob("flow.degraded_memory_percent", pct(flow.DefaultDegradedMemory), "Live heap, as a share of the memory the process may use (GOMEMLIMIT or the cgroup's memory.max when set, else twice memory_budget; weir_flow_memory_ratio), above which the state is Degraded (half batches) — unless every queue is near empty.",
			func(p *flowPartial) **int { return &p.DegradedMemoryPercent }, func(c *FlowConfig) *int { return &c.DegradedMemoryPercent }),
		pctKnob("flow.critical_memory_percent", pct(flow.DefaultCriticalMemory), "Live heap, as the same share (weir_flow_memory_ratio), above which the state is Critical: quarter batches, sources paused, producers refused with Overloaded.",
			func(p *flowPartial) **int { return &p.CriticalMemoryPercent }, func(c *FlowConfig) *int { return &c.CriticalMemoryPercent }),
		pctKnob("flow.degraded_queue_percent", pct(flow.DefaultDegradedQueue), "Fill of the fullest bounded queue (or of the budget) above which the state is Degraded.",
			func(p *flowPartial) **int { return &p.DegradedQueuePercent }, func(c *FlowConfig) *int { return &c.DegradedQueuePercent }),
		pctKnob("flow.critical_queue_percent", pct(flow.DefaultCriticalQueue), "Fill of the fullest bounded queue (or of the budget) above which the state is Critical.",
			func(p *flowPartial) **int { return &p.CriticalQueuePercent }, func(c *FlowConfig) *int { return &c.CriticalQueuePercent }),
		pctKnob("flow.idle_queue_percent", pct(flow.DefaultIdleQueue), "Fill below which every queue and the budget count as empty: high memory then is not pressure, and is one condition of the stuck detector.",
			func(p *flowPartial) **int { return &p.IdleQueuePercent }, func(c *FlowConfig) *int { return &c.IdleQueuePercent }),
		intKnob("flow.failures", flow.DefaultFailures, 0, 1<<20, "Consecutive failed sink writes that make the state Degraded; 0 ignores failures.",
			func(p *partial) **int { return &p.flow.Failures }, func(c *Config) *int { return &c.Flow.Failures }),
		durKnob("flow.critical_hold", flow.DefaultCriticalHold, 0, time.Hour, "How long pressure must stay below Critical's level before Critical is left (to Degraded, or to Recovery when pressure is gone) and the sources resume.",
			func(p *flowPartial) **time.Duration { return &p.CriticalHold }, func(c *FlowConfig) *time.Duration { return &c.CriticalHold }),
		durKnob("flow.recovery_hold", flow.DefaultRecoveryHold, 0, time.Hour, "How long pressure must stay gone before Degraded steps down to Recovery.",
			func(p *flowPartial) **time.Duration { return &p.RecoveryHold }, func(c *FlowConfig) *time.Duration { return &c.RecoveryHold }),
		durKnob("flow.recovery_time", flow.DefaultRecoveryTime, 0, time.Hour, "How long the Recovery state (three-quarter batches) lasts, free of pressure, before Normal.",
			func(p *flowPartial) **time.Duration { return &p.RecoveryTime }, func(c *FlowConfig) *time.Duration { return &c.RecoveryTime }),
		durKnob("flow.sample_interval", flow.DefaultInterval, 10*time.Millisecond, time.Minute, "How often memory, queue fill and failures are sampled.",
			func(p *flowPartial) **time.Duration { return &p.SampleInterval }, func(c *FlowConfig) *time.Duration { return &c.SampleInterval }),
		pctKnob("flow.stuck_memory_percent", pct(flow.DefaultStuckMemory), "Records held at or above which the stuck detector counts memory as high: the budget in use, as a share of what is grantable, or the live heap, as a share of the memory the process may use (weir_flow_memory_ratio), while some of the budget is in use.",
			func(p *flowPartial) **int { return &p.StuckMemoryPercent }, func(c *FlowConfig) *int { return &c.StuckMemoryPercent }),
		durKnob("flow.stuck_warn_after", flow.DefaultStuckWarnAfter, 0, 24*time.Hour, "Memory held high, every queue empty and no progress for this long: a warning.",
			func(p *flowPartial) **time.Duration { return &p.StuckWarnAfter }, func(c *FlowConfig) *time.Duration { return &c.StuckWarnAfter }),
		durKnob("flow.stuck_fail_after", flow.DefaultStuckFailAfter, 0, 24*time.Hour, "The stuck condition held this long: /live fails (at least flow.stuck_warn_after).",
			func(p *flowPartial) **time.Duration { return &p.StuckFailAfter }, func(c *FlowConfig) *time.Duration { return &c.StuckFailAfter }),
		durKnob("flow.stuck_exit_after", flow.DefaultStuckExitAfter, 0, 24*time.Hour, "Further time with /live failing after which the daemon exits with code 70.",
			func(p *flowPartial) **time.Duration { return &p.StuckExitAfter }, func(c *FlowConfig) *time.Duration { return &c.StuckExitAfter }),
		durKnob("flow.stuck_clear_after", flow.DefaultStuckClearAfter, 0, time.Hour, "The stuck condition must stay false this long before a raised stage clears.",
			func(p *flowPartial) **time.Duration { return &p.StuckClearAfter }, func(c *FlowConfig) *time.Duration { return &c.StuckClearAfter }),
		enumKnob("flow.profile", DefaultFlowProfile, []string{"default", "quorum"}, "Flow-control profile: quorum runs a node that holds a coordination quorum role with flow.quorum_budget_percent of the budget and flow.quorum_batch_percent of every batch size.",
			func(p *partial) **string { return &p.flow.Profile }, func(c *Config) *string { return &c.Flow.Profile }),
		pctKnob("flow.quorum_budget_percent", DefaultQuorumBudgetPercent, "Share of memory_budget the quorum profile runs with.",
			func(p *flowPartial) **int { return &p.QuorumBudgetPercent }, func(c *FlowConfig) *int { return &c.QuorumBudgetPercent }),
		pctKnob("flow.quorum_batch_percent", DefaultQuorumBatchPercent, "Share of every batch size the quorum profile runs with.",
			func(p *flowPartial) **int { return &p.QuorumBatchPercent }, func(c *FlowConfig) *int { return &c.QuorumBatchPercent }),
	}
}

// validateFlow checks what spans flow control's keys.
func validateFlow(ks []knob, c *Config) []error {
	var errs []error
	f := &c.Flow
	pair := func(lo, hi string, a, b int) {
		if a > b {
			errs = append(errs, invalid(knobByKey(ks, hi), fmt.Sprint(b), fmt.Sprintf("must be at least %s (%d)", lo, a)))
		}
	}
	pair("flow.degraded_memory_percent", "flow.critical_memory_percent", f.DegradedMemoryPercent, f.CriticalMemoryPercent)
	pair("flow.degraded_queue_percent", "flow.critical_queue_percent", f.DegradedQueuePercent, f.CriticalQueuePercent)
	if f.MemoryBudget != 0 {
		if limit, _ := c.BudgetLimit(); limit < minBudgetFrames*int64(c.MaxFrameBytes) {
			why := fmt.Sprintf("must be at least %d × max_frame_bytes (%s)", minBudgetFrames, FormatSize(minBudgetFrames*int64(c.MaxFrameBytes)))
			if f.Profile == "quorum" {
				why += ", after flow.quorum_budget_percent"
			}
			errs = append(errs, invalid(knobByKey(ks, "memory_budget"), FormatSize(f.MemoryBudget), why))
		}
	}
	if f.StuckFailAfter < f.StuckWarnAfter {
		errs = append(errs, invalid(knobByKey(ks, "flow.stuck_fail_after"), formatDuration(f.StuckFailAfter),
			fmt.Sprintf("must be at least flow.stuck_warn_after (%s)", formatDuration(f.StuckWarnAfter))))
	}
	return errs
}

// BudgetLimit is the memory budget in force: memory_budget, or the derived
// default (flow.DefaultLimit) when it is 0, scaled by the quorum profile;
// from says where it came from.
func (c *Config) BudgetLimit() (limit int64, from string) {
	limit, from = c.Flow.MemoryBudget, "memory_budget"
	if limit == 0 {
		limit, from = flow.DefaultLimit()
	}
	if c.Flow.Profile == "quorum" {
		limit = max(limit*int64(c.Flow.QuorumBudgetPercent)/100, MinMemoryBudget)
		from += " × flow.quorum_budget_percent"
	}
	return limit, from
}

// BudgetOptions are the flow.BudgetOptions for limit.
func (c *Config) BudgetOptions(limit int64) flow.BudgetOptions {
	return flow.BudgetOptions{Limit: limit, WarmupFraction: float64(c.Flow.WarmupPercent) / 100,
		WarmupAcks: c.Flow.WarmupAcks, WarmupTimeout: c.Flow.WarmupTimeout}
}

// Thresholds are the backpressure machine's settings.
func (c *Config) Thresholds() flow.Thresholds {
	f := &c.Flow
	return flow.Thresholds{
		DegradedMemory: float64(f.DegradedMemoryPercent) / 100, CriticalMemory: float64(f.CriticalMemoryPercent) / 100,
		DegradedQueue: float64(f.DegradedQueuePercent) / 100, CriticalQueue: float64(f.CriticalQueuePercent) / 100,
		IdleQueue: float64(f.IdleQueuePercent) / 100, Failures: f.Failures,
		CriticalHold: f.CriticalHold, RecoveryHold: f.RecoveryHold, RecoveryTime: f.RecoveryTime,
	}
}

// StuckThresholds are the stuck detector's settings.
func (c *Config) StuckThresholds() flow.StuckThresholds {
	f := &c.Flow
	return flow.StuckThresholds{
		Memory: float64(f.StuckMemoryPercent) / 100, IdleQueue: float64(f.IdleQueuePercent) / 100,
		WarnAfter: f.StuckWarnAfter, FailAfter: f.StuckFailAfter, ExitAfter: f.StuckExitAfter, ClearAfter: f.StuckClearAfter,
	}
}
