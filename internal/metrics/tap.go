package metrics

import "github.com/prometheus/client_golang/prometheus"

// Tap is the metrics of weir tap's points (internal/tap): it implements
// tap.Observer.
type Tap struct {
	dropped *prometheus.CounterVec
	readers *prometheus.GaugeVec
}

// Tap returns the tap metrics, registering them at the first call.
func (m *Metrics) Tap() *Tap {
	m.tapOnce.Do(func() {
		f := factory{m.reg}
		m.tap = &Tap{
			dropped: f.counterVec("weir_tap_dropped_total", "Records a tap reader (weir tap) missed at a point because its buffer was full: the reader was slower than the pipeline, which never waits for it.", "point"),
			readers: f.gaugeVec("weir_tap_readers", "Tap readers (weir tap) attached to a point now.", "point"),
		}
	})
	return m.tap
}

// Point makes a point's series exist from the first scrape, and returns
// what counts the records its readers had no room for.
func (t *Tap) Point(name string) (dropped func(n int)) {
	c := t.dropped.WithLabelValues(name)
	t.readers.WithLabelValues(name)
	return func(n int) { c.Add(float64(n)) }
}

// Readers counts a reader attached (+1) or gone (-1).
func (t *Tap) Readers(point string, delta int) { t.readers.WithLabelValues(point).Add(float64(delta)) }
