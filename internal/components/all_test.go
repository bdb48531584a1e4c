package components

import (
	"slices"
	"testing"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/source"
)

// TestBuiltinKinds checks the registration list: every built-in kind is
// there with its capabilities, and every key's default is within its own
// range.
func TestBuiltinKinds(t *testing.T) {
	r := Registry()
	if got, want := r.SinkNames(), []string{"file", "parquet", "postgres", "mysql", "kafka", "flight"}; !slices.Equal(got, want) {
		t.Errorf("sinks %v, want %v", got, want)
	}
	if got, want := r.RawSinkNames(), []string{"file", "parquet", "postgres"}; !slices.Equal(got, want) {
		t.Errorf("primary-raw sinks %v, want %v", got, want)
	}
	if got, want := r.SourceNames(), []string{"kafka", "nats", "file", "flight", "arrow_ipc"}; !slices.Equal(got, want) {
		t.Errorf("sources %v, want %v", got, want)
	}
	if r.DefaultSink() != "file" {
		t.Errorf("default sink %q", r.DefaultSink())
	}
	for _, k := range r.Sinks() {
		cfg := k.NewConfig()
		for _, f := range k.Fields() {
			if why := f.Check(cfg); why != "" {
				t.Errorf("sink %s: default of %s = %s: %s", k.Name(), f.Key, f.Value(cfg), why)
			}
		}
		if !k.Caps().Durable {
			t.Errorf("sink %s is not durable by default", k.Name())
		}
		if fsSeam, hasDir := k.Caps().FSSeam, k.Dir() != nil; fsSeam != hasDir {
			t.Errorf("sink %s: FS seam %v but directory key %v", k.Name(), fsSeam, hasDir)
		}
	}
	// The Kafka and Flight sinks cannot be read back by position, keep
	// replays as copies (a Flight server may deduplicate on the id column)
	// and have no non-durable mode.
	for _, name := range []string{"kafka", "flight"} {
		if k, _ := r.Sink(name); k.PrimaryRaw() || k.Caps() != (component.SinkCaps{Durable: true}) {
			t.Errorf("sink %s: primary raw %v, caps %+v", name, k.PrimaryRaw(), k.Caps())
		}
	}
	regimes := map[string]source.Regime{"kafka": source.BrokerManaged, "nats": source.BrokerManaged, "file": source.StoreManaged, "flight": source.ProducerManaged, "arrow_ipc": source.StoreManaged}
	for _, k := range r.Sources() {
		cfg := k.NewConfig()
		for _, f := range k.Fields() {
			if why := f.Check(cfg); why != "" {
				t.Errorf("source %s: default of %s = %s: %s", k.Name(), f.Key, f.Value(cfg), why)
			}
		}
		if k.Caps().Regime != regimes[k.Name()] {
			t.Errorf("source %s: regime %v", k.Name(), k.Caps().Regime)
		}
		if !k.Caps().Pausable {
			t.Errorf("source %s cannot be paused by flow control", k.Name())
		}
		if k.Replayable() != (k.Name() == "file") {
			t.Errorf("source %s: replayable %v", k.Name(), k.Replayable())
		}
	}
}
