package arrowipcsrc

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the arrow_ipc sources' counters, labelled by source; each
// counts what a durable gate write (and the cursor saved after it)
// covered.
type Metrics struct {
	files, batches, rows, bytes, undecodable *prometheus.CounterVec
}

// NewMetrics registers the counters on reg, or finds them there when
// another arrow_ipc source of the daemon registered them first.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	vec := func(name, help string) (*prometheus.CounterVec, error) {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"source"})
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if prev, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
					return prev, nil
				}
			}
			return nil, err
		}
		return c, nil
	}
	var m Metrics
	var err error
	for _, d := range []struct {
		into       **prometheus.CounterVec
		name, help string
	}{
		{&m.files, "weir_arrow_ipc_files_total", "Arrow IPC files and streams an arrow_ipc source read to their end."},
		{&m.batches, "weir_arrow_ipc_batches_total", "Arrow record batches an arrow_ipc source made durable, every row of them."},
		{&m.rows, "weir_arrow_ipc_rows_total", "Rows (records) an arrow_ipc source made durable."},
		{&m.bytes, "weir_arrow_ipc_bytes_total", "Bytes of IPC messages (record batches and undecodable ones) an arrow_ipc source made durable or quarantined."},
		{&m.undecodable, "weir_arrow_ipc_undecodable_total", "Undecodable record batches (or rests of files) an arrow_ipc source quarantined with code decode."},
	} {
		if *d.into, err = vec(d.name, d.help); err != nil {
			return nil, err
		}
	}
	return &m, nil
}

// Init pre-initialises the series of source at 0.
func (m *Metrics) Init(source string) {
	if m == nil {
		return
	}
	for _, v := range []*prometheus.CounterVec{m.files, m.batches, m.rows, m.bytes, m.undecodable} {
		v.WithLabelValues(source)
	}
}

func (m *Metrics) add(source string, mv move) {
	if m == nil {
		return
	}
	m.files.WithLabelValues(source).Add(float64(mv.fs))
	m.batches.WithLabelValues(source).Add(float64(mv.batches))
	m.rows.WithLabelValues(source).Add(float64(mv.rows))
	m.bytes.WithLabelValues(source).Add(float64(mv.bytes))
	m.undecodable.WithLabelValues(source).Add(float64(mv.undecodable))
}
