package component

import (
	"context"
	"errors"
	"fmt"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

// SourceCaps are a source kind's static capabilities. Whether its origin
// is replayable — so that it may be its own primary raw — is the presence
// of its origin mode (Source.Origin).
type SourceCaps struct {
	// Regime says who keeps the source's position.
	Regime source.Regime
	// PerRecordCommit: the source can commit its position after every
	// record instead of every batch (a setting of the kind).
	PerRecordCommit bool
	// FSSeam: every byte it reads and writes goes through Env.FS.
	FSSeam bool
	// Pausable: its sources implement source.Pausable — flow control can
	// stop them reading without losing their place (a Kafka source keeps
	// its group membership). The registry hands the daemon each opened
	// source's Pausable (Opened.Pausable, OwnRaw.Pausable).
	Pausable bool
}

// SourceFlow is what flow control gives a source when it is opened.
type SourceFlow struct {
	// Prefetch is the memory, in bytes as held (decompressed, decoded),
	// the source's client may buffer ahead of the gate — fetched records,
	// a pull batch, read-ahead (flow.Prefetch: the source's share of the
	// budget). The kind derives its transport's limits from it once, at
	// open; a setting of the kind that sets one explicitly wins. 0: no
	// bound is derived (the kind's defaults).
	Prefetch int64
	// Estimator is the source's size estimate: the memory a record takes
	// while held per byte of its data (source.Record.Size). The gate's
	// admission reserves by it; the source tells it what it measures
	// (Observe) — a Kafka source from its fetch batches. Nil: none.
	Estimator *flow.Estimator
}

// SourceParams is what a source factory receives.
type SourceParams[C any] struct {
	Env
	// Config is the kind's validated settings.
	Config *C
	// OnCommit is called after each position commit (never nil).
	OnCommit func()
	// Flow is the source's prefetch bound and size estimator.
	Flow SourceFlow
}

// OriginParams is what an origin factory receives: a source that is its
// own primary raw.
type OriginParams[C any] struct {
	SourceParams[C]
	// Dir holds what the origin keeps beside the origin itself (its
	// position index).
	Dir string
	// OnDurable is called with each batch once the origin has made it
	// durable — before the position is committed — with the position of
	// recs[0].
	OnDurable func(first uint64, recs []source.Record)
	// Admit holds memory for a batch the origin is making durable: it
	// returns once the batch's reservation is granted (or ctx ended), and
	// release gives it back after OnDurable. A source that is its own raw
	// has no gate to do that for it. Never nil.
	Admit func(ctx context.Context, recs []source.Record) (release func(), err error)
}

// OwnRaw is a source opened as its own primary raw: the source, and a
// reader of its origin by position. Close releases the reader (never nil).
type OwnRaw struct {
	Source source.Source
	Reader sink.RawReader
	Close  func() error
	// Pausable is set by the registry, as in Opened.
	Pausable source.Pausable
}

// Opened is a source as the registry opens it.
type Opened struct {
	Source source.Source
	// Pausable pauses and resumes the source's reading; nil unless the
	// kind has the Pausable capability.
	Pausable source.Pausable
}

// OriginMode is a source kind's replayable-origin mode.
type OriginMode[C any] struct {
	Open func(ctx context.Context, p OriginParams[C]) (OwnRaw, error)
}

// Source defines a source kind.
type Source[C any] struct {
	Name    string // the kind: the value of type = "..."
	Summary string
	Fields  []Field
	Caps    SourceCaps
	// Open returns the source; nothing should connect before Run.
	Open func(ctx context.Context, p SourceParams[C]) (source.Source, error)
	// Check holds the rules that span keys (nil: none).
	Check func(c *C) []Problem
	// Origin is set for a replayable origin (files), which may be its own
	// primary raw; nil otherwise.
	Origin *OriginMode[C]
	// Probe dials the server the settings name (a broker) and
	// authenticates, with the connection code the source runs with; it
	// joins no group, creates and acknowledges nothing (`weir validate
	// --connect`). ctx bounds it. Nil: the kind has no server (files).
	Probe func(ctx context.Context, c *C) error
}

// SourceDef is a source kind's definition as the registration list holds
// it.
type SourceDef interface {
	sourceKind() (*SourceKind, error)
}

func (d Source[C]) sourceKind() (*SourceKind, error) {
	s, err := newSpec[C](d.Name, d.Summary, d.Fields)
	if err != nil {
		return nil, err
	}
	if d.Open == nil || (d.Origin != nil && d.Origin.Open == nil) {
		return nil, fmt.Errorf("component: source kind %q: Open (and Origin.Open with an origin mode) is required", d.Name)
	}
	params := func(in SourceInstance) SourceParams[C] {
		s.mustOwn(in.Config)
		onCommit := in.OnCommit
		if onCommit == nil {
			onCommit = func() {}
		}
		return SourceParams[C]{Env: in.Env.withDefaults(), Config: in.Config.(*C), OnCommit: onCommit, Flow: in.Flow}
	}
	k := &SourceKind{spec: s, caps: d.Caps, check: problems(d.Check)}
	if d.Probe != nil {
		k.probe = func(ctx context.Context, cfg any) error { s.mustOwn(cfg); return d.Probe(ctx, cfg.(*C)) }
	}
	k.open = func(ctx context.Context, in SourceInstance) (Opened, error) {
		src, err := d.Open(ctx, params(in))
		if err != nil {
			return Opened{}, err
		}
		p, err := k.pausable(src)
		return Opened{Source: src, Pausable: p}, err
	}
	if o := d.Origin; o != nil {
		k.origin = func(ctx context.Context, in SourceInstance) (OwnRaw, error) {
			onDurable := in.OnDurable
			if onDurable == nil {
				onDurable = func(uint64, []source.Record) {}
			}
			admit := in.Admit
			if admit == nil {
				admit = func(context.Context, []source.Record) (func(), error) { return func() {}, nil }
			}
			own, err := o.Open(ctx, OriginParams[C]{SourceParams: params(in), Dir: in.Dir, OnDurable: onDurable, Admit: admit})
			if err != nil {
				return own, err
			}
			if own.Pausable, err = k.pausable(own.Source); err != nil {
				return OwnRaw{}, errors.Join(err, own.Close())
			}
			return own, nil
		}
	}
	return k, nil
}

// pausable is src's Pausable when the kind declares the capability — the
// one place that looks behind the source.Source a factory returned, to
// check the declaration against it.
func (k *SourceKind) pausable(src source.Source) (source.Pausable, error) {
	if !k.caps.Pausable {
		return nil, nil
	}
	p, ok := src.(source.Pausable)
	if !ok {
		return nil, fmt.Errorf("component: source kind %q declares Pausable, but its source %T does not implement source.Pausable", k.kind, src)
	}
	return p, nil
}

// SourceKind is a registered source kind.
type SourceKind struct {
	spec
	caps   SourceCaps
	check  func(any) []Problem
	open   func(context.Context, SourceInstance) (Opened, error)
	origin func(context.Context, SourceInstance) (OwnRaw, error)
	probe  func(context.Context, any) error // nil: no server
}

// SourceInstance is one configured source as the daemon opens it.
type SourceInstance struct {
	Env
	// Config is the kind's settings, from NewConfig, validated.
	Config any
	// OnCommit is called after each position commit (nil: nothing).
	OnCommit func()
	// Flow is the source's prefetch bound and size estimator.
	Flow SourceFlow
	// Dir, OnDurable and Admit are for OpenOwnRaw: see OriginParams (nil
	// Admit: nothing is held).
	Dir       string
	OnDurable func(first uint64, recs []source.Record)
	Admit     func(ctx context.Context, recs []source.Record) (release func(), err error)
}

// Caps are the kind's static capabilities.
func (k *SourceKind) Caps() SourceCaps { return k.caps }

// HasServer reports whether the kind has a server to Probe.
func (k *SourceKind) HasServer() bool { return k.probe != nil }

// Probe dials and authenticates the server of a source of the kind with
// settings cfg, changing nothing there (Source.Probe); ErrNoServer for a
// kind without one.
func (k *SourceKind) Probe(ctx context.Context, cfg any) error {
	if k.probe == nil {
		return fmt.Errorf("%w: %q", ErrNoServer, k.kind)
	}
	return k.probe(ctx, cfg)
}

// Replayable reports whether the kind's origin can be read again by
// position, so may be its own primary raw.
func (k *SourceKind) Replayable() bool { return k.origin != nil }

// Check returns the rules over several keys that cfg breaks.
func (k *SourceKind) Check(cfg any) []Problem { k.mustOwn(cfg); return k.check(cfg) }

// Open returns a source of the kind, with its Pausable when the kind has
// the capability.
func (k *SourceKind) Open(ctx context.Context, in SourceInstance) (Opened, error) {
	return k.open(ctx, in)
}

// OpenOwnRaw opens a source of the kind as its own primary raw, keeping
// its index in in.Dir and telling in.OnDurable of each durable batch.
func (k *SourceKind) OpenOwnRaw(ctx context.Context, in SourceInstance) (OwnRaw, error) {
	if k.origin == nil {
		return OwnRaw{}, fmt.Errorf("component: source kind %q has no replayable origin", k.kind)
	}
	return k.origin(ctx, in)
}
