package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/lifecycle"
	"github.com/weir-io/weir/internal/vfs"
)

// buildRecoveryNode starts a recovery-only node (role = "recovery"): it
// reads the primary raw another process (the ingest node) writes —
// read-only, through its kind's raw reader (a file or Parquet raw
// directory, a Postgres raw table) — and replays into each [[secondary]]
// what the offset store says it lacks. It has no write-ahead buffer,
// listener, source or drain, so it locks nothing of its own in data_dir
// and runs beside the ingest node on the same raw; the offset store there
// is shared with the ingest node under its advisory lock. It is ready once
// the fan-out runs. Stopping the fan-out stops the workers (a window cut
// short is replayed at the next start: coverage is recorded only after
// the secondary's ack) and writes the coverage recorded so far.
func buildRecoveryNode(ctx context.Context, st *lifecycle.Stack, cfg *config.Config, fs vfs.FS, log *slog.Logger) (node, error) {
	tel, err := startTelemetry(ctx, st, cfg, fs, log, "opening primary raw and the secondaries")
	if err != nil {
		return node{}, err
	}
	k := newKinds(cfg, fs, tel)
	raw, err := k.readRaw(ctx, log)
	if err != nil {
		return node{}, fmt.Errorf("recovery node: %w", err)
	}
	st.PushClose("primary raw (read-only)", raw.Close)
	err = st.Start("recovery fan-out", func() (lifecycle.StopFunc, error) {
		fan, err := startFanout(ctx, cfg, k, log, tel.m.Topology(), engine.FanoutOptions{Reader: raw.Reader, Store: raw.Store})
		if err != nil {
			return nil, err
		}
		return closeFn(fan.Close), nil
	})
	if err != nil {
		return node{}, err
	}
	return node{tel: tel, ready: func() {
		log.Info("weir recovery node ready", "raw", k.rawWhere(), "secondaries", len(cfg.Secondaries))
	}}, nil
}

// closeFn is a Close as a lifecycle stop (bounded by being abandoned).
func closeFn(f func() error) lifecycle.StopFunc {
	return func(context.Context) error { return f() }
}
