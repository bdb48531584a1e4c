// Package metrics holds weir's Prometheus metrics and its health checks,
// and serves both over HTTP (/metrics, /live, /ready).
//
// Every metric lives in a registry of its own, made by New: nothing is
// registered with the Prometheus default registry, so several daemons (or
// tests) can run in one process. *Metrics implements the observer
// interfaces of the server (server.Observer), the write-ahead buffer
// (wab.Observer) and the drain (drain.Observer); the daemon hands the same
// value to all three. Observer methods on the per-record and per-batch
// paths use label children resolved once in New, so they cost an atomic
// add or two.
//
// Gauges that describe what is on disk (weir_wab_segments, weir_wab_bytes,
// weir_dead_letter_files, weir_dead_letter_bytes) are derived from disk at
// start (WatchWAB, WatchDrain) and then kept current by the observer calls.
// docs/monitoring.md lists every metric.
package metrics

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wire"
)

// Config describes the daemon the metrics are for.
type Config struct {
	// Shards is the configured number of write-ahead buffer shards: the
	// per-shard series of shards 0..Shards-1 exist from the first scrape.
	Shards int
	// Sink is the sink's name, the value of the sink label.
	Sink string
	// DeadLetterMaxBytes is the dead-letter lane's cap, exported as
	// weir_dead_letter_max_bytes so usage can be shown against it (0: not
	// exported).
	DeadLetterMaxBytes int64
	// Version is reported by weir_build_info; empty takes the main
	// module's version from the binary's build information.
	Version string
}

// Label values. Durability and result values are fixed sets; nack codes
// use the wire protocol's names (wire.Code.String).
var (
	durabilityLabels = [2]string{"durable", "buffered"}
	resultLabels     = [3]string{"ok", "transient", "permanent"}
	rejectReasons    = [2]string{"max_connections", "shutting_down"}
	healthStates     = []sink.HealthState{sink.Healthy, sink.Degraded, sink.Down}
)

const (
	resultOK = iota
	resultTransient
	resultPermanent
)

// maxCode bounds the nack codes with pre-resolved children; others take
// the slower labelled path.
const maxCode = 16

// Buckets.
var (
	batchRecordBuckets = prometheus.ExponentialBuckets(1, 4, 9) // 1 … 65536
	syncBuckets        = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	commitBuckets      = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
)

// Metrics records weir's measurements. Create it with New.
type Metrics struct {
	cfg Config
	reg *prometheus.Registry

	topoOnce    sync.Once
	httpOnce    sync.Once
	http        *HTTP
	topo        *Topology
	flowOnce    sync.Once
	flow        *Flow
	qualityOnce sync.Once
	quality     *Quality
	tapOnce     sync.Once
	tap         *Tap

	// Server.
	connOpen      prometheus.Gauge
	connTotal     prometheus.Counter
	connRejected  *prometheus.CounterVec
	connRejectedR [len(rejectReasons)]prometheus.Counter
	recvRecords   *prometheus.CounterVec
	recvBytes     *prometheus.CounterVec
	ackRecords    *prometheus.CounterVec
	ackBytes      *prometheus.CounterVec
	nacked        *prometheus.CounterVec
	recvRecordsD  [2]prometheus.Counter
	recvBytesD    [2]prometheus.Counter
	ackRecordsD   [2]prometheus.Counter
	ackBytesD     [2]prometheus.Counter
	nackedDC      [2][maxCode]prometheus.Counter

	// Write-ahead buffer.
	queueDepth     *prometheus.GaugeVec
	queueDepthS    []prometheus.Gauge
	batchRecords   prometheus.Histogram
	fdatasync      prometheus.Histogram
	writtenBytes   prometheus.Counter
	wabSegments    prometheus.Gauge
	wabBytes       prometheus.Gauge
	sealedSegs     prometheus.Counter
	sealedBytes    prometheus.Counter
	deliveredBytes prometheus.Counter
	shardFailed    *shardFailedCollector
	// preallocation fallbacks (wab.PreallocObserver)
	preallocFallbacks prometheus.Counter
	preallocReduced   *prometheus.GaugeVec
	// torn tails cut at start (wab.RecoveryObserver)
	tailCuts       prometheus.Counter
	tailCutDropped prometheus.Counter

	segMu    sync.Mutex
	segs     map[segKey]int64 // sealed segments on disk and their sizes
	segBytes int64
	sealedAt map[segKey]time.Time // when each was sealed (its mtime, found at start)

	// Drain and sink.
	state           atomic.Int32 // drain.State
	health          atomic.Int32 // sink.HealthState; -1 before the first poll
	commitRecords   [len(resultLabels)]prometheus.Counter
	commitDuration  [len(resultLabels)]prometheus.Observer
	rejectedRecords prometheus.Counter
	retries         prometheus.Counter
	dlFiles         prometheus.Gauge
	dlBytes         prometheus.Gauge
	dlFull          prometheus.Counter
	dlRecords       *prometheus.CounterVec
	dlRecordsC      []prometheus.Counter // by sink.Code
	gateQuar        *prometheus.CounterVec
	gateQuarC       []prometheus.Counter // by sink.Code
	rejected        *prometheus.CounterVec
	rejectedC       []prometheus.Counter // by sink.Code: weir_quarantined_records_total
	segDelivered    prometheus.Counter
	recsDelivered   prometheus.Counter
	segDeferred     prometheus.Counter
	segDamaged      prometheus.Gauge
	fresh           *prometheus.HistogramVec // weir_freshness_seconds, by sink
	freshDrain      prometheus.Observer      // of the drain's sink
}

