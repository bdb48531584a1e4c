package component

import (
	"context"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/source"
)

// stubSource is a source that runs until its context ends.
type stubSource struct{ name string }

func (s *stubSource) Name() string          { return s.name }
func (s *stubSource) Regime() source.Regime { return source.BrokerManaged }
func (s *stubSource) Replayable() bool      { return false }
func (s *stubSource) Run(ctx context.Context, _ source.Gate, _ source.CursorStore) error {
	<-ctx.Done()
	return nil
}

// pausableSource is a stubSource with a pause control.
type pausableSource struct {
	stubSource
	source.Pauser
}

// The registry hands over the Pausable of a kind that declares the
// capability, refuses a kind whose source does not have it, and gives
// none for a kind that does not declare it. The factory receives the
// flow parameters the instance carries.
func TestSourcePausable(t *testing.T) {
	est := flow.NewEstimator(100)
	var got SourceFlow
	def := func(name string, caps SourceCaps, src source.Source) SourceDef {
		return Source[otherConfig]{Name: name, Caps: caps,
			Open: func(_ context.Context, p SourceParams[otherConfig]) (source.Source, error) {
				got = p.Flow
				return src, nil
			}}
	}
	paused := &pausableSource{stubSource: stubSource{name: "p"}}
	r, err := New(List{DefaultSink: "a", Sinks: []SinkDef{testSink("a")}, Sources: []SourceDef{
		def("pausable", SourceCaps{Pausable: true}, paused),
		def("liar", SourceCaps{Pausable: true}, &stubSource{name: "l"}),
		def("plain", SourceCaps{}, paused),
	}})
	if err != nil {
		t.Fatal(err)
	}
	open := func(kind string) (Opened, error) {
		k, ok := r.Source(kind)
		if !ok {
			t.Fatalf("no kind %s", kind)
		}
		return k.Open(context.Background(), SourceInstance{Config: k.NewConfig(), Flow: SourceFlow{Prefetch: 1 << 20, Estimator: est}})
	}

	o, err := open("pausable")
	if err != nil || o.Source != source.Source(paused) || o.Pausable == nil {
		t.Fatalf("pausable kind: %+v, %v", o, err)
	}
	if got.Prefetch != 1<<20 || got.Estimator != est {
		t.Fatalf("factory got flow %+v", got)
	}
	o.Pausable.Pause()
	if !paused.Paused() {
		t.Fatal("Opened.Pausable does not pause the source")
	}
	if _, err := open("liar"); err == nil || !strings.Contains(err.Error(), "does not implement source.Pausable") {
		t.Fatalf("kind declaring Pausable without it: %v", err)
	}
	if o, err := open("plain"); err != nil || o.Pausable != nil {
		t.Fatalf("kind without the capability: Pausable %v, %v", o.Pausable, err)
	}
	if !strings.Contains(r.SourceTable().Markdown(), "| pausable | broker-managed | no | no | yes |") {
		t.Fatalf("source table does not show the capability:\n%s", r.SourceTable().Markdown())
	}
}
