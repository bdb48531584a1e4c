// Package daemon wires weir's parts together for `weir serve`: the
// write-ahead buffer, the sink (or, with secondaries, the raw-first
// fan-out), the drain, the listeners and the configured sources. It holds no
// logic of its own beyond start-up order and shutdown order, and names no
// sink or source kind: it opens them through the component registry the
// configuration was checked against (kinds.go).
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/wab"
)

// Run runs the daemon until ctx is cancelled (SIGTERM/SIGINT), then shuts
// down in order: stop accepting and answer every accepted request, seal the
// write-ahead buffer, stop the drain, close the sink. The whole shutdown is
// bounded by cfg.ShutdownTimeout. With role = "recovery" it runs a
// recovery-only node instead (runRecoveryNode), with a source that is its
// own raw an origin node (runOriginNode), and with gate = "raw" a node
// whose sources write straight into the [sink] (runRawGateNode).
//
// If flow control's stuck detector reaches its exit stage the daemon shuts
// down as on SIGTERM and Run returns an error wrapping flow.ErrStuck
// (`weir serve` exits with flow.ExitStuck).
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx = context.WithValue(ctx, stuckKey{}, func() { cancel(flow.ErrStuck) })
	err := run(ctx, cfg, log)
	if cause := context.Cause(ctx); errors.Is(cause, flow.ErrStuck) {
		return errors.Join(fmt.Errorf("daemon stopped by the stuck detector: %w", cause), err)
	}
	return err
}

// stuckKey carries, in Run's context, the function that stops the daemon
// for the stuck detector.
type stuckKey struct{}

// stuckFrom returns the function Run put in ctx (a no-op outside Run).
func stuckFrom(ctx context.Context) func() {
	if f, ok := ctx.Value(stuckKey{}).(func()); ok {
		return f
	}
	return func() {}
}

func run(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	fs, err := faultFS(vfs.OS)
	if err != nil {
		return err
	}
	if cfg.Role == "recovery" {
		return runRecoveryNode(ctx, cfg, fs, log) // recovery.go: no buffer, listeners or sources
	}
	if sc, ok := cfg.OwnRawSource(); ok {
		return runOriginNode(ctx, cfg, sc, fs, log) // origin.go: a source that is its own raw
	}
	if cfg.Gate == "raw" {
		return runRawGateNode(ctx, cfg, fs, log) // rawgate.go: sources straight into the [sink]
	}
	return runBufferNode(ctx, cfg, fs, log)
}

// runBufferNode runs the write-ahead buffer node: producers and sources
// write through the buffer, and the drain delivers it to the [sink] (or
// the raw-first fan-out).
func runBufferNode(ctx context.Context, cfg *config.Config, fs vfs.FS, log *slog.Logger) error {
	tlsMgr, err := loadTLS(cfg, log)
	if err != nil {
		return err
	}
	tel, err := startTelemetry(ctx, cfg, fs, log, "recovering the write-ahead buffer")
	if err != nil {
		return err
	}
	defer tel.stop()
	b, err := startBuffer(ctx, cfg, fs, log, tel)
	if err != nil {
		return err
	}
	gate, err := engine.NewWABGate(b.wlog, bufferGateOptions(cfg, fs, tel.m))
	if err != nil {
		return errors.Join(fmt.Errorf("source gate: %w", err), b.close(context.Background()))
	}
	// The producer listeners are the first source. They bind here, so a
	// socket in use fails the start instead of a restart loop.
	ingress := newIngress(cfg, tlsMgr, tel.m, tel.fc, log)
	if err := ingress.Listen(gate); err != nil {
		return errors.Join(err, b.close(context.Background()))
	}
	srcs, err := startSources(cfg, newKinds(cfg, fs, tel), gate, ingress, b.dl, tel, log)
	if err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		serr := ingress.Shutdown()
		return errors.Join(err, serr, b.close(sctx))
	}
	tel.h.Ready()
	log.Info("weir ready", "socket", cfg.SocketPath, "wab_dir", cfg.WABDir, "shards", cfg.Shards, "sink", b.dl.snk.Name(),
		"secondaries", len(cfg.Secondaries), "sources", len(cfg.Sources))

	<-ctx.Done()
	tel.h.NotReady("shutting down")
	log.Info("shutting down", "shutdown_timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	// Sources — the producer listeners among them — stop before the
	// buffer closes: requests already read are answered, a source's last
	// durable write is still committed upstream, and nothing is written
	// after the seal.
	err = errors.Join(srcs.stop(sctx, log), b.close(sctx))
	if err == nil {
		log.Info("shutdown complete")
	}
	return err
}

