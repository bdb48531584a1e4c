package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/lifecycle"
	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/internal/vfs"
)

// rawGateQuarantine is the quarantine directory, under data_dir's
// quarantine directory, of the records the [sink] refuses at the gate.
//
// No [[secondary]] may take it as its quarantine_dir (config refuses the
// name "raw" while quarantine_dir is unset).
const rawGateQuarantine = config.RawGateQuarantine

// buildRawGateNode starts a node with gate = "raw": no write-ahead
// buffer, so no producer listener and no drain. Every [[source]] writes
// through an engine.SinkGate straight into the [sink] — primary raw,
// behind the fan-out when there are secondaries — and commits its
// position only after that commit's durable ack. Records the sink refuses
// are written to <data_dir>/quarantine/raw (bounded by
// dead_letter_max_bytes) before the position moves past them; when that
// is full the source stops short of them and is retried, loudly, until
// there is room. A [sink] that is down at start is opened in the
// background (pendingSink): the sources' writes fail, transiently, until
// it opens, and they retry.
func buildRawGateNode(ctx context.Context, st *lifecycle.Stack, cfg *config.Config, fs vfs.FS, log *slog.Logger) (node, error) {
	tel, err := startTelemetry(ctx, st, cfg, fs, log, "opening the sink")
	if err != nil {
		return node{}, err
	}
	k := newKinds(cfg, fs, tel)
	dl := openDelivery(ctx, st, cfg, k, log, tel)
	qdir := cfg.GateQuarantineDir(rawGateQuarantine)
	q, err := quarantine.Open(quarantine.Options{FS: fs, Dir: qdir, MaxBytes: cfg.DeadLetterMaxBytes})
	if err != nil {
		return node{}, fmt.Errorf("open the gate's quarantine %s: %w", qdir, err)
	}
	st.PushClose("the gate's quarantine", q.Close)
	gate := engine.NewSinkGate(dl.snk, engine.SinkGateOptions{Name: rawGateQuarantine, Quarantine: q, Observer: tel.m,
		Tap: tel.tap.Point(gateTap), QuarantineTap: tel.tap.Point(quarantineTap(rawGateQuarantine))})
	// The sources stop first: each still commits what its last durable
	// write covered; then nothing more reaches the sink.
	// No producer socket or HTTP door: they need the write-ahead buffer.
	if err := startSources(st, cfg, k, gate, nil, dl, tel, log); err != nil {
		return node{}, err
	}
	return node{tel: tel, ready: func() {
		log.Info("weir ready: sources write straight into the sink (gate = raw)", "sink", dl.snk.Name(),
			"secondaries", len(cfg.Secondaries), "sources", len(cfg.Sources), "quarantine", qdir, "http", httpOff(cfg))
	}}, nil
}
