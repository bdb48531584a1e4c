package systest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
)

// TestOversizeDuringWarmup: a daemon restarts against a buffer holding a
// 6 MiB record between small ones. Its budget is 16 MiB, warming up from a
// quarter (4 MiB grantable, and no step up during the test): the big
// record would fit the full budget but not what is grantable now, so the
// drain dead-letters it at once with code oversize instead of waiting —
// and the records behind it are delivered.
func TestOversizeDuringWarmup(t *testing.T) {
	const big = 6 << 20
	// The records reach the buffer through a daemon whose sink never
	// finishes a write; it is killed with everything undelivered.
	d := newDaemon(t, "--max-frame-bytes", "8MiB", "--shards", "1")
	d.env = []string{"WEIR_FAULTS=write:*/out/*:delay=1h"}
	d.start()
	var recs [][]byte
	for i := range 10 {
		recs = append(recs, []byte(fmt.Sprintf("before-%02d", i)))
	}
	recs = append(recs, bigRecords("big", 1, big)...)
	for i := range 10 {
		recs = append(recs, []byte(fmt.Sprintf("after-%02d", i)))
	}
	pushAcked(t, d.socket, recs, client.WithMaxFrameBytes(8<<20))
	d.kill()

	d.env = nil
	// The budget must be at least 4 × max_frame_bytes: frames are back to
	// the default cap (4 MiB), the buffer keeps the 6 MiB record.
	d.args = append(d.args, "--max-frame-bytes", "4MiB", "--memory-budget", "16MiB", "--flow-warmup-percent", "25",
		"--flow-warmup-acks", "1000000", "--flow-warmup-timeout", "1h")
	d.start()
	want := map[string]bool{}
	for _, r := range recs {
		if len(r) < big {
			want[string(r)] = true
		}
	}
	got := waitDelivered(t, d, want, 60*time.Second)
	for p := range got {
		if len(p) >= big {
			t.Fatalf("the %d-byte record was delivered during warm-up", len(p))
		}
	}
	m := d.waitScrape("the big record dead-lettered", 30*time.Second, func(m map[string]float64) bool {
		return m[`weir_dead_letter_records_total{code="oversize"}`] >= 1 && m["weir_memory_budget_bytes"] > 0 // sampled
	})
	if n := m[`weir_dead_letter_records_total{code="oversize"}`]; n != 1 {
		t.Errorf("%v records dead-lettered oversize, want 1", n)
	}
	if g, l := m["weir_memory_budget_grantable_bytes"], m["weir_memory_budget_bytes"]; g >= big || l <= big {
		t.Errorf("grantable %v of %v: the record was not judged during warm-up", g, l)
	}
	if n := sum(m, "weir_flow_oversize_total"); n < 1 {
		t.Errorf("weir_flow_oversize_total = %v", n)
	}
	out, _, code := weirCmd(t, nil, "deadletter", "show", "--wab-dir", d.wabDir(), "--all", "--code", "oversize", "--max-payload", "20")
	if code != 0 || !strings.Contains(out, "big-0000|") {
		t.Fatalf("deadletter show --code oversize: exit %d\n%s", code, tail(out, 2000))
	}
	t.Logf("the %d MiB record dead-lettered (oversize) during warm-up (grantable %s of %s); the 20 others delivered",
		big>>20, mib(m["weir_memory_budget_grantable_bytes"]), mib(m["weir_memory_budget_bytes"]))
}
