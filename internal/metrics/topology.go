package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// Topology holds the metrics of the raw-first fan-out (secondaries,
// coverage, recovery, quarantine) and of the sources the daemon runs. It
// implements engine.Observer. Get it from Metrics.Topology: its series are
// registered on first use, so a daemon without secondaries or sources does
// not export them.
type Topology struct {
	backlog     prometheus.Gauge
	dropped     *prometheus.CounterVec
	droppedRecs *prometheus.CounterVec
	delivered   *prometheus.CounterVec
	failed      *prometheus.CounterVec
	quarantined *prometheus.CounterVec
	shed        *prometheus.CounterVec
	skipped     *prometheus.CounterVec
	gone        *prometheus.CounterVec
	coverage    *prometheus.GaugeVec
	lag         *prometheus.GaugeVec
	missing     *prometheus.GaugeVec
	durable     *prometheus.GaugeVec
	health      *prometheus.GaugeVec
	unclaimed   *prometheus.GaugeVec
	leases      *prometheus.GaugeVec

	srcWritten  *prometheus.CounterVec
	srcCommits  *prometheus.CounterVec
	srcRestarts *prometheus.CounterVec
	srcRunning  *prometheus.GaugeVec
	node        *Metrics // weir_quarantined_records_total
}

var _ engine.Observer = (*Topology)(nil)

// Topology returns the fan-out and source metrics, registering them the
// first time.
func (m *Metrics) Topology() *Topology {
	m.topoOnce.Do(func() {
		f := factory{m.reg}
		t := &Topology{node: m}
		t.backlog = f.gauge("weir_recovery_backlog", "Raw positions the furthest-behind secondary has not durably received, queued or missing (0 when every secondary holds all of raw); updated every coverage_flush_interval.")
		t.dropped = f.counterVec("weir_secondary_dropped_batches_total", "Live batches not queued for a secondary because its queue was full (in batches or bytes) or the memory budget could not hold them at once; recovery replays them from raw.", "sink")
		t.droppedRecs = f.counterVec("weir_secondary_dropped_records_total", "Records of the live batches dropped for a secondary (queue full).", "sink")
		t.delivered = f.counterVec("weir_secondary_delivered_records_total", "Records a secondary durably committed or refused, by path (live or recovery).", "sink", "path")
		t.failed = f.counterVec("weir_secondary_commit_failures_total", "Failed commits to a secondary (retried with backoff), by path.", "sink", "path")
		t.quarantined = f.counterVec("weir_secondary_quarantined_records_total", "Records a secondary refused, handed to its quarantine lane, by path and reason code.", "sink", "path", "code")
		t.shed = f.counterVec("weir_secondary_quarantine_shed_records_total", "Quarantine records dropped because the lane was full or its writer failed (the records remain in raw).", "sink")
		t.skipped = f.counterVec("weir_secondary_quarantine_skipped_records_total", "Records refused during recovery and not quarantined again (recovery_mode skip-quarantine).", "sink")
		t.gone = f.counterVec("weir_secondary_unrecoverable_positions_total", "Raw positions a secondary lacked that raw no longer keeps (retention, a deleted origin file): recovery stepped over them and the secondary will never hold those records.", "sink")
		t.coverage = f.gaugeVec("weir_secondary_coverage_end", "End of the contiguous prefix of raw positions the secondary has durably received.", "sink")
		t.lag = f.gaugeVec("weir_secondary_lag_positions", "Raw positions below raw's end the secondary has not durably received: queued for live delivery or missing.", "sink")
		t.missing = f.gaugeVec("weir_secondary_missing_positions", "Raw positions below raw's end the secondary has not received (not counting those queued live).", "sink")
		t.health = f.gaugeVec("weir_secondary_health", "1 for the secondary's state at the last health poll (sink_health_interval), 0 for the others (all 0 before the first poll). Degraded also when its stream's contract is over its reject threshold, its breaker is open or its dedup store cannot be reached; the log says why.", "sink", "state")
		t.durable = f.gaugeVec("weir_secondary_durable", "1 when the secondary's commits wait for stable storage, 0 with durable = false (its coverage may then be ahead of what survives a power loss of its host).", "sink")
		t.unclaimed = f.gaugeVec("weir_recovery_windows_unclaimed", "With recovery leases: the secondary's claimable recovery windows below raw's end that hold a gap and that no node holds — work waiting for a recovery node; updated every coverage_flush_interval.", "sink")
		t.leases = f.gaugeVec("weir_recovery_leases_held", "With recovery leases: the secondary's recovery windows this node holds a claim on (0 or 1: one worker per secondary).", "sink")
		t.srcWritten = f.counterVec("weir_source_records_written_total", "Records a source wrote through its gate (durable there when counted: the write-ahead buffer, primary raw with gate = raw, or its own origin with own_raw).", "source")
		t.srcCommits = f.counterVec("weir_source_position_commits_total", "Position commits a source made after a durable write (Kafka offset commits per partition, JetStream acks, file cursor saves).", "source")
		t.srcRestarts = f.counterVec("weir_source_restarts_total", "Times a source stopped with an error and was restarted after a backoff.", "source")
		t.srcRunning = f.gaugeVec("weir_source_running", "1 while the source runs, 0 while it waits to be restarted.", "source")
		m.topo = t
	})
	return m.topo
}