type segKey struct {
	shard int
	seq   uint64
}

// New makes the metrics and the registry that holds them (with the Go
// runtime and process collectors). Hand the metrics to the subsystems as
// their Observer and the registry to the HTTP server.
func New(cfg Config) (*Metrics, *prometheus.Registry) {
	cfg.Shards = max(cfg.Shards, 0)
	if cfg.Sink == "" {
		cfg.Sink = "unknown"
	}
	reg := prometheus.NewRegistry()
	f := factory{reg}
	m := &Metrics{cfg: cfg, reg: reg, segs: make(map[segKey]int64), sealedAt: make(map[segKey]time.Time)}
	m.health.Store(-1)
	m.state.Store(int32(drain.Idle))

	// Server.
	m.connOpen = f.gauge("weir_connections_open", "Producer connections open now.")
	m.connTotal = f.counter("weir_connections_total", "Producer connections accepted.")
	m.connRejected = f.counterVec("weir_connections_rejected_total", "Producer connections refused at accept, by reason.", "reason")
	for i, r := range rejectReasons {
		m.connRejectedR[i] = m.connRejected.WithLabelValues(r)
	}
	m.recvRecords = f.counterVec("weir_records_received_total", "Records received in decoded push frames, by durability tier.", "durability")
	m.recvBytes = f.counterVec("weir_bytes_received_total", "Payload bytes received in decoded push frames, by durability tier.", "durability")
	m.ackRecords = f.counterVec("weir_records_acked_total", "Records acknowledged to producers, by durability tier.", "durability")
	m.ackBytes = f.counterVec("weir_bytes_acked_total", "Payload bytes acknowledged to producers, by durability tier.", "durability")
	m.nacked = f.counterVec("weir_records_nacked_total", "Records refused to producers, by durability tier and nack code.", "durability", "code")
	for d, dl := range durabilityLabels {
		m.recvRecordsD[d] = m.recvRecords.WithLabelValues(dl)
		m.recvBytesD[d] = m.recvBytes.WithLabelValues(dl)
		m.ackRecordsD[d] = m.ackRecords.WithLabelValues(dl)
		m.ackBytesD[d] = m.ackBytes.WithLabelValues(dl)
		for c := wire.CodeFrameTooLarge; c <= wire.MaxCode; c++ {
			m.nackedDC[d][c] = m.nacked.WithLabelValues(dl, c.String())
		}
	}

	// Write-ahead buffer.
	m.queueDepth = f.gaugeVec("weir_queue_depth", "Requests waiting in a shard's queue, as of the shard's last batch.", "shard")
	m.queueDepthS = make([]prometheus.Gauge, cfg.Shards)
	for i := range m.queueDepthS {
		m.queueDepthS[i] = m.queueDepth.WithLabelValues(shardLabel(i))
	}
	m.batchRecords = f.histogram("weir_batch_records", "Records per write-ahead buffer batch (one write, at most one fdatasync), all shards.", batchRecordBuckets)
	m.fdatasync = f.histogram("weir_fdatasync_duration_seconds", "Duration of the fdatasync that makes a batch with Durable records durable, all shards.", syncBuckets)
	m.writtenBytes = f.counter("weir_wab_written_bytes_total", "Bytes written to write-ahead buffer segments by batches (record framing included).")
	m.wabSegments = f.gauge("weir_wab_segments", "Sealed write-ahead buffer segments on disk, waiting for the drain.")
	m.wabBytes = f.gauge("weir_wab_bytes", "Size in bytes of the sealed write-ahead buffer segments on disk.")
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_wab_oldest_segment_timestamp_seconds",
		Help: "When the oldest sealed segment waiting for the drain was sealed (from disk: its modification time), in Unix seconds; 0 when none waits. time() minus it is how far behind the drain is."},
		m.oldestSealed))
	m.sealedSegs = f.counter("weir_wab_sealed_segments_total", "Segments sealed by the flushers.")
	m.sealedBytes = f.counter("weir_wab_sealed_bytes_total", "Bytes of the segments sealed by the flushers.")
	m.deliveredBytes = f.counter("weir_wab_delivered_bytes_total", "Bytes of sealed segments fully delivered and removed by the drain.")
	m.preallocFallbacks = f.counter("weir_wab_preallocate_fallbacks_total", "Times a shard reserved less disk space ahead of writes than segment_preallocate_bytes, because the disk could not hold that much.")
	m.tailCuts = f.counter("weir_wab_recovery_tail_cuts_total", "Torn tails cut from open segments at start (what a crash left of unsynced writes).")
	m.tailCutDropped = f.counter("weir_wab_recovery_cut_valid_records_total", "Valid records found after a cut torn tail and dropped with it: normally the rest of a batch that was never synced; after a crash under load they can be the only trace of damage in the last synced batch (docs/wab_format.md, Recovery).")
	m.preallocReduced = f.gaugeVec("weir_wab_preallocate_reduced", "1 while the shard reserves less than segment_preallocate_bytes ahead of writes (the disk is nearly full), else 0.", "shard")
	for i := range cfg.Shards {
		m.preallocReduced.WithLabelValues(shardLabel(i)).Set(0)
	}
	m.shardFailed = &shardFailedCollector{
		desc:   prometheus.NewDesc("weir_shard_failed", "1 if the shard has failed (a write or fdatasync error; it accepts nothing until restart), else 0.", []string{"shard"}, nil),
		shards: cfg.Shards,
	}
	reg.MustRegister(m.shardFailed)

	// Drain and sink.
	commitRecords := f.counterVec("weir_sink_commit_records_total", "Records handed to Sink.Commit, by sink and outcome of the call.", "sink", "result")
	commitDuration := f.histogramVec("weir_sink_commit_duration_seconds", "Duration of Sink.Commit calls, by sink and outcome; its _count is the number of calls.", commitBuckets, "sink", "result")
	for i, r := range resultLabels {
		m.commitRecords[i] = commitRecords.WithLabelValues(cfg.Sink, r)
		m.commitDuration[i] = commitDuration.WithLabelValues(cfg.Sink, r)
	}
	m.fresh = f.histogramVec("weir_freshness_seconds", "Time from a record's arrival at the gate (its receive time, an fdatasync before its acknowledgement) to its durable commit by a sink: the drain's sink, raw at a raw gate, and each secondary fed live (not recovery). One observation per distinct receive time: the records of one request or frame share it.", commitBuckets, "sink")
	m.freshDrain = m.fresh.WithLabelValues(cfg.Sink)
	m.rejectedRecords = f.counterVec("weir_sink_rejected_records_total", "Records a sink refused permanently (to be dead-lettered), by sink.", "sink").WithLabelValues(cfg.Sink)
	m.retries = f.counter("weir_drain_retries_total", "Retries of a sub-batch after a transient sink error.")
	m.dlFiles = f.gauge("weir_dead_letter_files", "Files in the dead-letter lane.")
	m.dlBytes = f.gauge("weir_dead_letter_bytes", "Size in bytes of the dead-letter lane.")
	if cfg.DeadLetterMaxBytes > 0 {
		f.gauge("weir_dead_letter_max_bytes", "The dead-letter lane's cap (dead_letter_max_bytes): at it the drain blocks.").Set(float64(cfg.DeadLetterMaxBytes))
	}
	m.dlFull = f.counter("weir_dead_letter_full_total", "Times the drain entered blocked_dead_letter_full (once per entry, not per wake).")
	m.dlRecords = f.counterVec("weir_dead_letter_records_total", "Records written to the dead-letter lane, by reason code.", "code")
	m.dlRecordsC = codeCounters(m.dlRecords)
	m.gateQuar = f.counterVec("weir_gate_quarantined_records_total", "Records a gate quarantined, by reason code: refused by the sink at a raw gate (gate = raw; <data_dir>/quarantine/raw), or too large for the write-ahead buffer (<data_dir>/quarantine/buffer).", "code")
	m.gateQuarC = codeCounters(m.gateQuar)
	m.rejected = f.counterVec("weir_quarantined_records_total", "Records handed to any rejection lane — a secondary's quarantine, a gate's quarantine, the drain's dead letter — by reason code (decode, contract and dq come from the data contracts' checks).", "code")
	m.rejectedC = codeCounters(m.rejected)
	m.segDelivered = f.counter("weir_segments_delivered_total", "Sealed segments fully delivered and removed by the drain.")
	m.recsDelivered = f.counter("weir_records_delivered_total", "Records of fully delivered segments (committed or dead-lettered).")
	m.segDeferred = f.counter("weir_segments_deferred_total", "Times a segment was left on disk for a later pass (retries exhausted, read or write error).")
	m.segDamaged = f.gauge("weir_segments_damaged", "Sealed segments the drain set aside because their next record is damaged: kept on disk, not delivered past the damage, until weir repair (stop the daemon; weir verify shows them). Found again when the drain starts.")
	reg.MustRegister(&stateCollector{m: m,
		desc: prometheus.NewDesc("weir_drain_state", "1 for the drain's current state, 0 for the others.", []string{"state"}, nil)})
	reg.MustRegister(&healthCollector{m: m,
		desc: prometheus.NewDesc("weir_sink_health", "1 for the sink's state at the last health poll, 0 for the others (all 0 before the first poll).", []string{"sink", "state"}, nil)})

	// Build and runtime.
	version, revision := buildInfo(cfg.Version)
	bi := f.gaugeVec("weir_build_info", "Always 1; the labels describe the running binary.", "version", "revision", "goversion")
	bi.WithLabelValues(version, revision, runtime.Version()).Set(1)
	reg.MustRegister(collectors.NewGoCollector())
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m, reg
}

