package statuspage

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/readout"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// base is a node's metrics before the window: names every series the
// page reads, with the values of 10 s earlier.
const base = `# TYPE weir_build_info gauge
weir_build_info{goversion="go1.26.8",revision="abc123",version="v1.2.3"} 1
# TYPE weir_flow_state gauge
weir_flow_state{state="normal"} 1
weir_flow_state{state="degraded"} 0
weir_flow_state{state="critical"} 0
weir_flow_state{state="recovery"} 0
# TYPE weir_flow_stuck_stage gauge
weir_flow_stuck_stage{stage="clear"} 1
weir_flow_stuck_stage{stage="warn"} 0
# TYPE weir_memory_budget_bytes gauge
weir_memory_budget_bytes 1048576
# TYPE weir_memory_budget_in_use_bytes gauge
weir_memory_budget_in_use_bytes 262144
# TYPE weir_source_records_written_total counter
weir_source_records_written_total{source="socket"} 1000
weir_source_records_written_total{source="web"} 0
weir_source_records_written_total{source="orders"} 50
# TYPE weir_source_running gauge
weir_source_running{source="orders"} 1
# TYPE weir_flow_source_paused gauge
weir_flow_source_paused{source="orders"} 0
# TYPE weir_bytes_received_total counter
weir_bytes_received_total{durability="durable"} 100000
# TYPE weir_http_received_bytes_total counter
weir_http_received_bytes_total 0
# TYPE weir_http_listener gauge
weir_http_listener{addr="127.0.0.1:8080",scheme="http",stream="web"} 1
# TYPE weir_fdatasync_duration_seconds histogram
weir_fdatasync_duration_seconds_bucket{le="0.001"} 10
weir_fdatasync_duration_seconds_bucket{le="0.01"} 10
weir_fdatasync_duration_seconds_bucket{le="+Inf"} 10
weir_fdatasync_duration_seconds_sum 0.005
weir_fdatasync_duration_seconds_count 10
# TYPE weir_wab_segments gauge
weir_wab_segments 2
# TYPE weir_wab_bytes gauge
weir_wab_bytes 2048
# TYPE weir_wab_written_bytes_total counter
weir_wab_written_bytes_total 0
# TYPE weir_shard_failed gauge
weir_shard_failed{shard="0"} 0
weir_shard_failed{shard="1"} 0
# TYPE weir_drain_state gauge
weir_drain_state{state="idle"} 0
weir_drain_state{state="draining"} 1
# TYPE weir_sink_health gauge
weir_sink_health{sink="postgres",state="healthy"} 1
weir_sink_health{sink="postgres",state="degraded"} 0
weir_sink_health{sink="postgres",state="down"} 0
# TYPE weir_sink_commit_records_total counter
weir_sink_commit_records_total{result="ok",sink="postgres"} 900
# TYPE weir_sink_commit_duration_seconds histogram
weir_sink_commit_duration_seconds_bucket{result="ok",sink="postgres",le="0.01"} 9
weir_sink_commit_duration_seconds_bucket{result="ok",sink="postgres",le="+Inf"} 9
weir_sink_commit_duration_seconds_sum{result="ok",sink="postgres"} 0.02
weir_sink_commit_duration_seconds_count{result="ok",sink="postgres"} 9
weir_sink_commit_duration_seconds_bucket{result="transient",sink="postgres",le="0.01"} 0
weir_sink_commit_duration_seconds_bucket{result="transient",sink="postgres",le="+Inf"} 0
weir_sink_commit_duration_seconds_sum{result="transient",sink="postgres"} 0
weir_sink_commit_duration_seconds_count{result="transient",sink="postgres"} 0
# TYPE weir_secondary_durable gauge
weir_secondary_durable{sink="copy"} 1
# TYPE weir_secondary_delivered_records_total counter
weir_secondary_delivered_records_total{path="live",sink="copy"} 100
# TYPE weir_secondary_lag_positions gauge
weir_secondary_lag_positions{sink="copy"} 7
# TYPE weir_quarantined_records_total counter
weir_quarantined_records_total{code="decode"} 0
weir_quarantined_records_total{code="oversize"} 2
# TYPE weir_dead_letter_bytes gauge
weir_dead_letter_bytes 900
# TYPE weir_dead_letter_max_bytes gauge
weir_dead_letter_max_bytes 1000
`

