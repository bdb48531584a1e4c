package daemon

import (
	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/flow"
)

// Flow control on the delivery side (docs/flow_control.md): the drain and
// the fan-out reserve what they hold from the node's budget, size their
// batches by the controller's state and the profile, and report every
// sink write; the controller watches the secondaries' live queues. Every
// method is a no-op on a nil *flowControl (a kinds made without
// telemetry, in tests).

// admission is the budget the delivery stages reserve from: nil when
// admission is off (flow.admission = false).
func (f *flowControl) admission() *flow.Budget {
	if f == nil || !f.on {
		return nil
	}
	return f.budget
}

// pacer is the controller as the delivery stages see it: its batch
// factor after the profile's batch percent, both read at every batch.
func (f *flowControl) pacer(cfg *config.Config) flow.Pacer {
	if f == nil {
		return nil
	}
	return flow.WithBatchPercent(f.ctl, f.batchPercent)
}

// drainOptions sets the drain's flow control: admission with an estimator
// of its own (floored by record_size_estimate), the pacer, and the
// oversize metric for records dead-lettered as larger than the budget.
func (f *flowControl) drainOptions(cfg *config.Config, o *drain.Options) {
	if f == nil {
		return
	}
	o.Budget = f.admission()
	o.Estimator = f.drainEst
	o.Pacer = f.pacer(cfg)
	o.Oversize = func() { f.m.Oversize("drain") }
}

// fanoutOptions sets the fan-out's flow control, and gives each secondary
// without queue_max_bytes its share of a quarter of the budget.
func (f *flowControl) fanoutOptions(cfg *config.Config, o *engine.FanoutOptions) {
	if f == nil {
		return
	}
	o.Budget = f.admission()
	o.RecordSizeEstimate = int64(cfg.Flow.RecordSizeEstimate)
	o.Pacer = secondaryPacer{f.pacer(cfg), f.ctl}
	if n := int64(len(o.Secondaries)); n > 0 {
		share := max(f.budget.Stats().Limit/4/n, minQueueBytes)
		for i := range o.Secondaries {
			if o.Secondaries[i].QueueBytes == 0 {
				o.Secondaries[i].QueueBytes = share
			}
		}
	}
}

// secondaryPacer is the pacer the secondaries see: their batch sizes follow
// the state, but their commits count only as progress, not as failures or
// successes of the pipeline's writes — a secondary that is down is
// relieved by recovery and must not degrade the path through raw (nor a
// secondary's success end a run of failures writing raw).
type secondaryPacer struct {
	flow.Pacer
	ctl *flow.Controller
}

func (p secondaryPacer) WriteFailed()    { p.ctl.Progress(1) }
func (p secondaryPacer) WriteSucceeded() { p.ctl.Progress(1) }

// minQueueBytes is the smallest derived queue_max_bytes (the key's
// smallest value).
const minQueueBytes = 64 << 10

// watchQueues has the controller report every secondary's live queue, as
// secondary-<name> — not as pressure: a full one drops to recovery, and a
// lagging secondary must not throttle live ingest.
func (f *flowControl) watchQueues(fan *engine.Fanout) {
	if f == nil {
		return
	}
	for name, fill := range fan.QueueFills() {
		f.ctl.WatchQueue("secondary-"+name, fill)
	}
}
