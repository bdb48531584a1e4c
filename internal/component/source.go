package component

import (
	"context"
	"fmt"

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
}

// SourceParams is what a source factory receives.
type SourceParams[C any] struct {
	Env
	// Config is the kind's validated settings.
	Config *C
	// OnCommit is called after each position commit (never nil).
	OnCommit func()
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
}

// OwnRaw is a source opened as its own primary raw: the source, and a
// reader of its origin by position. Close releases the reader (never nil).
type OwnRaw struct {
	Source source.Source
	Reader sink.RawReader
	Close  func() error
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
		return SourceParams[C]{Env: in.Env.withDefaults(), Config: in.Config.(*C), OnCommit: onCommit}
	}
	k := &SourceKind{spec: s, caps: d.Caps, check: problems(d.Check),
		open: func(ctx context.Context, in SourceInstance) (source.Source, error) { return d.Open(ctx, params(in)) },
	}
	if o := d.Origin; o != nil {
		k.origin = func(ctx context.Context, in SourceInstance) (OwnRaw, error) {
			onDurable := in.OnDurable
			if onDurable == nil {
				onDurable = func(uint64, []source.Record) {}
			}
			return o.Open(ctx, OriginParams[C]{SourceParams: params(in), Dir: in.Dir, OnDurable: onDurable})
		}
	}
	return k, nil
}

// SourceKind is a registered source kind.
type SourceKind struct {
	spec
	caps   SourceCaps
	check  func(any) []Problem
	open   func(context.Context, SourceInstance) (source.Source, error)
	origin func(context.Context, SourceInstance) (OwnRaw, error)
}

// SourceInstance is one configured source as the daemon opens it.
type SourceInstance struct {
	Env
	// Config is the kind's settings, from NewConfig, validated.
	Config any
	// OnCommit is called after each position commit (nil: nothing).
	OnCommit func()
	// Dir and OnDurable are for OpenOwnRaw: see OriginParams.
	Dir       string
	OnDurable func(first uint64, recs []source.Record)
}

// Caps are the kind's static capabilities.
func (k *SourceKind) Caps() SourceCaps { return k.caps }

// Replayable reports whether the kind's origin can be read again by
// position, so may be its own primary raw.
func (k *SourceKind) Replayable() bool { return k.origin != nil }

// Check returns the rules over several keys that cfg breaks.
func (k *SourceKind) Check(cfg any) []Problem { k.mustOwn(cfg); return k.check(cfg) }

// Open returns a source of the kind.
func (k *SourceKind) Open(ctx context.Context, in SourceInstance) (source.Source, error) {
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
