package daemon

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/metrics"
)

// flowControl is the node's memory budget and the controller that samples
// it (docs/flow_control.md). Every kind of node has one: the stuck
// detector watches them all.
type flowControl struct {
	budget *flow.Budget
	ctl    *flow.Controller
	m      *metrics.Flow
	// on reports whether admission is on (flow.admission): with it off,
	// stages hold records without reserving (measurement only).
	on bool
	// drainEst is the drain's estimator; its ratio is the one
	// weir_flow_expansion_ratio shows.
	drainEst *flow.Estimator
	stop     context.CancelFunc
	done     chan struct{}
}

// exitGrace is how long a stuck daemon is given to shut down on its own
// before the process is ended with flow.ExitStuck.
const exitGrace = 5 * time.Second

// startFlow makes the budget and starts the controller. stuck is called
// once if the stuck detector reaches its exit stage: the daemon shuts
// down (and Run returns an error wrapping flow.ErrStuck); should shutdown
// itself hang, the process exits with flow.ExitStuck after
// shutdown_timeout and a grace.
func startFlow(cfg *config.Config, m *metrics.Metrics, log *slog.Logger, stuck func()) *flowControl {
	log = log.With("component", "flow")
	limit, from := cfg.BudgetLimit()
	bo := cfg.BudgetOptions(limit)
	fm := m.Flow(cfg.Thresholds())
	bo.ObserveWait = fm.AdmissionWaited
	f := &flowControl{budget: flow.NewBudget(bo), m: fm, on: cfg.Flow.Admission, done: make(chan struct{}),
		drainEst: flow.NewEstimator(int64(cfg.Flow.RecordSizeEstimate))}
	f.ctl = flow.NewController(flow.Options{
		Budget: f.budget, Estimator: f.drainEst, MemoryLimit: processLimit(), Thresholds: cfg.Thresholds(), Stuck: cfg.StuckThresholds(),
		Interval: cfg.Flow.SampleInterval, Log: log, Observer: fm,
		Exit: func() {
			stuck()
			time.AfterFunc(cfg.ShutdownTimeout+exitGrace, func() {
				log.Error("stuck daemon did not shut down in time; exiting", "exit_code", flow.ExitStuck)
				os.Exit(flow.ExitStuck)
			})
		},
	})
	log.Info("memory budget", "bytes", limit, "from", from, "admission", cfg.Flow.Admission,
		"warmup_percent", cfg.Flow.WarmupPercent, "profile", cfg.Flow.Profile)
	ctx, cancel := context.WithCancel(context.Background())
	f.stop = cancel
	go func() {
		defer close(f.done)
		f.ctl.Run(ctx)
	}()
	return f
}

// processLimit is the memory the process may use, when GOMEMLIMIT or a
// cgroup says (0: the controller takes twice the budget).
func processLimit() int64 {
	if l, _, ok := flow.ProcessLimit(); ok {
		return l
	}
	return 0
}

// close stops the controller (resuming anything it paused) and the
// budget's warm-up timer.
func (f *flowControl) close() {
	f.stop()
	<-f.done
	f.budget.Close()
}
