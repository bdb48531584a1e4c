package daemon

import (
	"context"
	"log/slog"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/source"
)

// Flow control's part in running the [[source]]s (docs/flow_control.md,
// docs/sources.md): each source gets its share of the budget as a
// prefetch bound and a size estimator of its own when it is opened
// (staged subscription), writes through its gate under admission, and is
// paused by the controller in the Critical state when its kind can be.
// Every method is a no-op on a nil *flowControl, as on the delivery side
// (flowdelivery.go).

// admittingGate is a gate the [[source]]s write through, each under its
// own admission (engine.WABGate, engine.SinkGate).
type admittingGate interface {
	source.Gate
	WithAdmission(engine.Admission) source.Gate
}

// sourceFlow is what flow control gives one of sources [[source]]s: its
// share of the budget to prefetch (flow.Prefetch), and an estimator of
// its own, floored at record_size_estimate.
func (f *flowControl) sourceFlow(cfg *config.Config, name string, sources int, log *slog.Logger) component.SourceFlow {
	if f == nil {
		return component.SourceFlow{}
	}
	sf := component.SourceFlow{
		Prefetch:  flow.Prefetch(f.budget.Stats().Limit, sources),
		Estimator: flow.NewEstimator(int64(cfg.Flow.RecordSizeEstimate)),
	}
	log.Info("source prefetch bound from the memory budget", "source", name, "prefetch_bytes", sf.Prefetch, "sources", sources)
	return sf
}

// sourceAdmission is a source's admission with estimator est.
func (f *flowControl) sourceAdmission(est *flow.Estimator) engine.Admission {
	return engine.Admission{Budget: f.budget, Estimator: est, OnOversize: func(n int) {
		for range n {
			f.m.Oversize("gate")
		}
	}}
}

// gateFor is the gate a source with estimator est writes through: gate
// under the source's admission, or gate itself with flow.admission off.
func (f *flowControl) gateFor(gate admittingGate, est *flow.Estimator) source.Gate {
	if f == nil || !f.on {
		return gate
	}
	return gate.WithAdmission(f.sourceAdmission(est))
}

// holdFor is how a source that is its own raw holds memory for its
// batches (nil with flow.admission off).
func (f *flowControl) holdFor(est *flow.Estimator) func(context.Context, []source.Record) (func(), error) {
	if f == nil || !f.on {
		return nil
	}
	return f.sourceAdmission(est).Hold
}

// addSource lets the controller pause the source called name, when it is
// pausable (p not nil), and pre-initialises its throttle flag; the
// function returned forgets it once the source has stopped.
func (f *flowControl) addSource(name string, p source.Pausable) (remove func()) {
	if f == nil || p == nil {
		return func() {}
	}
	f.m.AddSource(name)
	f.ctl.AddPausable(name, p)
	return func() { f.ctl.RemovePausable(name) }
}
