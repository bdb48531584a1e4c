package contract

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/weir-io/weir/sink"
)

// Contract is a compiled Spec. It is immutable and safe for concurrent
// use.
type Contract struct {
	spec      Spec
	name      string
	schema    *jsonschema.Schema // nil: any JSON
	fast      *fastNode          // the schema's fast path; nil: none (fastschema.go)
	rules     []rule
	natural   []pointer
	eventTime *pointer // nil: not declared
	keyed     bool
}

// Compile checks and compiles a contract: the schema once, every rule,
// and the JSON pointers. Every error names the stream and the field at
// fault.
func Compile(s Spec) (*Contract, error) {
	if s.Stream == "" {
		return nil, errors.New("contract: stream is empty")
	}
	c := &Contract{spec: cloneSpec(s), name: s.Stream + "@" + version(s.Version)}
	wrap := func(err error) error {
		return fmt.Errorf("contract for stream %q: %w", s.Stream, err)
	}
	if s.Header == "" && s.HeaderValue != "" {
		return nil, wrap(errors.New("header_value without header"))
	}
	var err error
	if c.schema, err = compileSchema(s.Schema, s.SchemaPath); err != nil {
		return nil, wrap(err)
	}
	if c.schema != nil {
		if doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(s.Schema)); err == nil {
			c.fast = compileFast(doc)
		}
	}
	if c.rules, err = compileRules(s.Rules); err != nil {
		return nil, wrap(err)
	}
	if err := c.compileKey(); err != nil {
		return nil, wrap(err)
	}
	return c, nil
}

// compileKey parses the natural key's and event time's pointers and
// decides whether the contract keys dedup.
func (c *Contract) compileKey() error {
	for i, p := range c.spec.NaturalKey {
		ptr, err := parsePointer(p)
		if err != nil {
			return fmt.Errorf("natural_key[%d] %q: %w", i, p, err)
		}
		c.natural = append(c.natural, ptr)
	}
	if c.spec.EventTime != "" {
		ptr, err := parsePointer(c.spec.EventTime)
		if err != nil {
			return fmt.Errorf("event_time %q: %w", c.spec.EventTime, err)
		}
		c.eventTime = &ptr
	}
	if c.spec.Unique && len(c.natural) == 0 {
		return errors.New("unique: declared without a natural_key (nothing to be unique by)")
	}
	c.keyed = (c.spec.Unique && len(c.natural) > 0) || c.spec.PayloadUnique
	return nil
}

func version(v string) string {
	if v == "" {
		return "0"
	}
	return v
}

func cloneSpec(s Spec) Spec {
	s.Schema = slices.Clone(s.Schema)
	s.NaturalKey = slices.Clone(s.NaturalKey)
	s.Rules = slices.Clone(s.Rules)
	return s
}

// Name is "<stream>@<version>", the version "0" when the spec has none.
func (c *Contract) Name() string { return c.name }

// Spec returns a copy of the spec the contract was compiled from.
func (c *Contract) Spec() Spec { return cloneSpec(c.spec) }

// DedupKeyed reports whether the contract allows content dedup: a
// natural key declared unique, or a payload declared unique. Only then
// does Check fill Result.Key.
func (c *Contract) DedupKeyed() bool { return c.keyed }

// Matches reports whether the contract applies to r: always when the
// spec has no Header, else when r's header Header has the value
// HeaderValue (the last value, when the name repeats — as rules see it).
func (c *Contract) Matches(r *sink.Record) bool {
	if c.spec.Header == "" {
		return true
	}
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == c.spec.Header {
			return string(r.Headers[i].Value) == c.spec.HeaderValue
		}
	}
	return false
}
