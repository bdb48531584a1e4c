// Package component is weir's registry of sink and source kinds. A kind —
// "file", "postgres", "kafka" — is one package that describes itself once,
// in a definition (Sink or Source): its name, its configuration keys (each
// with type, default, range and meaning, built from package setting like
// every other setting of weir), a factory, and its capabilities. The one
// registration list, package internal/components, collects the built-in
// definitions into a Registry.
//
// Everything else reads the registry instead of naming kinds: package
// config builds the [sink.<kind>], [secondary.<kind>] and
// [source.<kind>] tables and their validation from the keys, the daemon
// opens sinks and sources through the factories and decides what may be
// primary raw, a recovery-only node or its own raw from the capabilities,
// `weir kinds` lists them, and docs/configuration.md is generated from
// them. Adding a kind is a new package and one line in the list; see
// docs/extending.md.
//
// The model is Redpanda Connect's public/service plugin specs: one package
// per integration registers a name, a config spec and a constructor.
//
// # Settings
//
// A kind's settings are a struct of its own (its C); each Field binds one
// key to one field of it through a pointer accessor, with its setting.Type
// and default. The registry makes a C with every default filled in
// (NewConfig), package config sets what the file, a flag or a variable
// gave and range-checks every key, and the factory receives the validated
// *C with the common environment (Env). Factories take one params struct
// so that new common inputs never change their signature.
package component

import (
	"fmt"
	"log/slog"
	"reflect"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/internal/vfs"
)

// Env is what the daemon gives every factory besides the kind's own
// settings.
type Env struct {
	// Name is the instance's configured name: a secondary's or a
	// source's name, or the kind's name for the [sink].
	Name string
	// FS is the file-system seam; a kind that keeps files does all its
	// I/O through it (the FSSeam capability), so fault injection and
	// crash simulation reach it.
	FS vfs.FS
	// Logger is already labelled with the component and instance.
	Logger *slog.Logger
	// Metrics is the daemon's per-instance registry; register nothing
	// globally.
	Metrics prometheus.Registerer
	// DataDir is the daemon's data_dir (absolute).
	DataDir string
	// NonDurable is set only for a [[secondary]] with durable = false,
	// of a kind with the NonDurable capability: its commits need not
	// wait for stable storage. Sources ignore it.
	NonDurable bool
}

func (e Env) logger() *slog.Logger {
	if e.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Logger
}

func (e Env) fs() vfs.FS {
	if e.FS == nil {
		return vfs.OS
	}
	return e.FS
}

// withDefaults fills in what the caller left unset.
func (e Env) withDefaults() Env {
	e.Logger, e.FS = e.logger(), e.fs()
	if e.Metrics == nil {
		e.Metrics = prometheus.NewRegistry()
	}
	return e
}

// Problem is a rule over several keys that a kind's settings break: the
// key (within the kind's table) to name, its value as shown, and why.
type Problem struct {
	Key, Value, Why string
}

// Field is one key of a kind's table. Build it with Key.
type Field struct {
	Key     string       // within the table: "batch_records"
	Kind    setting.Kind // how it is written
	Default string       // as shown to people
	Range   string       // as shown to people
	Help    string
	// Required: the key must be set (to a non-zero value) when the kind
	// is in use.
	Required bool
	// DirName is set for the directory an FS-backed sink writes: as the
	// [sink] it defaults to <data_dir>/<DirName>, as a secondary to
	// <data_dir>/secondary/<name>, and no two sinks may share one.
	DirName string

	cfg      reflect.Type // *C
	parse    func(text string) (any, error)
	fromTOML func(v any) (any, error)
	set      func(cfg, v any)
	get      func(cfg any) any
	setDef   func(cfg any)
	check    func(cfg any) string
	format   func(cfg any) string
}

// Option changes a Field as Key builds it.
type Option func(*Field)

// Required marks a key that must be set when the kind is in use.
func Required() Option { return func(f *Field) { f.Required = true } }

// Dir marks the directory the sink writes; name is its default under
// data_dir when the kind is the [sink].
func Dir(name string) Option {
	return func(f *Field) {
		f.DirName = name
		f.Default = "<data_dir>/" + name
	}
}

// Shown replaces the default as shown to people, for a default the
// component derives (the zero value stands for it).
func Shown(text string) Option { return func(f *Field) { f.Default = text } }