// Secondary makes the series of one secondary exist from the first scrape.
func (t *Topology) Secondary(name string) {
	t.dropped.WithLabelValues(name)
	t.droppedRecs.WithLabelValues(name)
	for _, p := range []string{"live", "recovery"} {
		t.delivered.WithLabelValues(name, p)
		t.failed.WithLabelValues(name, p)
		codeCounters(t.quarantined, name, p)
	}
	t.shed.WithLabelValues(name)
	t.skipped.WithLabelValues(name)
	t.gone.WithLabelValues(name)
	t.coverage.WithLabelValues(name)
	t.lag.WithLabelValues(name)
	t.missing.WithLabelValues(name)
	for _, st := range healthStates {
		t.health.WithLabelValues(name, st.String())
	}
}

// ClaimedRecovery makes the recovery-lease series of one secondary exist
// from the first scrape (weir_recovery_windows_unclaimed,
// weir_recovery_leases_held); call it when recovery windows are claimed
// by lease.
func (t *Topology) ClaimedRecovery(name string) {
	t.unclaimed.WithLabelValues(name)
	t.leases.WithLabelValues(name)
}

// SecondaryDurable sets weir_secondary_durable of a secondary: 1 when it
// is durable, 0 with durable = false.
func (t *Topology) SecondaryDurable(name string, durable bool) {
	v := 0.0
	if durable {
		v = 1
	}
	t.durable.WithLabelValues(name).Set(v)
}

func pathLabel(recovery bool) string {
	if recovery {
		return "recovery"
	}
	return "live"
}

// LiveDropped implements engine.Observer.
func (t *Topology) LiveDropped(sinkName string, records int) {
	t.dropped.WithLabelValues(sinkName).Inc()
	t.droppedRecs.WithLabelValues(sinkName).Add(float64(records))
}

// Delivered implements engine.Observer.
func (t *Topology) Delivered(sinkName string, records int, recovery bool) {
	t.delivered.WithLabelValues(sinkName, pathLabel(recovery)).Add(float64(records))
}

// Fresh implements engine.Observer: weir_freshness_seconds of a
// secondary fed live.
func (t *Topology) Fresh(sinkName string, recs []sink.Record, at time.Time) {
	observeFreshness(t.node.fresh.WithLabelValues(sinkName), recs, at)
}

// CommitFailed implements engine.Observer.
func (t *Topology) CommitFailed(sinkName string, _ error, recovery bool) {
	t.failed.WithLabelValues(sinkName, pathLabel(recovery)).Inc()
}

// Quarantined implements engine.Observer.
func (t *Topology) Quarantined(sinkName string, code record.Code, records int, recovery bool) {
	t.quarantined.WithLabelValues(sinkName, pathLabel(recovery), code.String()).Add(float64(records))
	t.node.Rejected(code, records)
}

// QuarantineShed implements engine.Observer.
func (t *Topology) QuarantineShed(sinkName string, records int) {
	t.shed.WithLabelValues(sinkName).Add(float64(records))
}

// QuarantineSkipped implements engine.Observer.
func (t *Topology) QuarantineSkipped(sinkName string, records int) {
	t.skipped.WithLabelValues(sinkName).Add(float64(records))
}

// Unrecoverable implements engine.Observer.
func (t *Topology) Unrecoverable(sinkName string, positions uint64) {
	t.gone.WithLabelValues(sinkName).Add(float64(positions))
}

// SecondaryHealth implements engine.Observer.
func (t *Topology) SecondaryHealth(sinkName string, h sink.Health) {
	for _, st := range healthStates {
		t.health.WithLabelValues(sinkName, st.String()).Set(boolValue(st == h.State))
	}
}

// Coverage implements engine.Observer.
func (t *Topology) Coverage(sinkName string, prefix, lag, missing uint64) {
	t.coverage.WithLabelValues(sinkName).Set(float64(prefix))
	t.lag.WithLabelValues(sinkName).Set(float64(lag))
	t.missing.WithLabelValues(sinkName).Set(float64(missing))
}

// RecoveryBacklog implements engine.Observer.
func (t *Topology) RecoveryBacklog(positions uint64) { t.backlog.Set(float64(positions)) }

// RecoveryWindows implements engine.Observer.
func (t *Topology) RecoveryWindows(sinkName string, unclaimed, held uint64) {
	t.unclaimed.WithLabelValues(sinkName).Set(float64(unclaimed))
	t.leases.WithLabelValues(sinkName).Set(float64(held))
}

// SourceStarted makes a source's series exist and marks it running.
func (t *Topology) SourceStarted(name string) {
	t.srcWritten.WithLabelValues(name)
	t.srcCommits.WithLabelValues(name)
	t.srcRestarts.WithLabelValues(name)
	t.srcRunning.WithLabelValues(name).Set(1)
}

// SourceStopped marks a source as not running (waiting to restart, or
// stopped).
func (t *Topology) SourceStopped(name string) { t.srcRunning.WithLabelValues(name).Set(0) }

// SourceRestarted counts a restart after an error.
func (t *Topology) SourceRestarted(name string) { t.srcRestarts.WithLabelValues(name).Inc() }

// SourceWritten counts records made durable by the source's gate.
func (t *Topology) SourceWritten(name string, records int) {
	t.srcWritten.WithLabelValues(name).Add(float64(records))
}

// SourceCommitted counts one position commit.
func (t *Topology) SourceCommitted(name string) { t.srcCommits.WithLabelValues(name).Inc() }

// SourceCounters returns a source's written-records and position-commit
// counters, for a source that counts on its hot path (the socket ingress,
// once per answered frame) and should not look its series up each time.
func (t *Topology) SourceCounters(name string) (written, commits prometheus.Counter) {
	return t.srcWritten.WithLabelValues(name), t.srcCommits.WithLabelValues(name)
}
