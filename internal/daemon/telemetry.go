package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/metrics"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/source"
	"github.com/weir-io/weir/wab"
)

// telemetry is the daemon's metrics, health state and their HTTP endpoint
// (nil srv when metrics_port is 0).
type telemetry struct {
	m   *metrics.Metrics
	reg prometheus.Registerer // the per-instance registry, for components
	h   *metrics.Health
	srv *metrics.Server
	log *slog.Logger
	fc  *flowControl  // the memory budget and the flow controller
	dq  *quality      // the data contracts; nil without [[contract]]
	co  *coordination // the coordination cluster; nil with coordination.mode = 0
}

// startTelemetry makes the metrics and, unless metrics_port is 0, binds
// the endpoint; failing to bind is a start-up error. The daemon is not
// ready — for the reason notReady gives — until ready is called.
func startTelemetry(ctx context.Context, cfg *config.Config, fs vfs.FS, log *slog.Logger, notReady string) (*telemetry, error) {
	base := log
	log = log.With("component", "metrics")
	m, reg := metrics.New(metrics.Config{Shards: cfg.Shards, Sink: cfg.Sink.Type, DeadLetterMaxBytes: cfg.DeadLetterMaxBytes})
	t := &telemetry{m: m, reg: reg, h: metrics.NewHealth(cfg.LiveStallTimeout, log), log: log}
	t.h.NotReady(notReady)
	t.fc = startFlow(cfg, m, base, stuckFrom(ctx))
	t.h.WatchStuck(t.fc.ctl)
	dq, err := openQuality(ctx, cfg, fs, m, base)
	if err != nil {
		t.fc.close()
		return nil, fmt.Errorf("contracts: %w", err)
	}
	t.dq = dq
	if t.co, err = startCoordination(ctx, cfg, t.fc, reg, base); err != nil {
		t.fc.close()
		return nil, errors.Join(err, t.closeQuality())
	}
	if cfg.MetricsPort == 0 {
		log.Info("metrics endpoint disabled (metrics_port = 0)")
		return t, nil
	}
	srv, err := metrics.Listen(ctx, metrics.ServerOptions{
		Addr:     net.JoinHostPort(cfg.MetricsBind, strconv.Itoa(cfg.MetricsPort)),
		Registry: reg,
		Health:   t.h,
		Logger:   log,
		Pprof:    cfg.DebugPprof,
	})
	if err != nil {
		t.fc.close()
		return nil, errors.Join(fmt.Errorf("metrics endpoint (metrics_bind, metrics_port): %w", err), t.closeQuality(), t.closeCoordination())
	}
	t.srv = srv
	return t, nil
}

// watchWAB derives the write-ahead buffer gauges from disk and adds the
// flushers to the liveness check. Call before the drain starts.
func (t *telemetry) watchWAB(fs vfs.FS, l *wab.Log) {
	if err := t.m.WatchWAB(fs, l); err != nil {
		t.log.Error("cannot derive write-ahead buffer gauges from disk", "err", err)
	}
	t.h.WatchFlushers(l)
	t.h.NotReady("starting the sink, the drain and the listeners")
}

// watchDrain sets the dead-letter gauges and adds the drain to the
// liveness check.
func (t *telemetry) watchDrain(d *drain.Drain) {
	t.m.WatchDrain(d)
	t.h.WatchDrain(d)
}

// addSource lets flow control, and the breaker of the source's contract,
// pause the source called name (when p is not nil): it is paused while
// either wants it paused. The function returned forgets it once the
// source has stopped.
func (t *telemetry) addSource(name string, p source.Pausable) (remove func()) {
	if p == nil {
		return func() {}
	}
	v := source.NewVotes(p)
	t.dq.bindSource(name, v.Voter("breaker"))
	return t.fc.addSource(name, v.Voter("flow"))
}

// closeQuality flushes the dq-audit trail and closes the dedup stores.
func (t *telemetry) closeQuality() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return t.dq.close(ctx)
}

// closeCoordination hands off the node's coordination role and stops its
// member, within coordination.handoff_grace and a little more for the
// final backup.
func (t *telemetry) closeCoordination() error {
	if t.co == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.co.grace+10*time.Second)
	defer cancel()
	return t.co.close(ctx)
}

// stop closes the endpoint; it is the last thing the daemon does, after
// the sinks are closed (the dq-audit trail's last window is written
// here).
func (t *telemetry) stop() {
	if err := t.closeQuality(); err != nil {
		t.log.Error("closing the data contracts (dq-audit trail, dedup stores)", "err", err)
	}
	if err := t.closeCoordination(); err != nil {
		t.log.Error("leaving the coordination cluster", "err", err)
	}
	t.fc.close()
	if t.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := t.srv.Shutdown(ctx); err != nil {
		t.log.Warn("closing metrics endpoint", "err", err)
	}
}
