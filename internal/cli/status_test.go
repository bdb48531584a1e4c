package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// runStatus runs weir status against a daemon whose /metrics answers
// metrics (and /live and /ready 200).
func runStatus(t *testing.T, metrics string) (out, errOut string, code int) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			w.Write([]byte(metrics))
		}
	}))
	defer srv.Close()
	var o, e bytes.Buffer
	code = Main([]string{"status", "--metrics-addr", strings.TrimPrefix(srv.URL, "http://")}, nil, &o, &e)
	return o.String(), e.String(), code
}

// TestStatusShowsSecondaries: weir status prints a line per secondary,
// saying loudly which one is not durable, with its health when polled.
func TestStatusShowsSecondaries(t *testing.T) {
	const body = `# TYPE weir_secondary_durable gauge
weir_secondary_durable{sink="fast"} 0
weir_secondary_durable{sink="copy"} 1
# TYPE weir_secondary_coverage_end gauge
weir_secondary_coverage_end{sink="copy"} 120
weir_secondary_coverage_end{sink="fast"} 100
# TYPE weir_secondary_lag_positions gauge
weir_secondary_lag_positions{sink="copy"} 0
weir_secondary_lag_positions{sink="fast"} 20
# TYPE weir_secondary_health gauge
weir_secondary_health{sink="copy",state="healthy"} 0
weir_secondary_health{sink="copy",state="degraded"} 1
weir_secondary_health{sink="copy",state="down"} 0
# TYPE weir_sink_health gauge
weir_sink_health{sink="file",state="healthy"} 1
# TYPE weir_sink_commit_duration_seconds histogram
weir_sink_commit_duration_seconds_bucket{sink="file",result="ok",le="+Inf"} 4
weir_sink_commit_duration_seconds_sum{sink="file",result="ok"} 0.1
weir_sink_commit_duration_seconds_count{sink="file",result="ok"} 4
# TYPE weir_sink_commit_records_total counter
weir_sink_commit_records_total{sink="file",result="ok"} 400
# TYPE weir_freshness_seconds histogram
weir_freshness_seconds_bucket{sink="file",le="0.01"} 0
weir_freshness_seconds_bucket{sink="file",le="1"} 100
weir_freshness_seconds_bucket{sink="file",le="+Inf"} 100
weir_freshness_seconds_sum{sink="file"} 50
weir_freshness_seconds_count{sink="file"} 100
weir_freshness_seconds_bucket{sink="copy",le="0.01"} 10
weir_freshness_seconds_bucket{sink="copy",le="+Inf"} 10
weir_freshness_seconds_sum{sink="copy"} 0.05
weir_freshness_seconds_count{sink="copy"} 10
`
	got, errOut, code := runStatus(t, body)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, got, errOut)
	}
	for _, w := range []string{
		"commits:      4, 100.0 records per commit; fresh p50 ",
		"secondary copy: durable; coverage 120, lag 0 positions; degraded; fresh p50 ",
		"secondary fast: NOT durable (durable = false",
		"coverage 100, lag 20 positions",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("status lacks %q:\n%s", w, got)
		}
	}
	if strings.Index(got, "secondary copy") > strings.Index(got, "secondary fast") {
		t.Errorf("secondaries not in name order:\n%s", got)
	}
}

// TestStatusShowsContracts: a line per stream with a contract — outcomes,
// the reject ratio, an open breaker and a dedup store that cannot answer
// said loudly.
func TestStatusShowsContracts(t *testing.T) {
	const body = `# TYPE weir_sink_health gauge
weir_sink_health{sink="file",state="healthy"} 1
# TYPE weir_contract_reject_ratio gauge
weir_contract_reject_ratio{source="socket"} -1
weir_contract_reject_ratio{source="orders"} 0.125
# TYPE weir_contract_records_total counter
weir_contract_records_total{code="",outcome="pass",source="orders"} 70
weir_contract_records_total{code="dq",outcome="reject",source="orders"} 6
weir_contract_records_total{code="decode",outcome="reject",source="orders"} 4
weir_contract_records_total{code="",outcome="duplicate",source="orders"} 3
weir_contract_records_total{code="",outcome="pass",source="socket"} 5
# TYPE weir_contract_breaker_open gauge
weir_contract_breaker_open{source="orders"} 1
weir_contract_breaker_open{source="socket"} 0
# TYPE weir_dedup_degraded gauge
weir_dedup_degraded{source="orders"} 1
# TYPE weir_dedup_dropped_total counter
weir_dedup_dropped_total{source="orders"} 3
weir_dedup_dropped_total{source="socket"} 0
`
	got, errOut, code := runStatus(t, body)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, got, errOut)
	}
	for _, w := range []string{
		"contract orders: pass 70, warn 0, reject 10, duplicate 3; rejects over window 12.5%; BREAKER OPEN: source paused; dedup dropped 3 (STORE UNREACHABLE: duplicates pass)",
		"contract socket: pass 5, warn 0, reject 0, duplicate 0; rejects over window -\n",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("status lacks %q:\n%s", w, got)
		}
	}
}

