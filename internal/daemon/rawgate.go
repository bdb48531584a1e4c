package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/internal/vfs"
)

// rawGateQuarantine is the quarantine directory, under data_dir's
// quarantine directory, of the records the [sink] refuses at the gate.
//
// No [[secondary]] may take it as its quarantine_dir (config refuses the
// name "raw" while quarantine_dir is unset).
const rawGateQuarantine = config.RawGateQuarantine

// runRawGateNode runs a node with gate = "raw": no write-ahead buffer, so
// no producer listener and no drain. Every [[source]] writes through an
// engine.SinkGate straight into the [sink] — primary raw, behind the
// fan-out when there are secondaries — and commits its position only
// after that commit's durable ack. Records the sink refuses are written
// to <data_dir>/quarantine/raw (bounded by dead_letter_max_bytes) before
// the position moves past them; when that is full the source stops short
// of them and is retried, loudly, until there is room.
func runRawGateNode(ctx context.Context, cfg *config.Config, fs vfs.FS, log *slog.Logger) error {
	tel, err := startTelemetry(ctx, cfg, fs, log, "opening the sink")
	if err != nil {
		return err
	}
	defer tel.stop()
	k := newKinds(cfg, fs, tel)
	dl, err := openDelivery(ctx, cfg, k, log, tel.m)
	if err != nil {
		return err
	}
	qdir := cfg.GateQuarantineDir(rawGateQuarantine)
	q, err := quarantine.Open(quarantine.Options{FS: fs, Dir: qdir, MaxBytes: cfg.DeadLetterMaxBytes})
	if err != nil {
		return errors.Join(fmt.Errorf("open the gate's quarantine %s: %w", qdir, err), dl.snk.Close())
	}
	gate := engine.NewSinkGate(dl.snk, engine.SinkGateOptions{Name: rawGateQuarantine, Quarantine: q, Observer: tel.m})
	srcs, err := startSources(cfg, k, gate, nil, dl, tel, log)
	if err != nil {
		return errors.Join(err, dl.snk.Close(), q.Close())
	}
	tel.h.Ready()
	log.Info("weir ready: sources write straight into the sink (gate = raw)", "sink", dl.snk.Name(),
		"secondaries", len(cfg.Secondaries), "sources", len(cfg.Sources), "quarantine", qdir)

	<-ctx.Done()
	tel.h.NotReady("shutting down")
	log.Info("shutting down", "shutdown_timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	var errs []error
	// The sources stop first: each still commits what its last durable
	// write covered; then nothing more reaches the sink.
	if err := srcs.stop(sctx, log); err != nil {
		errs = append(errs, err)
	}
	if err := dl.snk.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close sink: %w", err))
	}
	if err := q.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close the gate's quarantine: %w", err))
	}
	if len(errs) == 0 {
		log.Info("shutdown complete")
	}
	return errors.Join(errs...)
}