func shardLabel(i int) string { return fmt.Sprintf("%d", i) }

// codeCounters resolves v's child for every reason code, by code, so that
// each exists from the first scrape. v's only label is the code.
func codeCounters(v *prometheus.CounterVec, labels ...string) []prometheus.Counter {
	codes := sink.Codes()
	out := make([]prometheus.Counter, len(codes))
	for i, c := range codes {
		out[i] = v.WithLabelValues(append(labels[:len(labels):len(labels)], c.String())...)
	}
	return out
}

// codeCounter is cs's counter for code c, or the labelled path for a code
// outside the known set.
func codeCounter(cs []prometheus.Counter, v *prometheus.CounterVec, c sink.Code, labels ...string) prometheus.Counter {
	if int(c) < len(cs) {
		return cs[c]
	}
	return v.WithLabelValues(append(labels[:len(labels):len(labels)], c.String())...)
}

func buildInfo(version string) (string, string) {
	revision := "unknown"
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if version == "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				revision = s.Value
			}
		}
	}
	if version == "" {
		version = "unknown"
	}
	return version, revision
}

// factory makes collectors registered with one registry.
type factory struct{ reg *prometheus.Registry }

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	f.reg.MustRegister(g)
	return g
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	f.reg.MustRegister(h)
	return h
}

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}