// Key binds a key of type t, with default def, to the field of C that ptr
// returns.
func Key[C, T any](key string, t setting.Type[T], def T, help string, ptr func(*C) *T, opts ...Option) Field {
	f := Field{Key: key, Kind: t.Kind, Default: t.Format(def), Range: t.Range, Help: help, cfg: reflect.TypeFor[*C]()}
	at := func(cfg any) *T { return ptr(cfg.(*C)) }
	f.parse = func(s string) (any, error) { return t.Parse(s) }
	f.fromTOML = func(v any) (any, error) { return t.FromTOML(v) }
	f.set = func(cfg, v any) { *at(cfg) = v.(T) }
	f.get = func(cfg any) any { return *at(cfg) }
	f.setDef = func(cfg any) { *at(cfg) = def }
	f.check = func(cfg any) string { return t.Valid(*at(cfg)) }
	f.format = func(cfg any) string { return t.Format(*at(cfg)) }
	for _, o := range opts {
		o(&f)
	}
	return f
}

// Parse reads the key's text form (a flag, an environment variable).
func (f *Field) Parse(text string) (any, error) { return f.parse(text) }

// ParseTOML reads the key from a decoded TOML value.
func (f *Field) ParseTOML(v any) (any, error) { return f.fromTOML(v) }

// Set stores a value that Parse or ParseTOML returned (or, for a string
// key, a string) in cfg, a *C of the kind.
func (f *Field) Set(cfg, v any) { f.set(cfg, v) }

// Get returns the key's value in cfg.
func (f *Field) Get(cfg any) any { return f.get(cfg) }

// Check range-checks the key's value in cfg: "" when valid.
func (f *Field) Check(cfg any) string { return f.check(cfg) }

// Value shows the key's value in cfg (secrets are not shown).
func (f *Field) Value(cfg any) string { return f.format(cfg) }

// SetDefault stores the key's default in cfg.
func (f *Field) SetDefault(cfg any) { f.setDef(cfg) }

// IsZero reports whether the key holds its type's zero value in cfg.
func (f *Field) IsZero(cfg any) bool { return reflect.ValueOf(f.get(cfg)).IsZero() }

// spec is what every kind has: a name, a summary, its keys and the type
// of its settings.
type spec struct {
	kind    string
	summary string
	fields  []Field
	cfg     reflect.Type // *C
}

func newSpec[C any](kind, summary string, fields []Field) (spec, error) {
	s := spec{kind: kind, summary: summary, fields: fields, cfg: reflect.TypeFor[*C]()}
	if !validKindName(kind) {
		return s, fmt.Errorf("component: kind name %q: want lowercase letters, digits and '_'", kind)
	}
	seen := map[string]bool{}
	for i := range fields {
		f := &fields[i]
		switch {
		case f.cfg == nil:
			return s, fmt.Errorf("component: kind %q: field %d was not built with Key", kind, i)
		case f.cfg != s.cfg:
			return s, fmt.Errorf("component: kind %q: key %q binds %v, the kind's settings are %v", kind, f.Key, f.cfg, s.cfg)
		case !validKindName(f.Key):
			return s, fmt.Errorf("component: kind %q: key %q: want lowercase letters, digits and '_'", kind, f.Key)
		case seen[f.Key]:
			return s, fmt.Errorf("component: kind %q: key %q declared twice", kind, f.Key)
		case f.DirName != "" && f.Kind != setting.KindPath:
			return s, fmt.Errorf("component: kind %q: key %q: a directory must be a path", kind, f.Key)
		}
		seen[f.Key] = true
	}
	return s, nil
}

func validKindName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}

// Name is the kind's name.
func (s *spec) Name() string { return s.kind }

// Summary is the kind's one-line description.
func (s *spec) Summary() string { return s.summary }

// Fields are the kind's keys, in documentation order.
func (s *spec) Fields() []Field { return s.fields }

// Field is the key's Field, or nil.
func (s *spec) Field(key string) *Field { return s.field(key) }

// NewConfig returns the kind's settings (a *C) with every default set.
func (s *spec) NewConfig() any { return s.newConfig() }

// newConfig is a *C with every default set.
func (s *spec) newConfig() any {
	cfg := reflect.New(s.cfg.Elem()).Interface()
	for i := range s.fields {
		s.fields[i].setDef(cfg)
	}
	return cfg
}

// field returns the key's Field, or nil.
func (s *spec) field(key string) *Field {
	for i := range s.fields {
		if s.fields[i].Key == key {
			return &s.fields[i]
		}
	}
	return nil
}

// mustOwn panics unless cfg is the kind's settings: a daemon bug, never a
// configuration error.
func (s *spec) mustOwn(cfg any) {
	if reflect.TypeOf(cfg) != s.cfg {
		panic(fmt.Sprintf("component: kind %q given settings of type %T, want %v", s.kind, cfg, s.cfg))
	}
}