// edits replaces whole lines of base (by their series name and labels).
func edits(s string, lines ...string) string {
	for _, l := range lines {
		key := l[:strings.LastIndexByte(l, ' ')+1]
		i := strings.Index(s, "\n"+key)
		if i < 0 {
			s += l + "\n"
			continue
		}
		j := strings.IndexByte(s[i+1:], '\n')
		s = s[:i+1] + l + s[i+1+j:]
	}
	return s
}

func parse(t *testing.T, text string) readout.Set {
	t.Helper()
	s, err := readout.Parse(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	return s
}

// later is base 10 s on: 2000 socket records (1 MB), the primary failing
// since its last success, the secondary healthy.
var later = edits(base,
	`weir_source_records_written_total{source="socket"} 3000`,
	`weir_source_records_written_total{source="orders"} 60`,
	`weir_bytes_received_total{durability="durable"} 1100000`,
	`weir_fdatasync_duration_seconds_bucket{le="0.001"} 10`,
	`weir_fdatasync_duration_seconds_bucket{le="0.01"} 20`,
	`weir_fdatasync_duration_seconds_bucket{le="+Inf"} 20`,
	`weir_fdatasync_duration_seconds_count 20`,
	`weir_sink_commit_duration_seconds_bucket{result="transient",sink="postgres",le="0.01"} 0`,
	`weir_sink_commit_duration_seconds_bucket{result="transient",sink="postgres",le="+Inf"} 3`,
	`weir_sink_commit_duration_seconds_count{result="transient",sink="postgres"} 3`,
	`weir_secondary_delivered_records_total{path="live",sink="copy"} 150`,
	`weir_quarantined_records_total{code="oversize"} 4`,
)

func TestBuild(t *testing.T) {
	ring := NewLogRing(8)
	ring.add(LogEntry{Time: t0, Level: "WARN", Msg: "transient sink error, retrying", Sink: "raw",
		Attrs: `component=drain sink=raw err="timeout: context deadline exceeded"`})
	type check struct {
		what      string
		got, want any
	}
	type testCase = struct {
		name, base, recent, now string // base "": no earlier reading; recent "": the base
		health                  healthState
		checks                  func(s Snapshot) []check
	}
	tests := []testCase{
		{"first reading: no rates yet", "", "", base, healthState{}, func(s Snapshot) []check {
			return []check{
				{"window", s.Window, 0.0},
				{"socket records/s", s.Sources[1].Records, -1.0},
				{"flow state", s.Flow.State, "normal"},
				{"flow level", s.Flow.Level, levelOK},
				{"budget ratio", s.Flow.InUseRatio, 0.25},
				{"version", s.Node.Version, "v1.2.3"},
				{"sink health", s.Sinks[0].Health, "healthy"},
				{"sink level", s.Sinks[0].Level, levelOK},
				{"sync p50 over all time", s.Latency.SyncP50, 0.0005},
				{"http p50 without observations", s.Latency.HTTPP50, -1.0},
				{"no coordination", s.Coordination.On, false},
				{"damaged: a dash without the gauge", s.Buffer.Damaged, -1.0},
				{"dead letter fill", s.Quarantine.DeadLetterFill, 0.9},
				{"quarantine level near full", s.Quarantine.Level, levelWarn},
			}
		}},
		{"rates over the window", base, "", later, healthState{}, func(s Snapshot) []check {
			return []check{
				{"window", s.Window, 10.0},
				{"sources in name order", []string{s.Sources[0].Name, s.Sources[1].Name, s.Sources[2].Name}, []string{"orders", "socket", "web"}},
				{"socket records/s", s.Sources[1].Records, 200.0},
				{"socket bytes/s", s.Sources[1].Bytes, 100000.0},
				{"orders bytes/s not measured", s.Sources[0].Bytes, -1.0},
				{"web bytes/s from the HTTP door", s.Sources[2].Bytes, 0.0},
				{"sync p50 in the window only", s.Latency.SyncP50, 0.0055},
				{"primary role with a secondary", s.Sinks[0].Role, "primary raw"},
				{"primary failing", s.Sinks[0].Health, "healthy, commits failing"},
				{"primary level", s.Sinks[0].Level, levelWarn},
				{"primary failures/s", s.Sinks[0].Failures, 0.3},
				{"primary commits/s", s.Sinks[0].Commits, 0.0},
				{"primary lag", s.Sinks[0].Lag, "in the buffer: 2.0 KiB"},
				{"primary last error", s.Sinks[0].LastError, "12:00:00Z transient sink error, retrying: timeout: context deadline exceeded"},
				{"secondary: none logged", s.Sinks[1].LastError, ""},
				{"secondary records/s", s.Sinks[1].Records, 5.0},
				{"secondary lag", s.Sinks[1].Lag, "7 positions"},
				{"secondary health before a poll", s.Sinks[1].Health, readout.Dash},
				{"oversize rate", s.Codes[1].Rate, 0.2},
				{"oversize level", s.Codes[1].Level, levelWarn},
				{"decode level", s.Codes[0].Level, levelIdle},
			}
		}},
		{"degraded, a shard failed, not ready", base, "", edits(later,
			`weir_flow_state{state="normal"} 0`, `weir_flow_state{state="degraded"} 1`,
			`weir_shard_failed{shard="1"} 1`,
			`weir_sink_health{sink="postgres",state="healthy"} 0`, `weir_sink_health{sink="postgres",state="down"} 1`,
			`weir_flow_source_paused{source="orders"} 1`,
		), healthState{ready: errors.New("shutting down"), degraded: "sink down"}, func(s Snapshot) []check {
			return []check{
				{"flow state", s.Flow.State, "degraded"},
				{"flow level", s.Flow.Level, levelWarn},
				{"shards", s.Buffer.Shards, "2, FAILED: 1 (restart to recover)"},
				{"buffer level", s.Buffer.Level, levelBad},
				{"sink down", s.Sinks[0].Health, "down, commits failing"},
				{"sink level", s.Sinks[0].Level, levelBad},
				{"orders paused", s.Sources[0].Status, "throttled: paused by flow control"},
				{"socket slowed", s.Sources[1].Status, "slowed: smaller batches"},
				{"ready text", s.Health.ReadyText, "not ready: shutting down"},
				{"health level", s.Health.Level, levelWarn},
				{"degraded", s.Health.Degraded, "sink down"},
			}
		}},
		{"critical, stuck, not live", base, "", edits(later,
			`weir_flow_state{state="normal"} 0`, `weir_flow_state{state="critical"} 1`,
			`weir_flow_stuck_stage{stage="clear"} 0`, `weir_flow_stuck_stage{stage="warn"} 1`,
		), healthState{live: errors.New("drain busy\nfor 2m")}, func(s Snapshot) []check {
			return []check{
				{"flow level", s.Flow.Level, levelBad},
				{"stuck", s.Flow.Stuck, "warn"},
				{"socket throttled", s.Sources[1].Status, "throttled: producers told to retry"},
				{"live text", s.Health.LiveText, "NOT live: drain busy; for 2m"},
				{"health level", s.Health.Level, levelBad},
			}
		}},
		{"coordination and the damaged gauge", base, "", edits(later,
			"# TYPE weir_coordination_members gauge\nweir_coordination_members 3",
			"# TYPE weir_coordination_role gauge\nweir_coordination_role{role=\"quorum\"} 1",
			"# TYPE weir_coordination_member gauge\nweir_coordination_member{member=\"b\",state=\"voter\"} 1\nweir_coordination_member{member=\"a\",state=\"leader\"} 1\nweir_coordination_member{member=\"c\",state=\"learner\"} 1\nweir_coordination_member{member=\"d\",state=\"voter\"} 0",
			"# TYPE weir_recovery_leases_held gauge\nweir_recovery_leases_held{sink=\"copy\"} 1",
			"# TYPE weir_recovery_windows_unclaimed gauge\nweir_recovery_windows_unclaimed{sink=\"copy\"} 4",
			"# TYPE "+damagedMetric+" gauge\n"+damagedMetric+" 1",
		), healthState{}, func(s Snapshot) []check {
			return []check{
				{"on", s.Coordination.On, true},
				{"role", s.Coordination.Role, "quorum"},
				{"leader", s.Coordination.Leader, "a"},
				{"list", s.Coordination.List, "a (leader), b, c (learner)"},
				{"leases", s.Coordination.LeasesHeld, 1.0},
				{"level", s.Coordination.Level, levelOK},
				{"recovery", s.Sinks[1].Recovery, "missing 0, 4 windows unclaimed, 1 leases held"},
				{"damaged", s.Buffer.Damaged, 1.0},
				{"damaged makes the buffer bad", s.Buffer.Level, levelBad},
			}
		}},
	}
	// Commits succeeded early in the window, then only failed: failing,
	// though the window's commit rate is not zero; and a sink that failed
	// early and then committed is not.
	recovered := edits(later,
		`weir_sink_commit_duration_seconds_bucket{result="ok",sink="postgres",le="0.01"} 20`,
		`weir_sink_commit_duration_seconds_bucket{result="ok",sink="postgres",le="+Inf"} 20`,
		`weir_sink_commit_duration_seconds_count{result="ok",sink="postgres"} 20`)
	tests = append(tests,
		testCase{"failing in the last seconds", base, edits(base,
			`weir_sink_commit_duration_seconds_bucket{result="ok",sink="postgres",le="0.01"} 15`,
			`weir_sink_commit_duration_seconds_bucket{result="ok",sink="postgres",le="+Inf"} 15`,
			`weir_sink_commit_duration_seconds_count{result="ok",sink="postgres"} 15`), edits(later,
			`weir_sink_commit_duration_seconds_bucket{result="ok",sink="postgres",le="0.01"} 15`,
			`weir_sink_commit_duration_seconds_bucket{result="ok",sink="postgres",le="+Inf"} 15`,
			`weir_sink_commit_duration_seconds_count{result="ok",sink="postgres"} 15`), healthState{}, func(s Snapshot) []check {
			return []check{
				{"commits over the window", s.Sinks[0].Commits, 0.6},
				{"failing", s.Sinks[0].Health, "healthy, commits failing"},
				{"sinks level", s.Levels.Sinks, levelWarn},
			}
		}},
		testCase{"failed, then committed", base, later, recovered, healthState{}, func(s Snapshot) []check {
			return []check{
				{"not failing", s.Sinks[0].Health, "healthy"},
				{"level", s.Sinks[0].Level, levelOK},
				{"sources level", s.Levels.Sources, levelOK},
			}
		}},
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := inputs{info: Info{Host: "node-a", Started: t0.Add(-time.Hour), SinkLogName: "raw"},
				now: reading{at: t0.Add(10 * time.Second), set: parse(t, tt.now)}, health: tt.health, logs: ring, timeline: time.Minute}
			if tt.base != "" {
				in.base = reading{at: t0, set: parse(t, tt.base)}
				in.recent = in.base
			}
			if tt.recent != "" {
				in.recent = reading{at: t0.Add(8 * time.Second), set: parse(t, tt.recent)}
			}
			s := build(in)
			if s.Node.Uptime != 3610 {
				t.Errorf("uptime %v", s.Node.Uptime)
			}
			for _, c := range tt.checks(s) {
				if !equal(c.got, c.want) {
					t.Errorf("%s: %#v, want %#v", c.what, c.got, c.want)
				}
			}
		})
	}
}

