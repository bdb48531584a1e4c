package flightsink

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// sinkMetrics are one sink's series.
type sinkMetrics struct {
	batches prometheus.Counter
	rows    prometheus.Counter
	ack     prometheus.Observer
}

// vectors are the Flight sinks' metrics, one series per sink.
type vectors struct {
	batches *prometheus.CounterVec
	rows    *prometheus.CounterVec
	ack     *prometheus.HistogramVec
}

func newVectors() vectors {
	return vectors{
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weir_flight_sink_batches_total",
			Help: "Arrow record batches the Flight server acknowledged (a PutResult received)."}, []string{"sink"}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weir_flight_sink_rows_total",
			Help: "Rows of the record batches the Flight server acknowledged."}, []string{"sink"}),
		ack: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "weir_flight_sink_ack_duration_seconds",
			Help:    "Time from a record batch's send to the server's PutResult for it: the server's durable write.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"sink"}),
	}
}

// RegisterMetrics registers the Flight sinks' metrics on reg (without a
// series yet), as a daemon with a Flight sink does; for the catalogue's
// test.
func RegisterMetrics(reg prometheus.Registerer) error {
	_, err := register(reg)
	return err
}

// register registers the vectors on reg, or finds those another Flight
// sink of the same daemon registered.
func register(reg prometheus.Registerer) (vectors, error) {
	v := newVectors()
	var err error
	v.batches, err = registerOrGet(reg, v.batches)
	if err != nil {
		return v, err
	}
	v.rows, err = registerOrGet(reg, v.rows)
	if err != nil {
		return v, err
	}
	v.ack, err = registerOrGet(reg, v.ack)
	return v, err
}

func registerOrGet[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if ex, ok := are.ExistingCollector.(C); ok {
				return ex, nil
			}
		}
		return c, err
	}
	return c, nil
}

// newMetrics makes sink name's series, so they exist from the first
// scrape.
func newMetrics(reg prometheus.Registerer, name string) (sinkMetrics, error) {
	v, err := register(reg)
	if err != nil {
		return sinkMetrics{}, err
	}
	return sinkMetrics{batches: v.batches.WithLabelValues(name), rows: v.rows.WithLabelValues(name), ack: v.ack.WithLabelValues(name)}, nil
}
