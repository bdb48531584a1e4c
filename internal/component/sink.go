package component

import (
	"context"
	"errors"
	"fmt"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// SinkCaps are a sink kind's static capabilities. Whether it can be primary
// raw is not a flag but the presence of its raw mode (Sink.Raw).
type SinkCaps struct {
	// FSSeam: every byte it writes goes through Env.FS, so fault
	// injection and crash simulation reach it.
	FSSeam bool
	// Durable: Commit returns only once the batch is on stable storage,
	// without any setting to ask for it.
	Durable bool
	// Idempotent: a replayed record is absorbed by its id (ON CONFLICT DO
	// NOTHING, INSERT IGNORE). Otherwise the sink keeps the copy and
	// readers deduplicate on weir_record_id.
	Idempotent bool
	// NonDurable: the kind can also commit without waiting for stable
	// storage (no fdatasync, synchronous_commit = off), which it does when
	// Env.NonDurable is set — for a [[secondary]] with durable = false;
	// the raw mode's factories never see it set. Without it,
	// durable = false is refused for the kind.
	NonDurable bool
}

// SinkParams is what a sink factory receives.
type SinkParams[C any] struct {
	Env
	// Config is the kind's validated settings.
	Config *C
}

// RawSink is a sink opened as primary raw (its positions mode), with the
// offset store that lives beside it.
type RawSink struct {
	Sink  sink.Raw
	Store *engine.OffsetStore
}

// RawRead is another process's primary raw opened to be read only (a
// recovery-only node), with the offset store beside it, shared with the
// writer. Close releases what the reader holds (never nil).
type RawRead struct {
	Reader sink.RawReader
	Store  *engine.OffsetStore
	Close  func() error
}

// RawMode is a sink kind's raw (position-numbered, replayable) mode: what
// lets it be the pipeline's primary raw, the system of record every
// secondary is recovered from.
type RawMode[C any] struct {
	// Open opens the sink in raw mode with its offset store.
	Open func(ctx context.Context, p SinkParams[C]) (RawSink, error)
	// Read opens another process's raw read-only with the shared offset
	// store.
	Read func(ctx context.Context, p SinkParams[C]) (RawRead, error)
	// Check holds the rules the settings must also follow when the kind
	// is primary raw (nil: none).
	Check func(c *C) []Problem
	// Where names the raw for logs (a directory, a table).
	Where func(c *C) string
	// Store opens the offset store beside raw without opening the sink
	// in raw mode, holding nothing that needs closing before the process
	// ends (nil: the kind cannot). With gate = "raw" and no [[secondary]] the [sink] is not
	// in raw mode, yet the sources' cursors live there, so adding a
	// secondary later does not move them.
	Store func(ctx context.Context, p SinkParams[C]) (*engine.OffsetStore, error)
}

// DirRaw is the raw mode of a sink that keeps raw in a directory, with the
// offset store as a file beside its records (engine.OpenOffsetStore):
// dir names the directory, open opens the sink in raw mode, read opens a
// read-only reader of the directory and returns what closes it.
func DirRaw[C any](dir func(*C) string,
	open func(ctx context.Context, p SinkParams[C]) (sink.Raw, error),
	read func(fsys vfs.FS, dir string) (sink.RawReader, func() error, error)) *RawMode[C] {
	return &RawMode[C]{
		Open: func(ctx context.Context, p SinkParams[C]) (RawSink, error) {
			s, err := open(ctx, p)
			if err != nil {
				return RawSink{}, err
			}
			store, err := engine.OpenOffsetStore(ctx, p.FS, dir(p.Config))
			if err != nil {
				return RawSink{}, errors.Join(fmt.Errorf("open offset store: %w", err), s.Close())
			}
			return RawSink{Sink: s, Store: store}, nil
		},
		Read: func(ctx context.Context, p SinkParams[C]) (RawRead, error) {
			r, closeReader, err := read(p.FS, dir(p.Config))
			if err != nil {
				return RawRead{}, err
			}
			store, err := engine.OpenOffsetStore(ctx, p.FS, dir(p.Config))
			if err != nil {
				return RawRead{}, errors.Join(fmt.Errorf("open offset store: %w", err), closeReader())
			}
			return RawRead{Reader: r, Store: store, Close: closeReader}, nil
		},
		Where: dir,
		Store: func(ctx context.Context, p SinkParams[C]) (*engine.OffsetStore, error) {
			return engine.OpenOffsetStore(ctx, p.FS, dir(p.Config))
		},
	}
}

// Sink defines a sink kind.
type Sink[C any] struct {
	Name    string // the kind: the value of type = "..."
	Summary string // one line for `weir kinds` and the documentation
	Fields  []Field
	Caps    SinkCaps
	// Open opens the sink (not in raw mode).
	Open func(ctx context.Context, p SinkParams[C]) (sink.Sink, error)
	// MaxBatch is the MaxBatchSize a sink opened with these settings will
	// report, known without opening it (a secondary whose destination is
	// down reports it until it opens).
	MaxBatch func(c *C) int
	// Check holds the rules that span keys (nil: none).
	Check func(c *C) []Problem
	// Raw is the raw mode; nil for a kind that cannot be primary raw.
	Raw *RawMode[C]
	// Probe dials the server the settings name and authenticates, with
	// the connection code Open uses, and checks by reading only what Open
	// would refuse (a Kafka topic that does not exist); it creates,
	// writes and keeps nothing (`weir validate --connect`). ctx bounds
	// it. Nil: the kind has no server (it writes files).
	Probe func(ctx context.Context, c *C) error
}

// SinkDef is a sink kind's definition as the registration list holds it:
// a Sink of any settings type.
type SinkDef interface {
	sinkKind() (*SinkKind, error)
}

func (d Sink[C]) sinkKind() (*SinkKind, error) {
	s, err := newSpec[C](d.Name, d.Summary, d.Fields)
	if err != nil {
		return nil, err
	}
	switch {
	case d.Open == nil || d.MaxBatch == nil:
		return nil, fmt.Errorf("component: sink kind %q: Open and MaxBatch are required", d.Name)
	case d.Raw != nil && (d.Raw.Open == nil || d.Raw.Read == nil || d.Raw.Where == nil):
		return nil, fmt.Errorf("component: sink kind %q: a raw mode needs Open, Read and Where", d.Name)
	}
	params := func(env Env, cfg any) SinkParams[C] {
		s.mustOwn(cfg)
		return SinkParams[C]{Env: env.withDefaults(), Config: cfg.(*C)}
	}
	k := &SinkKind{spec: s, caps: d.Caps,
		open:     func(ctx context.Context, env Env, cfg any) (sink.Sink, error) { return d.Open(ctx, params(env, cfg)) },
		maxBatch: func(cfg any) int { s.mustOwn(cfg); return d.MaxBatch(cfg.(*C)) },
		check:    problems(d.Check),
	}
	if d.Probe != nil {
		k.probe = func(ctx context.Context, cfg any) error { s.mustOwn(cfg); return d.Probe(ctx, cfg.(*C)) }
	}
	if r := d.Raw; r != nil {
		// Raw is always durable: its factories never see NonDurable.
		rawParams := func(env Env, cfg any) SinkParams[C] { env.NonDurable = false; return params(env, cfg) }
		k.raw = &rawKind{
			open:  func(ctx context.Context, env Env, cfg any) (RawSink, error) { return r.Open(ctx, rawParams(env, cfg)) },
			read:  func(ctx context.Context, env Env, cfg any) (RawRead, error) { return r.Read(ctx, rawParams(env, cfg)) },
			check: problems(r.Check),
			where: func(cfg any) string { s.mustOwn(cfg); return r.Where(cfg.(*C)) },
		}
		if r.Store != nil {
			k.raw.store = func(ctx context.Context, env Env, cfg any) (*engine.OffsetStore, error) {
				return r.Store(ctx, rawParams(env, cfg))
			}
		}
	}
	return k, nil
}

func problems[C any](check func(*C) []Problem) func(any) []Problem {
	return func(cfg any) []Problem {
		if check == nil {
			return nil
		}
		return check(cfg.(*C))
	}
}

// SinkKind is a registered sink kind.
type SinkKind struct {
	spec
	caps     SinkCaps
	open     func(context.Context, Env, any) (sink.Sink, error)
	maxBatch func(any) int
	check    func(any) []Problem
	raw      *rawKind
	probe    func(context.Context, any) error // nil: no server
}

type rawKind struct {
	open  func(context.Context, Env, any) (RawSink, error)
	read  func(context.Context, Env, any) (RawRead, error)
	check func(any) []Problem
	where func(any) string
	store func(context.Context, Env, any) (*engine.OffsetStore, error) // nil: none alone
}

// ErrNoRawMode is returned when a kind without a raw mode is asked to be
// primary raw.
var ErrNoRawMode = errors.New("component: the sink kind has no raw mode")

// ErrNoServer is returned by Probe for a kind that has no server to dial.
var ErrNoServer = errors.New("component: the kind has no server")

// Caps are the kind's static capabilities.
func (k *SinkKind) Caps() SinkCaps { return k.caps }

// HasServer reports whether the kind has a server to Probe.
func (k *SinkKind) HasServer() bool { return k.probe != nil }

// Probe dials and authenticates the server of a sink of the kind with
// settings cfg, changing nothing there (Sink.Probe); ErrNoServer for a
// kind without one.
func (k *SinkKind) Probe(ctx context.Context, cfg any) error {
	if k.probe == nil {
		return fmt.Errorf("%w: %q", ErrNoServer, k.kind)
	}
	return k.probe(ctx, cfg)
}

// PrimaryRaw reports whether the kind has a raw mode, so may be primary
// raw.
func (k *SinkKind) PrimaryRaw() bool { return k.raw != nil }

// Dir is the key naming the directory the sink writes, or nil.
func (k *SinkKind) Dir() *Field {
	for i := range k.fields {
		if k.fields[i].DirName != "" {
			return &k.fields[i]
		}
	}
	return nil
}

// Check returns the rules over several keys that cfg breaks.
func (k *SinkKind) Check(cfg any) []Problem { k.mustOwn(cfg); return k.check(cfg) }

// CheckRaw returns the rules cfg breaks as primary raw (none without a
// raw mode: whether a kind may be primary raw is PrimaryRaw).
func (k *SinkKind) CheckRaw(cfg any) []Problem {
	if k.raw == nil {
		return nil
	}
	k.mustOwn(cfg)
	return k.raw.check(cfg)
}

// MaxBatch is the batch bound a sink with settings cfg reports.
func (k *SinkKind) MaxBatch(cfg any) int { return k.maxBatch(cfg) }

// Open opens a sink of the kind with settings cfg (from NewConfig).
func (k *SinkKind) Open(ctx context.Context, env Env, cfg any) (sink.Sink, error) {
	return k.open(ctx, env, cfg)
}

// OpenRaw opens a sink of the kind as primary raw.
func (k *SinkKind) OpenRaw(ctx context.Context, env Env, cfg any) (RawSink, error) {
	if k.raw == nil {
		return RawSink{}, fmt.Errorf("%w: %q", ErrNoRawMode, k.kind)
	}
	return k.raw.open(ctx, env, cfg)
}

// ReadRaw opens another process's primary raw of the kind read-only.
func (k *SinkKind) ReadRaw(ctx context.Context, env Env, cfg any) (RawRead, error) {
	if k.raw == nil {
		return RawRead{}, fmt.Errorf("%w: %q", ErrNoRawMode, k.kind)
	}
	return k.raw.read(ctx, env, cfg)
}

// HasStore reports whether the kind's offset store can be opened without
// its raw mode (OpenStore).
func (k *SinkKind) HasStore() bool { return k.raw != nil && k.raw.store != nil }

// OpenStore opens the offset store beside the kind's raw with settings cfg
// without opening the sink in raw mode (see RawMode.Store).
func (k *SinkKind) OpenStore(ctx context.Context, env Env, cfg any) (*engine.OffsetStore, error) {
	if !k.HasStore() {
		return nil, fmt.Errorf("%w: %q: no offset store of its own", ErrNoRawMode, k.kind)
	}
	return k.raw.store(ctx, env, cfg)
}

// Where names the kind's raw with settings cfg for logs: its directory or
// table ("" without a raw mode).
func (k *SinkKind) Where(cfg any) string {
	if k.raw == nil {
		return ""
	}
	return k.raw.where(cfg)
}
