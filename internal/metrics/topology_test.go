package metrics

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

func TestTopologyObserver(t *testing.T) {
	m, reg := New(Config{Shards: 1, Sink: "file"})
	if n, _ := testutil.GatherAndCount(reg, "weir_recovery_backlog"); n != 0 {
		t.Fatalf("backlog exported before the topology is used")
	}
	tp := m.Topology()
	if m.Topology() != tp {
		t.Fatal("Topology is not one value")
	}
	tp.Secondary("pg")
	tp.SecondaryDurable("pg", false)
	tp.SecondaryDurable("copy", true)
	if n, _ := testutil.GatherAndCount(reg, "weir_recovery_backlog"); n != 1 {
		t.Fatalf("weir_recovery_backlog: %d series", n)
	}
	if v := testutil.ToFloat64(tp.backlog); v != 0 {
		t.Errorf("backlog at start = %v", v)
	}
	tp.LiveDropped("pg", 10)
	tp.LiveDropped("pg", 5)
	tp.Delivered("pg", 7, false)
	tp.Delivered("pg", 3, true)
	tp.CommitFailed("pg", errors.New("down"), true)
	tp.Quarantined("pg", record.CodeDecode, 2, false)
	tp.QuarantineShed("pg", 1)
	tp.QuarantineSkipped("pg", 4)
	tp.Coverage("pg", 100, 20, 15)
	tp.RecoveryBacklog(20)
	if n, _ := testutil.GatherAndCount(reg, "weir_recovery_windows_unclaimed", "weir_recovery_leases_held"); n != 0 {
		t.Errorf("recovery lease series exported without recovery leases: %d", n)
	}
	tp.ClaimedRecovery("pg")
	if n, _ := testutil.GatherAndCount(reg, "weir_recovery_windows_unclaimed", "weir_recovery_leases_held"); n != 2 {
		t.Errorf("recovery lease series after ClaimedRecovery: %d, want 2", n)
	}
	tp.RecoveryWindows("pg", 7, 1)
	if n, _ := testutil.GatherAndCount(reg, "weir_secondary_health"); n != 3 {
		t.Errorf("weir_secondary_health before a poll: %d series, want 3", n)
	}
	tp.SecondaryHealth("pg", sink.Health{State: sink.Degraded, Reason: "dedup store down"})
	tp.SourceStarted("k")
	tp.SourceWritten("k", 9)
	tp.SourceCommitted("k")
	tp.SourceRestarted("k")
	tp.SourceStopped("k")
	for _, c := range []struct {
		got, want float64
		what      string
	}{
		{testutil.ToFloat64(tp.dropped.WithLabelValues("pg")), 2, "dropped batches"},
		{testutil.ToFloat64(tp.droppedRecs.WithLabelValues("pg")), 15, "dropped records"},
		{testutil.ToFloat64(tp.delivered.WithLabelValues("pg", "live")), 7, "live"},
		{testutil.ToFloat64(tp.delivered.WithLabelValues("pg", "recovery")), 3, "recovery"},
		{testutil.ToFloat64(tp.failed.WithLabelValues("pg", "recovery")), 1, "failed"},
		{testutil.ToFloat64(tp.quarantined.WithLabelValues("pg", "live", "decode")), 2, "quarantined"},
		{testutil.ToFloat64(tp.quarantined.WithLabelValues("pg", "recovery", "oversize")), 0, "quarantined, pre-initialised"},
		{testutil.ToFloat64(tp.shed.WithLabelValues("pg")), 1, "shed"},
		{testutil.ToFloat64(tp.skipped.WithLabelValues("pg")), 4, "skipped"},
		{testutil.ToFloat64(tp.coverage.WithLabelValues("pg")), 100, "coverage"},
		{testutil.ToFloat64(tp.lag.WithLabelValues("pg")), 20, "lag"},
		{testutil.ToFloat64(tp.missing.WithLabelValues("pg")), 15, "missing"},
		{testutil.ToFloat64(tp.health.WithLabelValues("pg", "degraded")), 1, "health degraded"},
		{testutil.ToFloat64(tp.health.WithLabelValues("pg", "healthy")), 0, "health not healthy"},
		{testutil.ToFloat64(tp.health.WithLabelValues("pg", "down")), 0, "health not down"},
		{testutil.ToFloat64(tp.durable.WithLabelValues("pg")), 0, "not durable"},
		{testutil.ToFloat64(tp.durable.WithLabelValues("copy")), 1, "durable"},
		{testutil.ToFloat64(tp.backlog), 20, "backlog"},
		{testutil.ToFloat64(tp.unclaimed.WithLabelValues("pg")), 7, "unclaimed windows"},
		{testutil.ToFloat64(tp.leases.WithLabelValues("pg")), 1, "leases held"},
		{testutil.ToFloat64(tp.srcWritten.WithLabelValues("k")), 9, "written"},
		{testutil.ToFloat64(tp.srcCommits.WithLabelValues("k")), 1, "commits"},
		{testutil.ToFloat64(tp.srcRestarts.WithLabelValues("k")), 1, "restarts"},
		{testutil.ToFloat64(tp.srcRunning.WithLabelValues("k")), 0, "running"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}
