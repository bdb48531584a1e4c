package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/lifecycle"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

// originIndexDir is the index's directory under the source's raw_dir; the
// offset store is raw_dir itself.
const originIndexDir = "index"

// buildOriginNode starts a node whose primary raw is a source's own
// origin ([[source]] own_raw = true: a kind with a replayable origin, such
// as files). There is no write-ahead buffer, listener, drain or [sink]:
// the gate of the source is its origin — for files, each batch's files are
// fdatasynced and the batch's positions appended to the durable index in
// raw_dir/index before the cursor is saved — and each durable batch is
// offered to the secondaries, which are recovered from the origin when
// they lag. The offset store (coverage and the source's cursor) is
// raw_dir/weir-offsets. It stops the source first, then the fan-out,
// which writes the coverage recorded so far, then the origin.
func buildOriginNode(ctx context.Context, st *lifecycle.Stack, cfg *config.Config, fs vfs.FS, log *slog.Logger) (node, error) {
	sc, _ := cfg.OwnRawSource()
	tel, err := startTelemetry(ctx, st, cfg, fs, log, "opening the origin raw and the secondaries")
	if err != nil {
		return node{}, err
	}
	topo := tel.m.Topology()
	var fan *engine.Fanout // set before the source runs
	onDurable := func(first uint64, recs []source.Record) {
		topo.SourceWritten(sc.Name, len(recs))
		fan.Appended(first, sinkRecords(recs))
	}
	k := newKinds(cfg, fs, tel)
	// The source and the origin raw name themselves in their logs. The
	// source has no gate: it holds memory for each batch itself while the
	// origin makes it durable (sourceflow.go).
	sf := tel.fc.sourceFlow(cfg, sc.Name, 1, log.With("component", "flow"))
	own, err := k.openOwnRaw(ctx, sc, sf, filepath.Join(sc.RawDir, originIndexDir), onDurable, tel.fc.holdFor(sf.Estimator), log, topo)
	if err != nil {
		return node{}, fmt.Errorf("source %q: %w", sc.Name, err)
	}
	st.PushClose("origin raw", own.Close)
	store, err := engine.OpenOffsetStore(ctx, k.fs, sc.RawDir)
	if err != nil {
		return node{}, fmt.Errorf("open offset store: %w", err)
	}
	fan, err = startFanout(ctx, cfg, k, log, topo, engine.FanoutOptions{Reader: own.Reader, ExternalRaw: true, Store: store})
	if err != nil {
		return node{}, err
	}
	st.PushClose("fan-out", fan.Close)
	srcLog := log.With("component", "source", "source", sc.Name)
	forget := tel.addSource(sc.Name, own.Pausable)
	st.Push("source "+sc.Name, goStop(func(ctx context.Context) error {
		defer forget()
		return runSource(ctx, own.Source, nil, store, topo, srcLog)
	}))
	return node{tel: tel, ready: func() {
		log.Info("weir ready: a source is its own raw", "source", sc.Name, "type", sc.Type, "raw_dir", sc.RawDir,
			"offset_store", store.Where(), "secondaries", len(cfg.Secondaries), "http", httpOff(cfg))
	}}, nil
}

// sinkRecords turns a source's durable batch into the records a
// secondary receives — the same the origin raw returns when the batch is
// read back (Received is the record's read time).
func sinkRecords(recs []source.Record) []sink.Record {
	out := make([]sink.Record, len(recs))
	for i := range recs {
		out[i] = engine.SinkRecord(&recs[i], recs[i].Received)
	}
	return out
}
