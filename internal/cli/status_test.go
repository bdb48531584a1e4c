package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

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
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			w.Write([]byte(body))
		}
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	code := Main([]string{"status", "--metrics-addr", strings.TrimPrefix(srv.URL, "http://")}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	got := out.String()
	for _, w := range []string{
		"secondary copy: durable; coverage 120, lag 0 positions; degraded",
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
