package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/metrics"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/sink/parquetsink"
	"github.com/weir-io/weir/internal/sink/pgsink"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// runRecoveryNode runs a recovery-only node (role = "recovery"): it reads
// the primary raw another process (the ingest node) writes — sink.file.dir
// or sink.parquet.dir read-only, or a Postgres raw table — and replays into each [[secondary]] what the
// offset store says it lacks. It has no write-ahead buffer, listener,
// source or drain, so it locks nothing of its own in data_dir and runs
// beside the ingest node on the same raw directory; the offset store there
// is shared with the ingest node under its advisory lock. It is ready once
// the fan-out runs, and stops when ctx is cancelled.
func runRecoveryNode(ctx context.Context, cfg *config.Config, fs vfs.FS, log *slog.Logger) error {
	tel, err := startTelemetry(ctx, cfg, log, "opening primary raw and the secondaries")
	if err != nil {
		return err
	}
	defer tel.stop()
	fan, closeReader, err := openRecovery(ctx, cfg, fs, log, tel.m)
	if err != nil {
		return err
	}
	tel.h.Ready()
	log.Info("weir recovery node ready", "raw", rawWhere(cfg), "secondaries", len(cfg.Secondaries))

	<-ctx.Done()
	tel.h.NotReady("shutting down")
	log.Info("shutting down")
	// Close stops the workers (a window cut short is replayed at the next
	// start: coverage is recorded only after the secondary's ack) and
	// writes the coverage recorded so far.
	if err := errors.Join(fan.Close(), closeReader()); err != nil {
		return fmt.Errorf("close recovery fan-out: %w", err)
	}
	log.Info("shutdown complete")
	return nil
}

// openRecovery starts the recovery-only fan-out: no raw to write, a
// read-only reader of the ingest node's raw, the shared offset store, the
// secondaries. The fan-out bounds what it reads by the raw end the ingest
// node recorded in the store after its durable acks, never by what the
// reader merely sees on disk.
func openRecovery(ctx context.Context, cfg *config.Config, fs vfs.FS, log *slog.Logger, m *metrics.Metrics) (fan *engine.Fanout, closeReader func() error, err error) {
	reader, store, closeReader, err := openRawReader(ctx, cfg, fs, log)
	if err != nil {
		return nil, nil, err
	}
	fan, err = startFanout(ctx, cfg, fs, log, m.Topology(), engine.FanoutOptions{Reader: reader, Store: store})
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("recovery node: %w", err), closeReader())
	}
	return fan, closeReader, nil
}

// openRawReader opens another node's primary raw for reading, with the
// offset store beside it: a file raw directory read-only (filesink's
// RawReader), or a Postgres raw table through a raw-mode sink that only
// ever reads.
func openRawReader(ctx context.Context, cfg *config.Config, fs vfs.FS, log *slog.Logger) (sink.RawReader, *engine.OffsetStore, func() error, error) {
	switch cfg.Sink.Type {
	case "file":
		dir := cfg.Sink.File.Dir
		reader, err := filesink.OpenRawReader(fs, dir)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("recovery node: open primary raw read-only (sink.file.dir): %w", err)
		}
		store, err := engine.OpenOffsetStore(ctx, fs, dir)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("recovery node: open offset store: %w", err)
		}
		return reader, store, func() error { return nil }, nil
	case "parquet":
		dir := cfg.Sink.Parquet.Dir
		reader, err := parquetsink.OpenRawReader(fs, dir)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("recovery node: open primary raw read-only (sink.parquet.dir): %w", err)
		}
		store, err := engine.OpenOffsetStore(ctx, fs, dir)
		if err != nil {
			return nil, nil, nil, errors.Join(fmt.Errorf("recovery node: open offset store: %w", err), reader.Close())
		}
		return reader, store, reader.Close, nil
	case "postgres":
		s, err := openSink(ctx, cfg.Sink, fs, log, true)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("recovery node: open primary raw (postgres raw table): %w", err)
		}
		p := s.(*pgsink.Sink)
		store, err := p.OffsetStore(ctx)
		if err != nil {
			return nil, nil, nil, errors.Join(fmt.Errorf("recovery node: open offset store: %w", err), p.Close())
		}
		return p, store, p.Close, nil
	}
	return nil, nil, nil, fmt.Errorf("recovery node: primary raw: sink.type %q has no raw mode to read", cfg.Sink.Type)
}

// rawWhere names the primary raw for logs.
func rawWhere(cfg *config.Config) string {
	switch cfg.Sink.Type {
	case "postgres":
		return "postgres table " + cfg.Sink.Postgres.Table
	case "parquet":
		return cfg.Sink.Parquet.Dir
	}
	return cfg.Sink.File.Dir
}
