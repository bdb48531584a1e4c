// Package daemon wires weir's parts together for `weir serve`: the
// write-ahead buffer, the sink (or, with secondaries, the raw-first
// fan-out), the drain, the listeners and the configured sources. It holds no
// logic of its own beyond start-up order and shutdown order.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/sink/mysqlsink"
	"github.com/weir-io/weir/internal/sink/parquetsink"
	"github.com/weir-io/weir/internal/sink/pgsink"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

// Run runs the daemon until ctx is cancelled (SIGTERM/SIGINT), then shuts
// down in order: stop accepting and answer every accepted request, seal the
// write-ahead buffer, stop the drain, close the sink. The whole shutdown is
// bounded by cfg.ShutdownTimeout. With role = "recovery" it runs a
// recovery-only node instead (runRecoveryNode), with a source that is its
// own raw an origin node (runOriginNode), and with gate = "raw" a node
// whose sources write straight into the [sink] (runRawGateNode).
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	fs, err := faultFS(vfs.OS)
	if err != nil {
		return err
	}
	if cfg.Role == "recovery" {
		return runRecoveryNode(ctx, cfg, fs, log) // recovery.go: no buffer, listeners or sources
	}
	if sc, ok := cfg.OwnRawSource(); ok {
		return runOriginNode(ctx, cfg, sc, fs, log) // origin.go: a file source that is its own raw
	}
	if cfg.Gate == "raw" {
		return runRawGateNode(ctx, cfg, fs, log) // rawgate.go: sources straight into the [sink]
	}
	tlsMgr, err := loadTLS(cfg, log)
	if err != nil {
		return err
	}
	tel, err := startTelemetry(ctx, cfg, log, "recovering the write-ahead buffer")
	if err != nil {
		return err
	}
	defer tel.stop()
	if err := fs.MkdirAll(cfg.WABDir, 0o700); err != nil {
		return fmt.Errorf("create wab_dir: %w", err)
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
	})
	if err != nil {
		return fmt.Errorf("open write-ahead buffer: %w", err)
	}
	tel.watchWAB(fs, wlog)
	closeWAB := func(ctx context.Context) error {
		if err := wlog.Close(ctx); err != nil {
			return fmt.Errorf("close write-ahead buffer: %w", err)
		}
		return nil
	}

	dl, err := openDelivery(ctx, cfg, fs, log, tel.m)
	if err != nil {
		return errors.Join(err, closeWAB(context.Background()))
	}
	snk := dl.snk

	dr, err := drain.New(drain.Options{
		FS:                      fs,
		WABDir:                  cfg.WABDir,
		Source:                  wlog,
		Sink:                    snk,
		Logger:                  log.With("component", "drain"),
		RetryBase:               cfg.DrainRetryBase,
		RetryMax:                cfg.DrainRetryMax,
		MaxRetries:              drainRetries(cfg.DrainMaxRetries),
		DeadLetterMaxBytes:      cfg.DeadLetterMaxBytes,
		DeadLetterCheckInterval: cfg.DeadLetterCheckInterval,
		HealthInterval:          cfg.SinkHealthInterval,
		Observer:                tel.m,
	})
	if err != nil {
		return errors.Join(fmt.Errorf("start drain: %w", err), closeWAB(context.Background()), snk.Close())
	}
	tel.watchDrain(dr)
	drainCtx, stopDrain := context.WithCancel(context.Background())
	var drainWG sync.WaitGroup
	drainWG.Add(1)
	go func() {
		defer drainWG.Done()
		if err := dr.Run(drainCtx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("drain stopped", "err", err)
		}
	}()

	gate, err := engine.NewWABGate(wlog, bufferGateOptions(cfg, fs, tel.m))
	if err != nil {
		stopDrain()
		drainWG.Wait()
		return errors.Join(fmt.Errorf("source gate: %w", err), closeWAB(context.Background()), snk.Close())
	}
	// The producer listeners are the first source. They bind here, so a
	// socket in use fails the start instead of a restart loop.
	ingress := newIngress(cfg, tlsMgr, tel.m, log)
	if err := ingress.Listen(gate); err != nil {
		stopDrain()
		drainWG.Wait()
		return errors.Join(err, closeWAB(context.Background()), snk.Close())
	}
	srcs, err := startSources(cfg, fs, gate, ingress, dl, tel.m, log)
	if err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		serr := ingress.Shutdown()
		stopDrain()
		drainWG.Wait()
		return errors.Join(err, serr, closeWAB(sctx), snk.Close())
	}
	tel.h.Ready()
	log.Info("weir ready", "socket", cfg.SocketPath, "wab_dir", cfg.WABDir, "shards", cfg.Shards, "sink", snk.Name(),
		"secondaries", len(cfg.Secondaries), "sources", len(cfg.Sources))

	<-ctx.Done()
	tel.h.NotReady("shutting down")
	log.Info("shutting down", "shutdown_timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	var errs []error
	// Sources — the producer listeners among them — stop before the
	// buffer closes: requests already read are answered, a source's last
	// durable write is still committed upstream, and nothing is written
	// after the seal.
	if err := srcs.stop(sctx, log); err != nil {
		errs = append(errs, err)
	}
	// The drain stops before the WAB seals its open segments: what is
	// sealed at shutdown is delivered at the next start, and a delivery cut
	// short here is replayed (never confirmed half-done).
	stopDrain()
	drainWG.Wait()
	if err := closeWAB(sctx); err != nil {
		errs = append(errs, err)
	}
	if err := snk.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close sink: %w", err))
	}
	if len(errs) == 0 {
		log.Info("shutdown complete")
	}
	return errors.Join(errs...)
}

