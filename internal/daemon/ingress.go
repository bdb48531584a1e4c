package daemon

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/metrics"
	"github.com/weir-io/weir/internal/server"
	"github.com/weir-io/weir/internal/tlsconf"
	"github.com/weir-io/weir/wire"
)

// ingressName is the producer listeners' name as a source.
const ingressName = "socket"

// newIngress returns the producer listeners (the Unix socket, and TCP with
// mutual TLS when configured) as a source. An acknowledged frame counts as
// a position commit and its records as written: the producer keeps its own
// position, and the Ack is sent only once the records are durable to the
// tier it asked for.
func newIngress(cfg *config.Config, tlsMgr *tlsconf.Manager, m *metrics.Metrics, fc *flowControl, log *slog.Logger) *server.Ingress {
	written, commits := m.Topology().SourceCounters(ingressName)
	opts := server.Options{
		MaxConnections:   cfg.MaxConnections,
		MaxFrameBytes:    cfg.MaxFrameBytes,
		FrameReadTimeout: cfg.FrameReadTimeout,
		IdleTimeout:      cfg.IdleTimeout,
		WriteTimeout:     cfg.WriteTimeout,
		QueueTimeout:     cfg.QueueTimeout,
		ConnMaxInflight:  cfg.ConnMaxInflight,
		Logger:           log.With("component", "server"),
		Observer:         ingressObserver{Observer: m, written: written, commits: commits, ctl: fc.ctl},
	}
	fc.admitProducers(cfg, &opts)
	return server.NewIngress(server.IngressOptions{
		Name:        ingressName,
		Server:      opts,
		SocketPath:  cfg.SocketPath,
		Extra:       func(s *server.Server) (func(), error) { return serveTCP(s, tlsMgr, cfg) },
		StopTimeout: cfg.ShutdownTimeout,
	})
}

// ingressObserver adds the source counters to the server's metrics, and
// counts acks as progress for the stuck detector (a connection keeps its
// memory credit while it is busy, so the budget's releases do not show a
// busy socket's progress).
type ingressObserver struct {
	server.Observer
	written, commits prometheus.Counter
	ctl              *flow.Controller
}

func (o ingressObserver) Acked(d wire.Durability, frames, records, bytes int) {
	o.Observer.Acked(d, frames, records, bytes)
	o.written.Add(float64(records))
	o.commits.Add(float64(frames))
	o.ctl.Progress(frames)
}
