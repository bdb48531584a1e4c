package metrics

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/flow"
)

func TestFlowFirstScrape(t *testing.T) {
	m, reg := New(Config{Shards: 1, Sink: "file"})
	if n := len(series(t, reg, "weir_flow_state")); n != 0 {
		t.Fatalf("flow metrics before Flow: %d series", n)
	}
	x := m.Flow(flow.DefaultThresholds())
	if m.Flow(flow.DefaultThresholds()) != x {
		t.Fatal("Flow is not one value")
	}
	x.AddSource("kafka")
	want := map[string]map[string]float64{
		"weir_flow_state":                    {"state=normal": 1, "state=degraded": 0, "state=critical": 0, "state=recovery": 0},
		"weir_flow_stuck_stage":              {"stage=clear": 1, "stage=warn": 0, "stage=unhealthy": 0, "stage=exit": 0},
		"weir_memory_budget_bytes":           {"": 0},
		"weir_memory_budget_in_use_bytes":    {"": 0},
		"weir_memory_budget_grantable_bytes": {"": 0},
		"weir_memory_budget_waiting_bytes":   {"": 0},
		"weir_flow_live_heap_bytes":          {"": 0},
		"weir_flow_expansion_ratio":          {"": 0},
		"weir_flow_memory_ratio":             {"": 0},
		"weir_flow_saturation_ratio":         {"": 0},
		"weir_flow_sink_bound":               {"": 0},
		"weir_flow_source_paused":            {"source=kafka": 0},
		"weir_flow_admission_wait_seconds":   {"": 0},
	}
	for name, w := range want {
		if got := series(t, reg, name); fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s on the first scrape:\n got %v\nwant %v", name, got, w)
		}
	}
	tr := series(t, reg, "weir_flow_transitions_total")
	if len(tr) != 12 {
		t.Errorf("weir_flow_transitions_total has %d series, want every change of state (12): %v", len(tr), tr)
	}
	for k, v := range tr {
		if v != 0 {
			t.Errorf("transitions %s = %v at start", k, v)
		}
	}
}

func TestFlowObserver(t *testing.T) {
	m, reg := New(Config{Shards: 1, Sink: "file"})
	x := m.Flow(flow.DefaultThresholds())
	x.AddSource("kafka")
	x.AddSource("nats")
	get := func(name, labels string) float64 {
		t.Helper()
		v, ok := series(t, reg, name)[labels]
		if !ok {
			t.Fatalf("%s{%s} missing", name, labels)
		}
		return v
	}
	s := flow.Sample{
		At: time.Now(), State: flow.Critical, Paused: true, Heap: 300, Ratio: 2.5,
		Signals: flow.Signals{Memory: 0.3, Held: 0.95, Queue: 0.4},
		Budget:  flow.BudgetStats{Limit: 1000, Grantable: 500, InUse: 450, Waiting: 2, WaitBytes: 25},
		Queues:  map[string]float64{"shard": 0.4, "fanout/pg": 0.1},
	}
	x.Sampled(s)
	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"weir_memory_budget_bytes", "", 1000},
		{"weir_memory_budget_grantable_bytes", "", 500},
		{"weir_memory_budget_in_use_bytes", "", 450},
		{"weir_memory_budget_waiting_bytes", "", 25},
		{"weir_flow_live_heap_bytes", "", 300},
		{"weir_flow_expansion_ratio", "", 2.5},
		{"weir_flow_memory_ratio", "", 0.3},
		{"weir_flow_saturation_ratio", "", 0.95},
		{"weir_flow_sink_bound", "", 1}, // saturated, memory low
		{"weir_flow_queue_fill_ratio", "queue=shard", 0.4},
		{"weir_flow_queue_fill_ratio", "queue=fanout/pg", 0.1},
		{"weir_flow_source_paused", "source=kafka", 1},
		{"weir_flow_source_paused", "source=nats", 1},
	} {
		if got := get(c.name, c.labels); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Memory high too: not the sink alone. Resumed: flags back to 0.
	s.Signals.Memory, s.Paused = 0.95, false
	x.Sampled(s)
	if get("weir_flow_sink_bound", "") != 0 || get("weir_flow_source_paused", "source=kafka") != 0 {
		t.Error("sink_bound or paused did not fall back")
	}
	// Saturation low: not bound either.
	s.Signals = flow.Signals{Memory: 0.1, Held: 0.2, Queue: 0.3}
	x.Sampled(s)
	if get("weir_flow_sink_bound", "") != 0 {
		t.Error("sink bound with low saturation")
	}

	x.Transition(flow.Normal, flow.Critical)
	x.Transition(flow.Critical, flow.Recovery)
	if got := series(t, reg, "weir_flow_state"); fmt.Sprint(got) != fmt.Sprint(map[string]float64{
		"state=normal": 0, "state=degraded": 0, "state=critical": 0, "state=recovery": 1}) {
		t.Errorf("weir_flow_state after two transitions: %v", got)
	}
	if get("weir_flow_transitions_total", "from=normal,to=critical") != 1 || get("weir_flow_transitions_total", "from=critical,to=recovery") != 1 ||
		get("weir_flow_transitions_total", "from=recovery,to=normal") != 0 {
		t.Errorf("transitions: %v", series(t, reg, "weir_flow_transitions_total"))
	}

	x.StuckStage(flow.StuckClear, flow.StuckWarn)
	x.StuckStage(flow.StuckWarn, flow.StuckUnhealthy)
	if got := series(t, reg, "weir_flow_stuck_stage"); fmt.Sprint(got) != fmt.Sprint(map[string]float64{
		"stage=clear": 0, "stage=warn": 0, "stage=unhealthy": 1, "stage=exit": 0}) {
		t.Errorf("weir_flow_stuck_stage: %v", got)
	}

	x.Oversize("socket")
	x.Oversize("socket")
	if get("weir_flow_oversize_total", "stage=socket") != 2 {
		t.Error("oversize not counted")
	}
	x.AdmissionWaited(0)
	x.AdmissionWaited(30 * time.Millisecond)
	if get("weir_flow_admission_wait_seconds", "") != 2 {
		t.Error("admission waits not observed")
	}
}