// openSink opens one sink as configured by sc (the [sink], or a
// [[secondary]]'s); with raw, in its raw (position-numbered) mode.
func openSink(ctx context.Context, sc config.SinkConfig, fs vfs.FS, log *slog.Logger, raw bool) (sink.Sink, error) {
	switch sc.Type {
	case "file":
		s, err := filesink.New(ctx, filesink.Options{
			FS:           fs,
			Dir:          sc.File.Dir,
			MaxBytes:     sc.File.MaxBytes,
			MaxAge:       sc.File.MaxAge,
			MaxBatchSize: sc.File.BatchRecords,
			Positions:    raw,
			Logger:       log,
		})
		if err != nil {
			return nil, fmt.Errorf("open file sink: %w", err)
		}
		return s, nil
	case "parquet":
		pc := sc.Parquet
		s, err := parquetsink.New(ctx, parquetsink.Options{
			FS: fs, Dir: pc.Dir, MaxBytes: pc.MaxBytes, MaxAge: pc.MaxAge, MaxBatchSize: pc.BatchRecords,
			MaxPayloadBytes: int(pc.MaxPayloadBytes), Compression: pc.Compression, Positions: raw,
			Logger: log,
		})
		if err != nil {
			return nil, fmt.Errorf("open parquet sink: %w", err)
		}
		return s, nil
	case "postgres":
		pc := sc.Postgres
		s, err := pgsink.New(ctx, pgsink.Options{
			DSN: pc.DSN, Table: pc.Table, PayloadType: pc.PayloadType, CreateTable: pc.CreateTable,
			MaxBatchSize: pc.BatchRecords, Timeout: pc.Timeout, Positions: raw, MetadataColumns: pc.MetadataColumns,
			Logger: log,
		})
		if err != nil {
			return nil, fmt.Errorf("open postgres sink: %w", err)
		}
		return s, nil
	case "mysql":
		mc := sc.MySQL
		s, err := mysqlsink.New(ctx, mysqlsink.Options{
			DSN: mc.DSN, Table: mc.Table, PayloadType: mc.PayloadType,
			MaxBatchSize: mc.BatchRecords, Timeout: mc.Timeout, MetadataColumns: mc.MetadataColumns,
			Logger: log,
		})
		if err != nil {
			return nil, fmt.Errorf("open mysql sink: %w", err)
		}
		return s, nil
	default:
		return nil, fmt.Errorf("sink.type %q: unknown sink", sc.Type)
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
