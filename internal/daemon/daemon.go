// Package daemon wires weir's parts together for `weir serve`: the
// write-ahead buffer, the sink (or, with secondaries, the raw-first
// fan-out), the drain, the listeners and the configured sources. It holds no
// logic of its own beyond which parts a node has and in what order they
// start (they stop in reverse, internal/lifecycle), and names no
// sink or source kind: it opens them through the component registry the
// configuration was checked against (kinds.go).
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/lifecycle"
	"github.com/weir-io/weir/internal/statuspage"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/wab"
)

// Run runs the daemon until ctx is cancelled (SIGTERM/SIGINT), then shuts
// it down. A node is a stack of named parts (internal/lifecycle) started in
// order — telemetry, flow control, coordination, data quality, then what
// the node's kind needs — and stopped in reverse order under one deadline,
// cfg.ShutdownTimeout: the whole shutdown, whatever hangs, ends within it
// (and lifecycle.DefaultStraggle); a part that has not stopped by then is
// abandoned. With role = "recovery" the node is a recovery-only node
// (recovery.go), with a source that is its own raw an origin node
// (origin.go), with gate = "raw" a node whose sources write straight into
// the [sink] (rawgate.go), and otherwise a write-ahead buffer node
// (buildBufferNode).
//
// If flow control's stuck detector reaches its exit stage the daemon shuts
// down as on SIGTERM and Run returns an error wrapping flow.ErrStuck
// (`weir serve` exits with flow.ExitStuck).
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx = context.WithValue(ctx, stuckKey{}, func() { cancel(flow.ErrStuck) })
	// The status page shows the last warnings and errors: every record
	// passes through its ring on the way to the configured handler.
	ring := statuspage.NewLogRing(logRingSize)
	log = slog.New(ring.Handler(log.Handler()))
	ctx = context.WithValue(ctx, logRingKey{}, ring)
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

// logRingSize is how many warnings and errors the status page keeps.
const logRingSize = 50

// logRingKey carries, in Run's context, the ring of the log's last
// warnings and errors (nil outside Run).
type logRingKey struct{}

// node is a started node: its telemetry and what it logs once ready.
type node struct {
	tel   *telemetry
	ready func()
}

// builder starts a kind of node's parts on st.
type builder func(ctx context.Context, st *lifecycle.Stack, cfg *config.Config, fs vfs.FS, log *slog.Logger) (node, error)

func run(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	fs, err := faultFS(vfs.OS)
	if err != nil {
		return err
	}
	build := buildBufferNode
	switch _, ownRaw := cfg.OwnRawSource(); {
	case cfg.Role == "recovery":
		build = buildRecoveryNode // recovery.go: no buffer, listeners or sources
	case ownRaw:
		build = buildOriginNode // origin.go: a source that is its own raw
	case cfg.Gate == "raw":
		build = buildRawGateNode // rawgate.go: sources straight into the [sink]
	}
	st := lifecycle.New(log.With("component", "lifecycle"))
	stop := func() error {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		return st.Stop(sctx)
	}
	n, err := build(ctx, st, cfg, fs, log)
	if err != nil {
		return errors.Join(err, stop())
	}
	n.tel.h.Ready()
	n.ready()

	<-ctx.Done()
	n.tel.h.NotReady("shutting down")
	log.Info("shutting down", "shutdown_timeout", cfg.ShutdownTimeout, "parts", len(st.Names()))
	if err := stop(); err != nil {
		return err
	}
	log.Info("shutdown complete")
	return nil
}