// The controller drives the observer: a Critical sample moves the gauges.
func TestFlowObserverFromController(t *testing.T) {
	m, reg := New(Config{Shards: 1, Sink: "file"})
	x := m.Flow(flow.DefaultThresholds())
	b := flow.NewBudget(flow.BudgetOptions{Limit: 1000, WarmupFraction: 1})
	defer b.Close()
	heap := int64(950)
	c := flow.NewController(flow.Options{Budget: b, Thresholds: flow.DefaultThresholds(), Stuck: flow.DefaultStuckThresholds(),
		Observer: x, HeapBytes: func() int64 { return heap }, MemoryLimit: b.Stats().Limit})
	c.AddQueue("shard", func() float64 { return 0.5 })
	c.Sample()
	if v := series(t, reg, "weir_flow_state")["state=critical"]; v != 1 {
		t.Fatalf("critical not shown: %v", series(t, reg, "weir_flow_state"))
	}
	if v := series(t, reg, "weir_flow_transitions_total")["from=normal,to=critical"]; v != 1 {
		t.Fatalf("transition not counted: %v", v)
	}
	if v := series(t, reg, "weir_memory_budget_bytes")[""]; v != 1000 {
		t.Fatalf("budget %v", v)
	}
}

// docs/monitoring.md lists every metric the daemon can export: those of
// New, and those made on demand (flow control, secondaries and sources).
func TestMonitoringDocListsEveryMetric(t *testing.T) {
	doc, err := os.ReadFile("../../docs/monitoring.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("`(weir_[a-z0-9_]+)`").FindAllStringSubmatch(string(doc), -1) {
		listed[m[1]] = true
	}
	m, reg := New(Config{Shards: 1, Sink: "file", DeadLetterMaxBytes: 1})
	x := m.Flow(flow.DefaultThresholds())
	x.AddSource("s")
	x.Sampled(flow.Sample{Queues: map[string]float64{"q": 0}})
	x.Oversize("socket")
	tp := m.Topology()
	tp.Secondary("pg")
	tp.SecondaryDurable("pg", true)
	tp.ClaimedRecovery("pg")
	tp.SourceStarted("s")
	tp.SourceWritten("s", 1)
	tp.SourceCommitted("s")
	tp.SourceRestarted("s")
	m.HTTP([]string{"/v1/records"}, []int{200}, []string{"decode"}).Listening("127.0.0.1:9186", "http", "http")
	m.Tap().Point("gate")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, mf := range mfs {
		name := mf.GetName()
		if len(name) > 5 && name[:5] == "weir_" && !listed[name] {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("docs/monitoring.md does not list %d metrics: %v", len(missing), missing)
	}
}

// /live fails once the stuck detector is unhealthy, and passes again when
// it clears.
func TestHealthWatchesStuckDetector(t *testing.T) {
	b := flow.NewBudget(flow.BudgetOptions{Limit: 1000, WarmupFraction: 1})
	defer b.Close()
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	c := flow.NewController(flow.Options{Budget: b, Thresholds: flow.DefaultThresholds(),
		Stuck: flow.StuckThresholds{Memory: 0.5, IdleQueue: 0.05, WarnAfter: time.Second, FailAfter: 2 * time.Second,
			ExitAfter: time.Hour, ClearAfter: time.Second},
		HeapBytes: func() int64 { return 0 }, Now: func() time.Time { return now }})
	h := NewHealth(time.Minute, quiet)
	h.WatchStuck(c)
	b.TryAcquire(800)  // held, and nothing moves
	for i := range 2 { // 0 s: the condition begins; 1 s: warn
		c.Sample()
		if err := h.Liveness(); err != nil {
			t.Fatalf("live fails after %ds: %v", i, err)
		}
		now = now.Add(time.Second)
	}
	c.Sample() // 2 s: unhealthy
	if err := h.Liveness(); !errors.Is(err, flow.ErrStuck) {
		t.Fatalf("unhealthy, Liveness = %v", err)
	}
	b.Release(800)
	c.Sample()
	now = now.Add(time.Second)
	c.Sample()
	if err := h.Liveness(); err != nil {
		t.Fatalf("after progress: %v", err)
	}
}

// weir_flow_memory_ratio is defined once (internal/flow's
// TestControllerMemoryRatio pins the computation): its help and its row in
// docs/monitoring.md both say what it is divided by.
func TestMemoryRatioDefinition(t *testing.T) {
	m, reg := New(Config{Shards: 1, Sink: "file"})
	m.Flow(flow.DefaultThresholds())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/monitoring.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `weir_flow_memory_ratio` .*$").Find(doc)
	for _, mf := range mfs {
		if mf.GetName() != "weir_flow_memory_ratio" {
			continue
		}
		for what, text := range map[string]string{"help": mf.GetHelp(), "docs/monitoring.md": string(row)} {
			for _, want := range []string{"Live heap ÷ the memory the process may use", "GOMEMLIMIT", "memory.max", "2 × "} {
				if !strings.Contains(text, want) {
					t.Errorf("%s of weir_flow_memory_ratio does not say %q: %s", what, want, text)
				}
			}
		}
		return
	}
	t.Fatal("no weir_flow_memory_ratio")
}
