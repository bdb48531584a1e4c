package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/lifecycle"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// buildRecoveryNode starts a recovery-only node (role = "recovery"): it
// reads the primary raw another process (the ingest node) writes —
// read-only, through its kind's raw reader (a file or Parquet raw
// directory, a Postgres raw table) — and replays into each [[secondary]]
// what the offset store says it lacks. It has no write-ahead buffer,
// listener, source or drain, so it locks nothing of its own in data_dir
// and runs beside the ingest node on the same raw; the offset store there
// is shared with the ingest node under its advisory lock. Raw and the
// fan-out open in the background (pendingSink), so a raw database that is
// down at start delays recovery, not the start; /ready says so meanwhile.
// Stopping the fan-out stops the workers (a window cut short is replayed
// at the next start: coverage is recorded only after the secondary's
// ack) and writes the coverage recorded so far.
func buildRecoveryNode(ctx context.Context, st *lifecycle.Stack, cfg *config.Config, fs vfs.FS, log *slog.Logger) (node, error) {
	tel, err := startTelemetry(ctx, st, cfg, fs, log, "opening primary raw and the secondaries")
	if err != nil {
		return node{}, err
	}
	k := newKinds(cfg, fs, tel)
	rec := openPending("primary raw", 1, func(ctx context.Context) (sink.Sink, error) {
		raw, err := k.readRaw(ctx, log)
		if err != nil {
			return nil, fmt.Errorf("recovery node: %w", err)
		}
		fan, err := startFanout(ctx, cfg, k, log, tel.m.Topology(), engine.FanoutOptions{Reader: raw.Reader, Store: raw.Store})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("recovery node: %w", err), raw.Close())
		}
		return closeAlso{Sink: fan, also: raw.Close}, nil
	}, log.With("component", "recovery"))
	st.PushClose("recovery fan-out and primary raw", rec.Close)
	tel.h.WatchDegraded(rec.degraded)
	return node{tel: tel, ready: func() {
		log.Info("weir recovery node ready", "raw", k.rawWhere(), "secondaries", len(cfg.Secondaries), "http", httpOff(cfg))
	}}, nil
}

// closeAlso is a sink whose Close closes something else after it.
type closeAlso struct {
	sink.Sink
	also func() error
}

func (c closeAlso) Close() error { return errors.Join(c.Sink.Close(), c.also()) }
