package daemon

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/components"
	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/internal/metrics"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// probeSink is a sink kind that records how each instance was opened.
type probeSink struct{ name string }

func (p *probeSink) Name() string      { return "probe" }
func (p *probeSink) MaxBatchSize() int { return 8 }
func (p *probeSink) Commit(context.Context, sink.Batch) (sink.CommitResult, error) {
	return sink.CommitResult{}, nil
}
func (p *probeSink) Health(context.Context) sink.Health { return sink.Health{State: sink.Healthy} }
func (p *probeSink) Close() error                       { return nil }

type probeConfig struct{ Batch int }

// TestSecondaryNotDurableOpened: a [[secondary]] with durable = false is
// opened with Env.NonDurable — the others without — and
// weir_secondary_durable says which is which from the start.
func TestSecondaryNotDurableOpened(t *testing.T) {
	var mu sync.Mutex
	opened := map[string]bool{} // secondary name → NonDurable
	reg, err := components.Registry().Extend(component.List{Sinks: []component.SinkDef{component.Sink[probeConfig]{
		Name: "probe", Summary: "records how it is opened",
		Caps: component.SinkCaps{Durable: true, NonDurable: true},
		Fields: []component.Field{component.Key("batch_records", setting.Int(1, 64), 8, "Most records per commit.",
			func(c *probeConfig) *int { return &c.Batch })},
		Open: func(_ context.Context, p component.SinkParams[probeConfig]) (sink.Sink, error) {
			mu.Lock()
			defer mu.Unlock()
			opened[p.Name] = p.NonDurable
			return &probeSink{name: p.Name}, nil
		},
		MaxBatch: func(*probeConfig) int { return 8 },
	}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	toml := filepath.Join(dir, "weir.toml")
	if err := os.WriteFile(toml, []byte(`
[[secondary]]
name = "fast"
type = "probe"
durable = false

[[secondary]]
name = "safe"
type = "probe"

[[secondary]]
name = "files"
type = "file"
durable = false
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadWith(reg, []string{"--config", toml, "--data-dir", dir}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, promReg := metrics.New(metrics.Config{Shards: 1, Sink: "file"})
	k := kinds{cfg: cfg, fs: vfs.OS, metrics: promReg}
	secs, err := openSecondaries(context.Background(), cfg, k, slog.New(slog.DiscardHandler), m.Topology())
	if err != nil {
		t.Fatal(err)
	}
	defer closeSecondaries(secs)
	for _, sec := range secs { // each opens in the background
		if err := sec.Sink.(*pendingSink).wait(ctxTimeout(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if !opened["fast"] || opened["safe"] {
		t.Errorf("opened with NonDurable: %v; want fast only", opened)
	}
	want := map[string]float64{"fast": 0, "safe": 1, "files": 0}
	fams, err := promReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "weir_secondary_durable" {
			continue
		}
		for _, mm := range f.GetMetric() {
			got[mm.GetLabel()[0].GetValue()] = mm.GetGauge().GetValue()
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("weir_secondary_durable: %v, want %v", got, want)
	}
}

// ctxTimeout is a context that ends after d or with the test.
func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