func TestStatusShowsCoordination(t *testing.T) {
	const body = `# TYPE weir_sink_health gauge
weir_sink_health{sink="file",state="healthy"} 1
# TYPE weir_coordination_members gauge
weir_coordination_members 3
# TYPE weir_coordination_role gauge
weir_coordination_role{role="learner"} 0
weir_coordination_role{role="quorum"} 1
weir_coordination_role{role="worker"} 0
# TYPE weir_coordination_member gauge
weir_coordination_member{member="weir-1",state="leader"} 1
weir_coordination_member{member="weir-0",state="voter"} 1
weir_coordination_member{member="weir-2",state="departed"} 1
# TYPE weir_recovery_leases_held gauge
weir_recovery_leases_held{sink="pg"} 1
# TYPE weir_recovery_windows_unclaimed gauge
weir_recovery_windows_unclaimed{sink="pg"} 7
`
	out, _, _ := runStatus(t, body)
	want := "coordination: role quorum; 3 voting members: weir-0, weir-1 (leader), weir-2 (departed); recovery leases held 1, windows unclaimed 7"
	if !strings.Contains(out, want) {
		t.Errorf("status lacks %q:\n%s", want, out)
	}
	out, _, _ = runStatus(t, "# TYPE weir_sink_health gauge\nweir_sink_health{sink=\"file\",state=\"healthy\"} 1\n")
	if strings.Contains(out, "coordination") {
		t.Errorf("status shows coordination with coordination off:\n%s", out)
	}
}

// The health line carries /ready's degraded reason, so `weir status`
// says why a ready daemon is not delivering.
func TestVerdictDegraded(t *testing.T) {
	tests := []struct {
		code int
		body string
		want string
	}{
		{200, "ready\n", "ready"},
		{200, "ready, degraded: sink down (postgres, for 3s): connection refused\n", "ready, DEGRADED (sink down (postgres, for 3s): connection refused)"},
		{503, "not ready: shutting down\n", "NOT ready (503: not ready: shutting down)"},
		{0, "", "NOT ready (no answer)"},
	}
	for _, tc := range tests {
		if got := verdict("ready", tc.code, tc.body); got != tc.want {
			t.Errorf("verdict(%d, %q) = %q, want %q", tc.code, tc.body, got, tc.want)
		}
	}
}

// TestStatusShowsHTTP: the HTTP door's listener, its counts and its
// refusals by reason; nothing when it does not listen.
func TestStatusShowsHTTP(t *testing.T) {
	const body = `# TYPE weir_sink_health gauge
weir_sink_health{sink="file",state="healthy"} 1
# TYPE weir_http_listener gauge
weir_http_listener{addr="127.0.0.1:9186",scheme="http",stream="http"} 1
# TYPE weir_http_requests_total counter
weir_http_requests_total{route="/v1/records",code="200"} 7
weir_http_requests_total{route="/v1/records",code="429"} 2
# TYPE weir_http_received_records_total counter
weir_http_received_records_total 40
# TYPE weir_http_refused_total counter
weir_http_refused_total{reason="overloaded"} 2
weir_http_refused_total{reason="decode"} 0
`
	for _, tc := range []struct {
		name, body, want string
	}{
		{"listening", body, "http:         http://127.0.0.1:9186 (stream http); 9 requests, 40 records accepted, 2 refused (overloaded 2)"},
		{"off", "# TYPE weir_sink_health gauge\nweir_sink_health{sink=\"file\",state=\"healthy\"} 1\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, _ := runStatus(t, tc.body)
			if tc.want == "" {
				if strings.Contains(got, "http:") {
					t.Errorf("status shows an HTTP door that does not listen:\n%s", got)
				}
				return
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("status lacks %q:\n%s", tc.want, got)
			}
		})
	}
}

// TestStatusShowsDamagedSegments: damaged segments kept on disk are said
// loudly, with what to run, and make the exit code 1; none, nothing said.
func TestStatusShowsDamagedSegments(t *testing.T) {
	const healthy = "# TYPE weir_sink_health gauge\nweir_sink_health{sink=\"file\",state=\"healthy\"} 1\n"
	for _, tc := range []struct {
		name    string
		damaged string
		code    int
	}{{"none", "0", 0}, {"two", "2", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			body := healthy + "# TYPE weir_segments_damaged gauge\nweir_segments_damaged " + tc.damaged + "\n"
			got, errOut, code := runStatus(t, body)
			if code != tc.code {
				t.Fatalf("exit %d, want %d:\n%s%s", code, tc.code, got, errOut)
			}
			if tc.code == 0 {
				if strings.Contains(got, "DAMAGED") {
					t.Fatalf("status reports damage with none:\n%s", got)
				}
				return
			}
			for _, w := range []string{"DAMAGED:      2 sealed segments set aside", "`weir verify`", "`weir repair --salvage`", "docs/operations/alerts.md#weirsegmentdamaged"} {
				if !strings.Contains(got, w) {
					t.Errorf("status lacks %q:\n%s", w, got)
				}
			}
		})
	}
}
