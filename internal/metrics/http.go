package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// HTTP holds the HTTP door's metrics (internal/httpin's Observer). Get it
// from Metrics.HTTP: its series are registered on first use, so a daemon
// without the listener does not export them.
type HTTP struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	bytes    prometheus.Counter
	records  prometheus.Counter
	inFlight prometheus.Gauge
	refused  *prometheus.CounterVec
	listener *prometheus.GaugeVec
}

// httpBuckets span a buffered answer (tens of µs) to a durable one under
// a slow disk.
var httpBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// HTTP returns the HTTP door's metrics, registering them the first time
// with a series for every route × status code in codes and for every
// refusal reason, so that each exists from the first scrape.
func (m *Metrics) HTTP(routes []string, codes []int, reasons []string) *HTTP {
	m.httpOnce.Do(func() {
		f := factory{m.reg}
		h := &HTTP{
			requests: f.counterVec("weir_http_requests_total", "HTTP requests answered, by route and status code.", "route", "code"),
			duration: f.histogramVec("weir_http_request_duration_seconds", "Time from a request's arrival to its answer (for a 200: until every record's tier promise held), by route.", httpBuckets, "route"),
			bytes:    f.counter("weir_http_received_bytes_total", "Body bytes of accepted HTTP requests, as sent (before decompression)."),
			records:  f.counter("weir_http_received_records_total", "Records of accepted HTTP requests (each answered 200 once durable to its tier)."),
			inFlight: f.gauge("weir_http_requests_in_flight", "HTTP requests being served now (read, decoded, or waiting for their tier's promise)."),
			refused:  f.counterVec("weir_http_refused_total", "HTTP requests refused, by reason code (docs/http.md): nothing of a refused request is stored.", "reason"),
			listener: f.gaugeVec("weir_http_listener", "1 while the HTTP door listens; the labels say where (addr), with which scheme (http, https) and for which stream.", "addr", "scheme", "stream"),
		}
		for _, r := range routes {
			h.duration.WithLabelValues(r)
			for _, c := range codes {
				h.requests.WithLabelValues(r, strconv.Itoa(c))
			}
		}
		for _, r := range reasons {
			h.refused.WithLabelValues(r)
		}
		m.http = h
	})
	return m.http
}

// Listening shows the bound listener (weir status prints it); the stop it
// returns removes the series.
func (h *HTTP) Listening(addr, scheme, stream string) (stop func()) {
	h.listener.WithLabelValues(addr, scheme, stream).Set(1)
	return func() { h.listener.DeleteLabelValues(addr, scheme, stream) }
}

// Request counts an answered request.
func (h *HTTP) Request(route string, code int, seconds float64) {
	h.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	h.duration.WithLabelValues(route).Observe(seconds)
}

// Received counts an accepted request's body bytes and records.
func (h *HTTP) Received(bytes, records int) {
	h.bytes.Add(float64(bytes))
	h.records.Add(float64(records))
}

// InFlight moves the in-flight gauge.
func (h *HTTP) InFlight(delta int) { h.inFlight.Add(float64(delta)) }

// Refused counts a refusal.
func (h *HTTP) Refused(reason string) { h.refused.WithLabelValues(reason).Inc() }
