package daemon

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/httpin"
	"github.com/weir-io/weir/internal/lifecycle"
	"github.com/weir-io/weir/internal/metrics"
	"github.com/weir-io/weir/internal/tlsconf"
	"github.com/weir-io/weir/source"
)

// doorAuth is the HTTP door's credentials ([http]'s token file and TLS
// material), loaded once and shared by the door and the metrics
// endpoint's admin routes (the status page, tap, pprof). Both are re-read
// on SIGHUP, the TLS material also every tls_reload_interval.
type doorAuth struct {
	tokens *httpin.Tokens   // nil without http.token_file
	tls    *tlsconf.Manager // nil without the http.tls_* files
}

// loadDoorAuth loads what the door or the admin routes will use, and
// pushes the end of its reloading on st: both re-read on SIGHUP from
// here on, before any listener serves.
func loadDoorAuth(st *lifecycle.Stack, cfg *config.Config, log *slog.Logger) (doorAuth, error) {
	hc := &cfg.HTTP
	door := hc.Enabled && hc.Listen != ""
	hlog := log.With("component", "http")
	var a doorAuth
	if door || cfg.AdminNeedsAuth() {
		t, err := httpTokens(cfg, hlog)
		if err != nil {
			return doorAuth{}, err
		}
		a.tokens = t
	}
	if door || (cfg.MetricsTLS && cfg.MetricsPort != 0) {
		m, err := httpTLS(cfg, hlog)
		if err != nil {
			return doorAuth{}, err
		}
		a.tls = m
	}
	st.PushClose("http reloads", reloadOnHUP(a.tokens, a.tls, cfg))
	return a, nil
}

// startHTTP binds the HTTP door ([http]) beside the producer socket,
// writing through gate (the write-ahead buffer), and pushes its close on
// st: at shutdown it stops before the buffer, answering the requests it
// is serving. Its credentials are tel.door's. It returns nil when
// http.enabled is false.
func startHTTP(st *lifecycle.Stack, cfg *config.Config, gate source.Gate, tel *telemetry, log *slog.Logger) (*httpin.Ingress, error) {
	hc := &cfg.HTTP
	if !hc.Enabled || hc.Listen == "" {
		return nil, nil
	}
	hlog := log.With("component", "http")
	tokens := tel.door.tokens
	var tlsCfg *tls.Config
	if tel.door.tls != nil {
		tlsCfg = tel.door.tls.ServerConfig()
	}
	written, commits := tel.m.Topology().SourceCounters(hc.Stream)
	obs := httpObserver{HTTP: tel.m.HTTP(httpRoutes(), httpCodes(), httpReasons()), written: written, commits: commits, ctl: tel.fc.ctl}
	opts := httpin.Options{
		Stream:              hc.Stream,
		Addr:                hc.Listen,
		TLS:                 tlsCfg,
		H2C:                 hc.H2C,
		Tokens:              tokens,
		MaxBodyBytes:        hc.MaxBodyBytes,
		MaxDecodedBytes:     hc.MaxDecodedBytes,
		MaxRecords:          hc.MaxRecords,
		MaxRecordBytes:      cfg.MaxFrameBytes,
		MaxConcurrent:       hc.MaxConcurrent,
		MaxConnections:      hc.MaxConnections,
		StreamInflightBytes: hc.StreamInflightBytes,
		ReadHeaderTimeout:   hc.ReadHeaderTimeout,
		ReadTimeout:         hc.ReadTimeout,
		WriteTimeout:        hc.WriteTimeout,
		IdleTimeout:         hc.IdleTimeout,
		MaxHeaderBytes:      hc.MaxHeaderBytes,
		Throttle:            tel.fc.ctl,
		AdmissionWait:       cfg.Flow.AdmissionWait,
		RetryAfter:          cfg.Flow.RetryAfter,
		QueueTimeout:        cfg.QueueTimeout,
		StopTimeout:         cfg.ShutdownTimeout,
		Observer:            obs,
		Logger:              hlog,
	}
	if tel.fc.on {
		opts.Budget = tel.fc.budget
	}
	in := httpin.New(opts)
	if err := in.Listen(gate); err != nil {
		return nil, fmt.Errorf("http.listen: %w", err)
	}
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	unlist := obs.Listening(in.Addr().String(), scheme, hc.Stream)
	st.PushClose("http listener", func() error { defer unlist(); return in.Shutdown() })
	return in, nil
}

// httpTokens reads http.token_file; nil without one.
func httpTokens(cfg *config.Config, log *slog.Logger) (*httpin.Tokens, error) {
	if cfg.HTTP.TokenFile == "" {
		return nil, nil
	}
	return httpin.LoadTokens(cfg.HTTP.TokenFile, log)
}

// httpTLS reads the HTTP door's TLS material; nil when it serves plain
// HTTP. Without http.tls_client_ca_file it asks for no client certificate
// (a bearer token authenticates).
func httpTLS(cfg *config.Config, log *slog.Logger) (*tlsconf.Manager, error) {
	hc := &cfg.HTTP
	if !hc.TLS() {
		return nil, nil
	}
	m, err := tlsconf.New(tlsconf.Options{
		CertFile:          hc.TLSCertFile,
		KeyFile:           hc.TLSKeyFile,
		ClientCAFile:      hc.TLSClientCAFile,
		NoClientCerts:     hc.TLSClientCAFile == "",
		AllowedIdentities: hc.TLSAllowedIdentities,
		Logger:            log,
	})
	if err != nil {
		return nil, fmt.Errorf("http.tls_*: %w", err)
	}
	return m, nil
}

// reloadOnHUP re-reads the token file on SIGHUP, and keeps the TLS
// material fresh (every tls_reload_interval and on SIGHUP), until the
// returned function is called.
func reloadOnHUP(tokens *httpin.Tokens, m *tlsconf.Manager, cfg *config.Config) func() error {
	return httpin.ReloadOnHUP(tokens, m, cfg.TLSReloadInterval)
}

// httpObserver adds the source counters to the HTTP metrics, and counts
// answered requests as progress for the stuck detector, as the socket's
// acks are.
type httpObserver struct {
	*metrics.HTTP
	written, commits prometheus.Counter
	ctl              *flow.Controller
}

func (o httpObserver) Received(bytes, records int) {
	o.HTTP.Received(bytes, records)
	o.written.Add(float64(records))
	o.commits.Inc()
	o.ctl.Progress(1)
}

func httpRoutes() []string {
	var rs []string
	for _, r := range httpin.Routes() {
		rs = append(rs, r.Path)
	}
	return rs
}

// httpCodes are the status codes the routes answer: 200, 101 (a
// stream's upgrade) and every refusal's.
func httpCodes() []int {
	codes := []int{http.StatusOK, http.StatusSwitchingProtocols}
	for _, r := range httpin.Reasons() {
		if c := r.Status(); !slices.Contains(codes, c) {
			codes = append(codes, c)
		}
	}
	return codes
}

func httpReasons() []string {
	rs := []string{httpin.RefusedConnections}
	for _, r := range httpin.Reasons() {
		rs = append(rs, string(r))
	}
	return rs
}

// httpOff says, in the ready line of a node without the write-ahead
// buffer, why the HTTP door does not listen there.
func httpOff(cfg *config.Config) string {
	if !cfg.HTTP.Enabled {
		return "off"
	}
	return "off: the HTTP door needs the write-ahead buffer (gate = \"buffer\", role ingest or both, no source that is its own raw)"
}

// httpAddr is the HTTP door's bound address for the ready line ("off").
func httpAddr(in *httpin.Ingress) string {
	if in == nil {
		return "off"
	}
	return in.Addr().String()
}
