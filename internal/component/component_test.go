package component

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

type testConfig struct {
	Dir   string
	Batch int
	Wait  time.Duration
}

type otherConfig struct{ N int }

func testFields() []Field {
	return []Field{
		Key("dir", setting.Path(), "", "Where.", func(c *testConfig) *string { return &c.Dir }, Dir("t")),
		Key("batch", setting.Int(1, 100), 10, "How many.", func(c *testConfig) *int { return &c.Batch }, Required()),
		Key("wait", setting.Duration(time.Millisecond, time.Minute), time.Second, "How long.", func(c *testConfig) *time.Duration { return &c.Wait }),
	}
}

func testSink(name string) Sink[testConfig] {
	return Sink[testConfig]{
		Name:     name,
		Summary:  "a test sink",
		Fields:   testFields(),
		Open:     func(context.Context, SinkParams[testConfig]) (sink.Sink, error) { return nil, nil },
		MaxBatch: func(c *testConfig) int { return c.Batch },
	}
}

func testSource(name string) Source[otherConfig] {
	return Source[otherConfig]{
		Name:   name,
		Fields: []Field{Key("n", setting.Int(0, 9), 3, "N.", func(c *otherConfig) *int { return &c.N })},
		Open:   func(context.Context, SourceParams[otherConfig]) (source.Source, error) { return nil, nil },
	}
}

func TestRegistry(t *testing.T) {
	r, err := New(List{DefaultSink: "a", Sinks: []SinkDef{testSink("a"), testSink("b")}, Sources: []SourceDef{testSource("s")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.SinkNames(), ","); got != "a,b" {
		t.Errorf("sinks %s", got)
	}
	if r.DefaultSink() != "a" || len(r.RawSinkNames()) != 0 || strings.Join(r.SourceNames(), ",") != "s" {
		t.Errorf("registry %+v", r)
	}
	k, ok := r.Sink("a")
	if !ok {
		t.Fatal("no sink a")
	}
	cfg := k.NewConfig().(*testConfig)
	if *cfg != (testConfig{Batch: 10, Wait: time.Second}) {
		t.Errorf("defaults %+v", cfg)
	}
	if d := k.Dir(); d == nil || d.Key != "dir" || d.Default != "<data_dir>/t" {
		t.Errorf("dir field %+v", d)
	}
	f := k.Field("batch")
	v, err := f.ParseTOML(int64(500))
	if err != nil {
		t.Fatal(err)
	}
	f.Set(cfg, v)
	if why := f.Check(cfg); why != "must be between 1 and 100" || f.Value(cfg) != "500" || k.MaxBatch(cfg) != 500 {
		t.Errorf("check %q value %q max %d", why, f.Value(cfg), k.MaxBatch(cfg))
	}
	if _, err := f.Parse("x"); err == nil {
		t.Error("parse of a bad integer succeeded")
	}
	if _, err := k.OpenRaw(context.Background(), Env{}, cfg); err == nil {
		t.Error("OpenRaw of a kind without a raw mode succeeded")
	}
	// Extend adds kinds and keeps the original unchanged.
	r2, err := r.Extend(List{Sinks: []SinkDef{testSink("c")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r2.Sinks()) != 3 || len(r.Sinks()) != 2 || r2.DefaultSink() != "a" {
		t.Errorf("extend: %v %v", r2.SinkNames(), r.SinkNames())
	}
}

// TestRawNeverNonDurable: a kind's factories see Env.NonDurable as given,
// except those of its raw mode: raw is always durable.
func TestRawNeverNonDurable(t *testing.T) {
	var seen []bool
	d := testSink("a")
	d.Open = func(_ context.Context, p SinkParams[testConfig]) (sink.Sink, error) {
		seen = append(seen, p.NonDurable)
		return nil, nil
	}
	d.Raw = &RawMode[testConfig]{
		Open: func(_ context.Context, p SinkParams[testConfig]) (RawSink, error) {
			seen = append(seen, p.NonDurable)
			return RawSink{}, nil
		},
		Read: func(_ context.Context, p SinkParams[testConfig]) (RawRead, error) {
			seen = append(seen, p.NonDurable)
			return RawRead{}, nil
		},
		Where: func(*testConfig) string { return "" },
		Store: func(_ context.Context, p SinkParams[testConfig]) (*engine.OffsetStore, error) {
			seen = append(seen, p.NonDurable)
			return nil, nil
		},
	}
	r, err := New(List{DefaultSink: "a", Sinks: []SinkDef{d}})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := r.Sink("a")
	env, ctx := Env{NonDurable: true}, context.Background()
	k.Open(ctx, env, k.NewConfig())
	k.OpenRaw(ctx, env, k.NewConfig())
	k.ReadRaw(ctx, env, k.NewConfig())
	k.OpenStore(ctx, env, k.NewConfig())
	if fmt.Sprint(seen) != "[true false false false]" {
		t.Errorf("NonDurable seen by Open, raw Open, Read, Store: %v", seen)
	}
}

func TestRegistryRefusesBadDefinitions(t *testing.T) {
	bad := testSink("bad")
	bad.Fields = append(bad.Fields, Key("n", setting.Int(0, 9), 3, "N.", func(c *otherConfig) *int { return &c.N }))
	noOpen := testSink("noopen")
	noOpen.Open = nil
	dupKey := testSink("dupkey")
	dupKey.Fields = append(dupKey.Fields, dupKey.Fields[1])
	for _, tc := range []struct {
		name string
		l    List
		want string
	}{
		{"duplicate kind", List{DefaultSink: "a", Sinks: []SinkDef{testSink("a"), testSink("a")}}, `sink kind "a" registered twice`},
		{"bad name", List{DefaultSink: "A", Sinks: []SinkDef{testSink("A")}}, `kind name "A"`},
		{"field of another kind", List{DefaultSink: "bad", Sinks: []SinkDef{bad}}, `key "n" binds *component.otherConfig`},
		{"no factory", List{DefaultSink: "noopen", Sinks: []SinkDef{noOpen}}, "Open and MaxBatch are required"},
		{"key twice", List{DefaultSink: "dupkey", Sinks: []SinkDef{dupKey}}, `key "batch" declared twice`},
		{"no default", List{DefaultSink: "x", Sinks: []SinkDef{testSink("a")}}, `default sink kind "x" is not registered`},
		{"duplicate source", List{DefaultSink: "a", Sinks: []SinkDef{testSink("a")}, Sources: []SourceDef{testSource("s"), testSource("s")}}, `source kind "s" registered twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.l)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestTables(t *testing.T) {
	r, err := New(List{DefaultSink: "a", Sinks: []SinkDef{testSink("a")}, Sources: []SourceDef{testSource("s")}})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := r.SinkTable().Text(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "a (default)") || !strings.Contains(b.String(), "a test sink") {
		t.Errorf("sink table:\n%s", b.String())
	}
	md := KeyTable("sink.a.", r.Sinks()[0].Fields(), true).Markdown()
	for _, want := range []string{"| `sink.a.dir` | path | `<data_dir>/t` |", "| `sink.a.batch` | integer | required | 1 – 100 | How many. |"} {
		if !strings.Contains(md, want) {
			t.Errorf("key table lacks %q:\n%s", want, md)
		}
	}
	if src := r.SourceTable().Markdown(); !strings.Contains(src, "| s | broker-managed | no | no | no |") {
		t.Errorf("source table:\n%s", src)
	}
}
