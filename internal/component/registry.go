package component

import (
	"errors"
	"fmt"
)

// List is a registration list: the sink and source kinds a registry
// holds, in documentation order, and the sink kind the [sink] defaults to.
type List struct {
	DefaultSink string
	Sinks       []SinkDef
	Sources     []SourceDef
}

// Registry holds the registered kinds. It is built once and never
// changes; Extend returns a new one.
type Registry struct {
	defaultSink string
	sinks       []*SinkKind
	sources     []*SourceKind
}

// New builds a registry from l, checking every definition: names and keys
// well formed and unique, every key bound to the kind's settings, the
// factories present, the default sink registered.
func New(l List) (*Registry, error) {
	return (&Registry{}).Extend(l)
}

// MustNew is New for the registration list, whose definitions are fixed
// at compile time: it panics on an error (a test catches it).
func MustNew(l List) *Registry {
	r, err := New(l)
	if err != nil {
		panic(err)
	}
	return r
}

// Extend returns a registry holding r's kinds and l's; l.DefaultSink, when
// set, replaces r's default.
func (r *Registry) Extend(l List) (*Registry, error) {
	out := &Registry{defaultSink: r.defaultSink,
		sinks:   append([]*SinkKind(nil), r.sinks...),
		sources: append([]*SourceKind(nil), r.sources...)}
	var errs []error
	for _, d := range l.Sinks {
		k, err := d.sinkKind()
		if err == nil {
			if _, dup := out.Sink(k.Name()); dup {
				err = fmt.Errorf("component: sink kind %q registered twice", k.Name())
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out.sinks = append(out.sinks, k)
	}
	for _, d := range l.Sources {
		k, err := d.sourceKind()
		if err == nil {
			if _, dup := out.Source(k.Name()); dup {
				err = fmt.Errorf("component: source kind %q registered twice", k.Name())
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out.sources = append(out.sources, k)
	}
	if l.DefaultSink != "" {
		out.defaultSink = l.DefaultSink
	}
	if _, ok := out.Sink(out.defaultSink); !ok && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("component: default sink kind %q is not registered", out.defaultSink))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// DefaultSink is the kind the [sink] has when sink.type is not set.
func (r *Registry) DefaultSink() string { return r.defaultSink }

// Sink returns the sink kind called name.
func (r *Registry) Sink(name string) (*SinkKind, bool) {
	for _, k := range r.sinks {
		if k.Name() == name {
			return k, true
		}
	}
	return nil, false
}

// Source returns the source kind called name.
func (r *Registry) Source(name string) (*SourceKind, bool) {
	for _, k := range r.sources {
		if k.Name() == name {
			return k, true
		}
	}
	return nil, false
}

// Sinks are the sink kinds in registration order.
func (r *Registry) Sinks() []*SinkKind { return r.sinks }

// Sources are the source kinds in registration order.
func (r *Registry) Sources() []*SourceKind { return r.sources }

// SinkNames are the sink kinds' names in registration order.
func (r *Registry) SinkNames() []string {
	out := make([]string, len(r.sinks))
	for i, k := range r.sinks {
		out[i] = k.Name()
	}
	return out
}

// RawSinkNames are the names of the sink kinds that may be primary raw.
func (r *Registry) RawSinkNames() []string {
	var out []string
	for _, k := range r.sinks {
		if k.PrimaryRaw() {
			out = append(out, k.Name())
		}
	}
	return out
}

// SourceNames are the source kinds' names in registration order.
func (r *Registry) SourceNames() []string {
	out := make([]string, len(r.sources))
	for i, k := range r.sources {
		out[i] = k.Name()
	}
	return out
}
