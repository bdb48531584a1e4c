package flightsrc

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a Flight source's counters, labelled by stream, each series
// made at start for every configured stream.
type Metrics struct {
	batches, rows, bytes *prometheus.CounterVec
	refused              *prometheus.CounterVec
	ack                  prometheus.Observer
}

// Refusal reasons (weir_flight_refused_total's reason label).
const (
	refusedAuth     = "auth"        // no or a bad token
	refusedCritical = "critical"    // flow control in Critical
	refusedRequest  = "request"     // an unknown stream, a bad descriptor or schema
	refusedWrite    = "not_durable" // the gate's write failed: the stream ends, unacknowledged batches are resent
)

// NewMetrics registers a Flight source's metrics on reg (labelled with
// the source's name: Open wraps the daemon's registerer) with a series
// per stream.
func NewMetrics(reg prometheus.Registerer, streams []string) (*Metrics, error) {
	m := &Metrics{
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weir_flight_batches_total",
			Help: "Record batches received by DoPut, per stream."}, []string{"stream"}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weir_flight_rows_total",
			Help: "Rows (records) received by DoPut, per stream."}, []string{"stream"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weir_flight_bytes_total",
			Help: "Bytes of the record batches' Arrow buffers received by DoPut, per stream."}, []string{"stream"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weir_flight_refused_total",
			Help: "DoPut calls refused or ended with an error, by reason."}, []string{"reason"}),
	}
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "weir_flight_put_result_seconds",
		Help:    "From a batch's arrival to its PutResult, sent once every row is durable at the gate.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})
	m.ack = h
	for _, c := range []prometheus.Collector{m.batches, m.rows, m.bytes, m.refused, h} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, s := range streams {
		m.batches.WithLabelValues(s)
		m.rows.WithLabelValues(s)
		m.bytes.WithLabelValues(s)
	}
	for _, r := range []string{refusedAuth, refusedCritical, refusedRequest, refusedWrite} {
		m.refused.WithLabelValues(r)
	}
	return m, nil
}