// stateCollector reports weir_drain_state from one atomic, so a scrape
// never sees two states at 1.
type stateCollector struct {
	m    *Metrics
	desc *prometheus.Desc
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	cur := drain.State(c.m.state.Load())
	for _, s := range drain.States() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, boolValue(s == cur), s.String())
	}
}

// healthCollector reports weir_sink_health from one atomic.
type healthCollector struct {
	m    *Metrics
	desc *prometheus.Desc
}

func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	cur := c.m.health.Load()
	for _, s := range healthStates {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, boolValue(int32(s) == cur), c.m.cfg.Sink, s.String())
	}
}

// ShardErrs is the part of the write-ahead buffer weir_shard_failed reads
// at every scrape. *wab.Log satisfies it.
type ShardErrs interface {
	Shards() int
	ShardErr(shard int) error
}

// shardFailedCollector reports weir_shard_failed for every configured
// shard: 0 until a source is set, then each shard's sticky error.
type shardFailedCollector struct {
	desc   *prometheus.Desc
	shards int
	src    atomic.Pointer[ShardErrs]
}

func (c *shardFailedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *shardFailedCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.shards
	var src ShardErrs
	if p := c.src.Load(); p != nil {
		src = *p
		n = max(n, src.Shards())
	}
	for i := 0; i < n; i++ {
		failed := false
		if src != nil && i < src.Shards() {
			failed = src.ShardErr(i) != nil
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, boolValue(failed), shardLabel(i))
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func durabilityLabel(d int) string {
	if d >= 0 && d < len(durabilityLabels) {
		return durabilityLabels[d]
	}
	return strings.ToLower(wire.Durability(d).String())
}
