package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/metrics"
	"github.com/weir-io/weir/internal/vfs"
)

// runRecoveryNode runs a recovery-only node (role = "recovery"): it reads
// the primary raw another process (the ingest node) writes — read-only,
// through its kind's raw reader (a file or Parquet raw directory, a
// Postgres raw table) — and replays into each [[secondary]] what the
// offset store says it lacks. It has no write-ahead buffer, listener,
// source or drain, so it locks nothing of its own in data_dir and runs
// beside the ingest node on the same raw; the offset store there is shared
// with the ingest node under its advisory lock. It is ready once the
// fan-out runs, and stops when ctx is cancelled.
func runRecoveryNode(ctx context.Context, cfg *config.Config, fs vfs.FS, log *slog.Logger) error {
	tel, err := startTelemetry(ctx, cfg, fs, log, "opening primary raw and the secondaries")
	if err != nil {
		return err
	}
	defer tel.stop()
	k := newKinds(cfg, fs, tel)
	fan, closeReader, err := openRecovery(ctx, cfg, k, log, tel.m)
	if err != nil {
		return err
	}
	tel.h.Ready()
	log.Info("weir recovery node ready", "raw", k.rawWhere(), "secondaries", len(cfg.Secondaries))

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
func openRecovery(ctx context.Context, cfg *config.Config, k kinds, log *slog.Logger, m *metrics.Metrics) (fan *engine.Fanout, closeReader func() error, err error) {
	raw, err := k.readRaw(ctx, log)
	if err != nil {
		return nil, nil, fmt.Errorf("recovery node: %w", err)
	}
	fan, err = startFanout(ctx, cfg, k, log, m.Topology(), engine.FanoutOptions{Reader: raw.Reader, Store: raw.Store})
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("recovery node: %w", err), raw.Close())
	}
	return fan, raw.Close, nil
}