// buildBufferNode starts the write-ahead buffer node: producers and
// sources write through the buffer, and the drain delivers it to the
// [sink] (or the raw-first fan-out). The sink being down does not stop
// the start: the buffer takes records meanwhile (pendingSink).
func buildBufferNode(ctx context.Context, st *lifecycle.Stack, cfg *config.Config, fs vfs.FS, log *slog.Logger) (node, error) {
	tlsMgr, err := loadTLS(cfg, log)
	if err != nil {
		return node{}, err
	}
	tel, err := startTelemetry(ctx, st, cfg, fs, log, "recovering the write-ahead buffer")
	if err != nil {
		return node{}, err
	}
	wlog, err := startWAB(ctx, st, cfg, fs, log, tel)
	if err != nil {
		return node{}, err
	}
	k := newKinds(cfg, fs, tel)
	dl := openDelivery(ctx, st, cfg, k, log, tel)
	if err := st.Start("drain", func() (lifecycle.StopFunc, error) { return startDrain(cfg, fs, wlog, dl, tel, log) }); err != nil {
		return node{}, err
	}
	gate, err := engine.NewWABGate(wlog, bufferGateOptions(cfg, fs, tel.m, tel.tap))
	if err != nil {
		return node{}, fmt.Errorf("source gate: %w", err)
	}
	// The producer listeners are the first source. They bind here, so a
	// socket in use fails the start instead of a restart loop.
	ingress := newIngress(cfg, tlsMgr, tel.m, tel.fc, log)
	sockGate := tappedBackend{gate, tel.tap.Point(sourceTap(ingressName))}
	if err := ingress.Listen(sockGate); err != nil {
		return node{}, err
	}
	st.PushClose("producer listeners", ingress.Shutdown)
	ingresses := []listener{{ingress, sockGate}}
	// The HTTP door beside it, through the same buffer.
	webGate := tappedBackend{WABGate: gate}
	if cfg.HTTP.Enabled && cfg.HTTP.Listen != "" {
		webGate.p = tel.tap.Point(sourceTap(cfg.HTTP.Stream))
	}
	web, err := startHTTP(st, cfg, webGate, tel, log)
	if err != nil {
		return node{}, err
	}
	if web != nil {
		ingresses = append(ingresses, listener{web, webGate})
	}
	// Sources — the producer listeners among them — stop before the
	// drain and the buffer: requests already read are answered, a
	// source's last durable write is still committed upstream, and
	// nothing is written after the seal.
	if err := startSources(st, cfg, k, gate, ingresses, dl, tel, log); err != nil {
		return node{}, err
	}
	return node{tel: tel, ready: func() {
		log.Info("weir ready", "socket", cfg.SocketPath, "http", httpAddr(web), "wab_dir", cfg.WABDir, "shards", cfg.Shards, "sink", dl.snk.Name(),
			"secondaries", len(cfg.Secondaries), "sources", len(cfg.Sources))
	}}, nil
}

// startWAB opens the write-ahead buffer (recovering it) and pushes its
// close: it seals the open segments once the drain and the sources have
// stopped. What is sealed at shutdown is delivered at the next start.
func startWAB(ctx context.Context, st *lifecycle.Stack, cfg *config.Config, fs vfs.FS, log *slog.Logger, tel *telemetry) (*wab.Log, error) {
	if err := makeDirs(fs, cfg, log); err != nil { // before the shards reserve space
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
	st.Push("write-ahead buffer", func(ctx context.Context) error {
		if err := wlog.Close(ctx); err != nil {
			return fmt.Errorf("close write-ahead buffer: %w", err)
		}
		return nil
	})
	tel.watchWAB(fs, wlog)
	tel.fc.watchShardQueues(wlog)
	return wlog, nil
}

// startDrain starts the drain that delivers the buffer to dl. Its stop
// ends the drain's run; a delivery cut short is replayed at the next
// start (never confirmed half-done).
// drainLinger maps drain_linger (0: no wait) to drain.Options.Linger
// (0: the default, negative: no wait).
func drainLinger(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

func startDrain(cfg *config.Config, fs vfs.FS, wlog *wab.Log, dl *delivery, tel *telemetry, log *slog.Logger) (lifecycle.StopFunc, error) {
	opts := drain.Options{
		FS:                      fs,
		WABDir:                  cfg.WABDir,
		Source:                  wlog,
		Sink:                    dl.snk,
		Logger:                  log, // the drain adds its component and sink
		RetryBase:               cfg.DrainRetryBase,
		RetryMax:                cfg.DrainRetryMax,
		MaxRetries:              drainRetries(cfg.DrainMaxRetries),
		DeadLetterMaxBytes:      cfg.DeadLetterMaxBytes,
		DeadLetterCheckInterval: cfg.DeadLetterCheckInterval,
		HealthInterval:          cfg.SinkHealthInterval,
		SealedOnly:              !cfg.DrainOpenSegments,
		Linger:                  drainLinger(cfg.DrainLinger),
		SinkOpened:              dl.pend.ready,
		Observer:                tel.m,
	}
	tel.fc.drainOptions(cfg, &opts) // admission, batch sizes, write results
	dr, err := drain.New(opts)
	if err != nil {
		return nil, err
	}
	tel.watchDrain(dr)
	return goStop(func(ctx context.Context) error {
		if err := dr.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("drain stopped", "err", err)
			return err
		}
		return nil
	}), nil
}

// goStop runs f on its own goroutine until the stop it returns cancels
// f's context; that stop waits for f to return, at most until its own
// context ends, and returns f's error.
func goStop(f func(ctx context.Context) error) lifecycle.StopFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	return func(sctx context.Context) error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-sctx.Done():
			return sctx.Err()
		}
	}
}

// drainRetries maps drain_max_retries to drain.Options.MaxRetries, where 0
// means "the default" and a negative value means none.
func drainRetries(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
