package daemon

import (
	"context"
	"log/slog"
	"os"
	"sync/atomic"
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

	// quorum is whether the quorum profile is in force: set by
	// flow.profile = "quorum", or while the node holds a coordination
	// quorum role (setQuorum).
	quorum             atomic.Bool
	limits             [2]int64 // the budget under the default and the quorum profile
	quorumBatchPercent int
	log                *slog.Logger
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
		drainEst: flow.NewEstimator(int64(cfg.Flow.RecordSizeEstimate)), log: log,
		quorumBatchPercent: cfg.Flow.QuorumBatchPercent}
	f.limits = profileLimits(cfg)
	f.quorum.Store(cfg.Flow.Profile == "quorum")
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

// profileLimits is the budget under the default profile and under the
// quorum profile.
func profileLimits(cfg *config.Config) [2]int64 {
	c := *cfg
	c.Flow.Profile = "default"
	def, _ := c.BudgetLimit()
	c.Flow.Profile = "quorum"
	q, _ := c.BudgetLimit()
	return [2]int64{def, q}
}

// setQuorum switches the quorum profile on or off while the node runs (a
// coordination role taken or given up): the budget's limit at once, batch
// sizes from the next batch on. flow.profile = "quorum" keeps it on.
func (f *flowControl) setQuorum(cfg *config.Config, on bool) {
	on = on || cfg.Flow.Profile == "quorum"
	if f.quorum.Swap(on) == on {
		return
	}
	limit := f.limits[0]
	if on {
		limit = f.limits[1]
	}
	f.budget.SetLimit(limit)
	f.log.Info("flow-control profile switched", "profile", map[bool]string{false: "default", true: "quorum"}[on],
		"budget_bytes", limit, "batch_percent", f.batchPercent())
}

// batchPercent is the share of every batch size the profile in force
// runs with.
func (f *flowControl) batchPercent() int {
	if f.quorum.Load() {
		return f.quorumBatchPercent
	}
	return 100
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
