package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/dqaudit"
	"github.com/weir-io/weir/record"
)

// Quality holds the data contracts' metrics: the checks' outcomes, the
// streams' reject ratios and breakers, content dedup and the dq-audit
// trail. It implements check.Observer and dedup.Observer. Make it with
// Metrics.Quality.
type Quality struct {
	records    *prometheus.CounterVec
	rules      *prometheus.CounterVec
	ratio      *prometheus.GaugeVec
	breaker    *prometheus.GaugeVec
	dropped    *prometheus.CounterVec
	lookups    *prometheus.CounterVec
	lookupErrs *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	degraded   *prometheus.GaugeVec
	keys       *prometheus.GaugeVec
	keyBytes   *prometheus.GaugeVec
	audit      *prometheus.GaugeVec
}

var lookupBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

// Quality returns the data contracts' metrics, registering them on first
// use; the daemon calls Stream for every contract at start, so each
// stream's series exist from the first scrape.
func (m *Metrics) Quality() *Quality {
	m.qualityOnce.Do(func() { m.quality = newQuality(factory{m.reg}) })
	return m.quality
}

func newQuality(f factory) *Quality {
	q := &Quality{}
	q.records = f.counterVec("weir_contract_records_total", "Records a stream's contract judged on their way to a sink, by outcome (pass, warn, reject, duplicate) and, for rejects, code (decode, contract, dq); each sink's delivery is judged, so a record counts once per sink.", "source", "outcome", "code")
	q.rules = f.counterVec("weir_contract_rule_failures_total", "Records that failed a rule, by rule (schema and decode included) and severity (fail: quarantined; warn: passed on).", "source", "rule", "severity")
	q.ratio = f.gaugeVec("weir_contract_reject_ratio", "Share of the stream's records rejected over its contract's window; -1 until the window holds min_records. Above degraded_percent the stream's sinks report Degraded.", "source")
	q.breaker = f.gaugeVec("weir_contract_breaker_open", "1 while the stream's breaker holds its source paused (breaker_percent exceeded), else 0.", "source")
	q.dropped = f.counterVec("weir_dedup_dropped_total", "Records content dedup dropped as duplicates of another record (raw keeps them), per stream; counted once per sink judged.", "source")
	q.lookups = f.counterVec("weir_dedup_lookups_total", "Keys looked up and claimed in the dedup store (one round trip per batch).", "source")
	q.lookupErrs = f.counterVec("weir_dedup_store_errors_total", "Dedup store round trips that failed: their batch passed without dedup.", "source")
	q.latency = f.histogramVec("weir_dedup_store_seconds", "Time of one dedup store round trip (a batch's lookups and claims).", lookupBuckets, "source")
	q.degraded = f.gaugeVec("weir_dedup_degraded", "1 while the stream's dedup store cannot be reached: records pass without dedup.", "source")
	q.keys = f.gaugeVec("weir_dedup_keys", "Keys the stream's seen-set holds (-1 when the store cannot tell).", "source")
	q.keyBytes = f.gaugeVec("weir_dedup_key_bytes", "Estimated bytes per key held in the stream's seen-set (-1 when the store cannot tell).", "source")
	q.audit = f.gaugeVec("weir_dq_audit_entries", "The dq-audit trail's entries: pending (not yet durable), written, dropped (pending bound exceeded), write_errors.", "state")
	return q
}

// Stream makes a stream's series exist from the first scrape.
func (q *Quality) Stream(name string, dedup bool) {
	q.records.WithLabelValues(name, string(dqaudit.Passed), "")
	q.ratio.WithLabelValues(name).Set(-1)
	q.breaker.WithLabelValues(name)
	q.dropped.WithLabelValues(name)
	if dedup {
		q.lookups.WithLabelValues(name)
		q.lookupErrs.WithLabelValues(name)
		q.degraded.WithLabelValues(name)
	}
}

// Judged implements check.Observer.
func (q *Quality) Judged(stream string, outcome dqaudit.Outcome, code record.Code, n int) {
	c := ""
	if outcome == dqaudit.Rejected {
		c = code.String()
	}
	q.records.WithLabelValues(stream, string(outcome), c).Add(float64(n))
}

// RuleFailed implements check.Observer.
func (q *Quality) RuleFailed(stream, rule string, warn bool, n int) {
	sev := "fail"
	if warn {
		sev = "warn"
	}
	q.rules.WithLabelValues(stream, rule, sev).Add(float64(n))
}

// FailRatio implements check.Observer.
func (q *Quality) FailRatio(stream string, ratio float64) { q.ratio.WithLabelValues(stream).Set(ratio) }

// Breaker reports a stream's breaker opening or closing.
func (q *Quality) Breaker(stream string, open bool) {
	q.breaker.WithLabelValues(stream).Set(boolValue(open))
}

// Lookup implements dedup.Observer.
func (q *Quality) Lookup(stream string, keys int, took time.Duration, err error) {
	q.lookups.WithLabelValues(stream).Add(float64(keys))
	q.latency.WithLabelValues(stream).Observe(took.Seconds())
	if err != nil {
		q.lookupErrs.WithLabelValues(stream).Inc()
	}
}

// Dropped implements dedup.Observer.
func (q *Quality) Dropped(stream string, n int) { q.dropped.WithLabelValues(stream).Add(float64(n)) }

// Degraded implements dedup.Observer.
func (q *Quality) Degraded(stream string, on bool) {
	q.degraded.WithLabelValues(stream).Set(boolValue(on))
}

// Held reports a stream's seen-set size.
func (q *Quality) Held(stream string, keys, bytes int64) {
	q.keys.WithLabelValues(stream).Set(float64(keys))
	per := -1.0
	if keys > 0 && bytes >= 0 {
		per = float64(bytes) / float64(keys)
	}
	q.keyBytes.WithLabelValues(stream).Set(per)
}

// Audit reports the dq-audit trail's counts.
func (q *Quality) Audit(pending, written, dropped, writeErrors int64) {
	q.audit.WithLabelValues("pending").Set(float64(pending))
	q.audit.WithLabelValues("written").Set(float64(written))
	q.audit.WithLabelValues("dropped").Set(float64(dropped))
	q.audit.WithLabelValues("write_errors").Set(float64(writeErrors))
}
