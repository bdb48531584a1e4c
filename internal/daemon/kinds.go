package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/metrics"
	"github.com/weir-io/weir/internal/tap"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

// kinds opens the configured sinks and sources through the registry the
// configuration was checked against (cfg.Components), giving each factory
// the common environment: the file-system seam, a logger, the
// per-instance metrics registry and data_dir.
type kinds struct {
	cfg     *config.Config
	fs      vfs.FS
	metrics prometheus.Registerer
	fc      *flowControl  // the node's flow control; nil in tests without telemetry
	dq      *quality      // the data contracts; nil without [[contract]]
	co      *coordination // the coordination cluster; nil with coordination.mode = 0
	tap     *tap.Hub      // the tap points; nil in tests without telemetry
}

func newKinds(cfg *config.Config, fs vfs.FS, tel *telemetry) kinds {
	return kinds{cfg: cfg, fs: fs, metrics: tel.reg, fc: tel.fc, dq: tel.dq, co: tel.co, tap: tel.tap}
}

func (k kinds) env(name string, log *slog.Logger) component.Env {
	return component.Env{Name: name, FS: k.fs, Logger: log, Metrics: k.metrics, DataDir: k.cfg.DataDir}
}

func (k kinds) sinkKind(sc config.SinkConfig) (*component.SinkKind, error) {
	sk, ok := k.cfg.Components.Sink(sc.Type)
	if !ok {
		return nil, fmt.Errorf("sink.type %q: unknown sink kind", sc.Type)
	}
	return sk, nil
}

// openSink opens one sink as configured by sc — the [sink], or a
// [[secondary]]'s, called name. A sink with durable = false (only ever a
// secondary's: configuration refuses it for the [sink]) is told through
// Env.NonDurable.
func (k kinds) openSink(ctx context.Context, sc config.SinkConfig, name string, log *slog.Logger) (sink.Sink, error) {
	sk, err := k.sinkKind(sc)
	if err != nil {
		return nil, err
	}
	env := k.env(name, log)
	env.NonDurable = !sc.Durable
	s, err := sk.Open(ctx, env, sc.Settings())
	if err != nil {
		return nil, fmt.Errorf("open %s sink: %w", sc.Type, err)
	}
	return s, nil
}

// maxBatch is the batch bound a sink of sc will report once open.
func (k kinds) maxBatch(sc config.SinkConfig) int {
	sk, err := k.sinkKind(sc)
	if err != nil {
		return 1
	}
	return sk.MaxBatch(sc.Settings())
}

// openRaw opens the [sink] as primary raw, in its raw (position-numbered)
// mode, with the offset store that lives beside it.
func (k kinds) openRaw(ctx context.Context, log *slog.Logger) (component.RawSink, error) {
	sk, err := k.sinkKind(k.cfg.Sink)
	if err != nil {
		return component.RawSink{}, err
	}
	raw, err := sk.OpenRaw(ctx, k.env(k.cfg.Sink.Type, log), k.cfg.Sink.Settings())
	if err != nil {
		return raw, fmt.Errorf("open primary raw (%s, raw mode): %w", k.cfg.Sink.Type, err)
	}
	return raw, nil
}

// readRaw opens the primary raw another process writes, read-only, with
// the offset store beside it.
func (k kinds) readRaw(ctx context.Context, log *slog.Logger) (component.RawRead, error) {
	sk, err := k.sinkKind(k.cfg.Sink)
	if err != nil {
		return component.RawRead{}, err
	}
	r, err := sk.ReadRaw(ctx, k.env(k.cfg.Sink.Type, log), k.cfg.Sink.Settings())
	if err != nil {
		return r, fmt.Errorf("open primary raw read-only (%s): %w", sk.Where(k.cfg.Sink.Settings()), err)
	}
	return r, nil
}

// openRawStore opens the offset store beside the [sink] without opening
// it in raw mode, or returns nil when its kind keeps none of its own.
func (k kinds) openRawStore(ctx context.Context, log *slog.Logger) (*engine.OffsetStore, error) {
	sk, err := k.sinkKind(k.cfg.Sink)
	if err != nil || !sk.HasStore() {
		return nil, err
	}
	return sk.OpenStore(ctx, k.env(k.cfg.Sink.Type, log), k.cfg.Sink.Settings())
}

// rawWhere names the primary raw for logs.
func (k kinds) rawWhere() string {
	sk, err := k.sinkKind(k.cfg.Sink)
	if err != nil {
		return k.cfg.Sink.Type
	}
	return sk.Where(k.cfg.Sink.Settings())
}

// sourceInstance is how sc is opened: each source names itself in its
// logs, each position commit is counted, and flow control gives it sf.
func (k kinds) sourceInstance(sc config.SourceConfig, sf component.SourceFlow, log *slog.Logger, topo *metrics.Topology) (*component.SourceKind, component.SourceInstance, error) {
	sk, ok := k.cfg.Components.Source(sc.Type)
	if !ok {
		return nil, component.SourceInstance{}, fmt.Errorf("unknown source kind %q", sc.Type)
	}
	in := component.SourceInstance{Env: k.env(sc.Name, log), Config: sc.Settings,
		OnCommit: func() { topo.SourceCommitted(sc.Name) }, Flow: sf}
	return sk, in, nil
}

// newSource returns the source sc configures, with its Pausable if its
// kind has one.
func (k kinds) newSource(ctx context.Context, sc config.SourceConfig, sf component.SourceFlow, log *slog.Logger, topo *metrics.Topology) (component.Opened, error) {
	sk, in, err := k.sourceInstance(sc, sf, log, topo)
	if err != nil {
		return component.Opened{}, err
	}
	return sk.Open(ctx, in)
}

// openOwnRaw opens the source sc configures as its own primary raw, its
// index in dir; onDurable is told of each durable batch, and admit holds
// memory for it meanwhile (nil: nothing).
func (k kinds) openOwnRaw(ctx context.Context, sc config.SourceConfig, sf component.SourceFlow, dir string, onDurable func(uint64, []source.Record),
	admit func(context.Context, []source.Record) (func(), error), log *slog.Logger, topo *metrics.Topology) (component.OwnRaw, error) {
	sk, in, err := k.sourceInstance(sc, sf, log, topo)
	if err != nil {
		return component.OwnRaw{}, err
	}
	in.Dir, in.OnDurable, in.Admit = dir, onDurable, admit
	return sk.OpenOwnRaw(ctx, in)
}
