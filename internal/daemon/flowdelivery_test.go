package daemon

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/lifecycle"
	"github.com/weir-io/weir/internal/metrics"
	"github.com/weir-io/weir/internal/vfs"
)

const twoSecondaries = `
[[secondary]]
name = "copy"
type = "file"

[[secondary]]
name = "sized"
type = "file"
queue_max_bytes = "1MiB"
`

// testFlow starts the node's flow control for cfg, stopped at the test's
// end.
func testFlow(t *testing.T, cfg *config.Config) *flowControl {
	t.Helper()
	m, _ := metrics.New(metrics.Config{Shards: cfg.Shards, Sink: cfg.Sink.Type})
	fc := startFlow(cfg, m, slog.New(slog.DiscardHandler), func() {})
	t.Cleanup(fc.close)
	return fc
}

// The drain and the fan-out get the node's budget (none with admission
// off), a pacer that applies the profile's batch percent, and the
// secondaries without queue_max_bytes a share of a quarter of the budget.
func TestDeliveryFlowOptions(t *testing.T) {
	for _, tc := range []struct {
		name      string
		toml      string
		admission bool
		scale100  int // what the pacer makes of 100 in the Normal state
	}{
		{"default", "memory_budget = \"64MiB\"\n", true, 100},
		{"admission off", "memory_budget = \"64MiB\"\n[flow]\nadmission = false\n", false, 100},
		{"quorum profile", "memory_budget = \"64MiB\"\n[flow]\nprofile = \"quorum\"\nquorum_batch_percent = 40\n", true, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := loadConfig(t, t.TempDir(), tc.toml+twoSecondaries)
			fc := testFlow(t, cfg)

			var do drain.Options
			fc.drainOptions(cfg, &do)
			fo := engine.FanoutOptions{Secondaries: []engine.SecondaryConfig{{Name: "copy"}, {Name: "sized", QueueBytes: 1 << 20}}}
			fc.fanoutOptions(cfg, &fo)
			if (do.Budget != nil) != tc.admission || (fo.Budget != nil) != tc.admission ||
				tc.admission && (do.Budget != fc.budget || fo.Budget != fc.budget) {
				t.Errorf("budgets %p and %p, admission %v (node budget %p)", do.Budget, fo.Budget, tc.admission, fc.budget)
			}
			if do.Estimator == nil || do.Estimator.Floor() != int64(cfg.Flow.RecordSizeEstimate) || do.Oversize == nil {
				t.Errorf("drain estimator %v, oversize %v", do.Estimator, do.Oversize != nil)
			}
			for _, p := range []interface{ Scale(int) int }{do.Pacer, fo.Pacer} {
				if got := p.Scale(100); got != tc.scale100 {
					t.Errorf("pacer scales 100 to %d, want %d", got, tc.scale100)
				}
			}
			limit, _ := cfg.BudgetLimit()
			if got := fo.Secondaries[0].QueueBytes; got != limit/4/2 {
				t.Errorf("derived queue bytes %d, want a quarter of %d shared by two", got, limit)
			}
			if got := fo.Secondaries[1].QueueBytes; got != 1<<20 {
				t.Errorf("queue_max_bytes 1MiB became %d", got)
			}
			if fo.RecordSizeEstimate != int64(cfg.Flow.RecordSizeEstimate) {
				t.Errorf("record size estimate %d", fo.RecordSizeEstimate)
			}
		})
	}
}

// The fan-out the drain delivers to is opened with the node's flow
// control: the controller watches each secondary's live queue.
func TestDeliveryQueuesWatched(t *testing.T) {
	dir := t.TempDir()
	cfg := loadConfig(t, dir, twoSecondaries)
	fc := testFlow(t, cfg)
	m, _ := metrics.New(metrics.Config{Shards: cfg.Shards, Sink: cfg.Sink.Type})
	k := kinds{cfg: cfg, fs: vfs.OS, metrics: prometheus.NewRegistry(), fc: fc}
	st := lifecycle.New(nil)
	d := openDelivery(context.Background(), st, cfg, k, slog.New(slog.DiscardHandler), &telemetry{m: m, h: metrics.NewHealth(0, nil)})
	defer st.Stop(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.pend.wait(ctx); err != nil {
		t.Fatal(err)
	}
	q := fc.ctl.Sample().Queues
	for _, name := range []string{"secondary-copy", "secondary-sized"} {
		if f, ok := q[name]; !ok || f != 0 {
			t.Errorf("queue %s: fill %v, watched %v", name, f, ok)
		}
	}
}

// A coordination role switches the quorum profile on and off while the
// node runs: the budget's limit at once and the pacer's batch share from
// the next batch; flow.profile = "quorum" keeps it on.
func TestQuorumProfileSwitch(t *testing.T) {
	cfg := loadConfig(t, t.TempDir(), "memory_budget = \"64MiB\"\n[flow]\nquorum_budget_percent = 25\nquorum_batch_percent = 40\n")
	fc := testFlow(t, cfg)
	p := fc.pacer(cfg)
	check := func(limit int64, scaled int) {
		t.Helper()
		if got := fc.budget.Stats().Limit; got != limit {
			t.Errorf("budget limit %d, want %d", got, limit)
		}
		if got := p.Scale(100); got != scaled {
			t.Errorf("pacer makes %d of 100, want %d", got, scaled)
		}
	}
	check(64<<20, 100)
	fc.setQuorum(cfg, true)
	check(16<<20, 40)
	fc.setQuorum(cfg, true) // no change
	check(16<<20, 40)
	fc.setQuorum(cfg, false)
	check(64<<20, 100)

	cfg.Flow.Profile = "quorum"
	fc.setQuorum(cfg, false) // flow.profile keeps it on
	check(16<<20, 40)
}