func equal(a, b any) bool {
	if x, ok := a.(float64); ok {
		y, ok := b.(float64)
		return ok && (x == y || (x-y)*(x-y) < 1e-18)
	}
	if x, ok := a.([]string); ok {
		y, _ := b.([]string)
		return strings.Join(x, "|") == strings.Join(y, "|")
	}
	return a == b
}

func TestTimeline(t *testing.T) {
	var ps []point
	states := []string{"normal", "normal", "degraded", "degraded", "degraded", "critical", "normal"}
	for i, st := range states {
		ps = append(ps, point{at: t0.Add(time.Duration(i) * time.Second), state: st, budget: float64(i) / 10})
	}
	now := t0.Add(7 * time.Second)
	got := timeline(ps, now, 6*time.Second)
	want := []Run{{"normal", -6, -5}, {"degraded", -5, -2}, {"critical", -2, -1}, {"normal", -1, 0}}
	if len(got.Runs) != len(want) {
		t.Fatalf("runs %+v, want %+v (the point older than the span left out)", got.Runs, want)
	}
	for i := range want {
		if got.Runs[i] != want[i] {
			t.Errorf("run %d: %+v, want %+v", i, got.Runs[i], want[i])
		}
	}
	if got.Span != 6 || len(got.Budget) != 6 || got.Budget[0] != [2]float64{-6, 0.1} {
		t.Errorf("budget line %v over %v s", got.Budget, got.Span)
	}
	if line := budgetLine([][2]float64{{-6, 0.1}, {0, 1.5}}); line != "-6,90 0,0" {
		t.Errorf("polyline points %q", line)
	}
	if empty := timeline(nil, now, time.Minute); empty.Runs == nil || empty.Budget == nil {
		t.Error("an empty timeline encodes as empty lists, not null")
	}
}