// buffer is the write-ahead buffer with the drain that delivers it.
type buffer struct {
	wlog      *wab.Log
	dl        *delivery
	stopDrain context.CancelFunc
	drained   chan struct{}
}

// startBuffer opens the write-ahead buffer and what it delivers to, and
// starts the drain.
func startBuffer(ctx context.Context, cfg *config.Config, fs vfs.FS, log *slog.Logger, tel *telemetry) (*buffer, error) {
	if err := makeDirs(fs, cfg); err != nil { // before the shards reserve space
		return nil, err
	}
	wlog, err := wab.Open(ctx, wab.Options{
		FS:               fs,
		Dir:              cfg.WABDir,
		Shards:           cfg.Shards,
		SegmentMaxBytes:  cfg.SegmentMaxBytes,
		SegmentMaxAge:    cfg.SegmentMaxAge,
		PreallocateBytes: cfg.PreallocateBytes,
		BatchMaxRecords:  cfg.BatchMaxRecords,
		BatchDeadline:    cfg.BatchDeadline,
		QueueCapacity:    cfg.QueueCapacity,
		MaxRecordBytes:   cfg.MaxFrameBytes,
		Logger:           log.With("component", "wab"),
		Observer:         tel.m,

		QueueCapacityBytes: cfg.QueueCapacityBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("open write-ahead buffer: %w", err)
	}
	tel.watchWAB(fs, wlog)
	tel.fc.watchShardQueues(wlog)
	b := &buffer{wlog: wlog, stopDrain: func() {}, drained: make(chan struct{})}
	close(b.drained) // no drain yet
	b.dl, err = openDelivery(ctx, cfg, newKinds(cfg, fs, tel), log, tel.m)
	if err != nil {
		return nil, errors.Join(err, b.closeWAB(context.Background()))
	}
	opts := drain.Options{
		FS:                      fs,
		WABDir:                  cfg.WABDir,
		Source:                  wlog,
		Sink:                    b.dl.snk,
		Logger:                  log.With("component", "drain"),
		RetryBase:               cfg.DrainRetryBase,
		RetryMax:                cfg.DrainRetryMax,
		MaxRetries:              drainRetries(cfg.DrainMaxRetries),
		DeadLetterMaxBytes:      cfg.DeadLetterMaxBytes,
		DeadLetterCheckInterval: cfg.DeadLetterCheckInterval,
		HealthInterval:          cfg.SinkHealthInterval,
		Observer:                tel.m,
	}
	tel.fc.drainOptions(cfg, &opts) // admission, batch sizes, write results
	dr, err := drain.New(opts)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("start drain: %w", err), b.close(context.Background()))
	}
	tel.watchDrain(dr)
	drainCtx, stop := context.WithCancel(context.Background())
	b.stopDrain, b.drained = stop, make(chan struct{})
	go func() {
		defer close(b.drained)
		if err := dr.Run(drainCtx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("drain stopped", "err", err)
		}
	}()
	return b, nil
}

// close stops the drain, then seals the write-ahead buffer, then closes
// the sink. The drain stops before the WAB seals its open segments: what
// is sealed at shutdown is delivered at the next start, and a delivery
// cut short here is replayed (never confirmed half-done).
func (b *buffer) close(ctx context.Context) error {
	b.stopDrain()
	<-b.drained
	err := b.closeWAB(ctx)
	if cerr := b.dl.snk.Close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close sink: %w", cerr))
	}
	return err
}

func (b *buffer) closeWAB(ctx context.Context) error {
	if err := b.wlog.Close(ctx); err != nil {
		return fmt.Errorf("close write-ahead buffer: %w", err)
	}
	return nil
}

// drainRetries maps drain_max_retries to drain.Options.MaxRetries, where 0
// means "the default" and a negative value means none.
func drainRetries(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
