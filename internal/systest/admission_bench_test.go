package systest

import (
	"fmt"
	"os"
	"testing"

	"github.com/weir-io/weir/client"
)

// BenchmarkAdmission measures what byte-budget admission costs the socket
// ingest path: the same producers against the real binary with
// flow.admission on (every frame reserves its memory from the budget) and
// off, in one run. Each iteration runs both, each against a fresh daemon,
// in an order that alternates from one pair to the next (the second run
// of a pair is faster on this machine whatever it measures); it reports
// both rates, the pair's ratio on/off, and the daemon's CPU time per
// record on/off (steadier than the rate on a shared machine). BENCH lines
// carry each run.
//
//	go test -run '^$' -bench Admission -benchtime 1x -count 10 ./internal/systest
func BenchmarkAdmission(b *testing.B) {
	records := 200_000
	if s := os.Getenv("WEIR_BENCH_RECORDS"); s != "" {
		fmt.Sscan(s, &records)
	}
	for _, c := range []struct {
		tier             client.Durability
		batch, producers int
	}{
		{client.Buffered, 1, 16},
		{client.Buffered, 64, 16},
		{client.Durable, 1, 64},
	} {
		setting := settingName(c.tier, c.batch, c.producers)
		b.Run(setting, func(b *testing.B) {
			for range b.N {
				r := map[bool]ingestResult{}
				for _, on := range pairOrder(&admissionPairs) {
					name := fmt.Sprintf("admission/%s/admission=%v", setting, on)
					r[on] = ingestDaemon(b, []string{fmt.Sprintf("--flow-admission=%v", on)}, name, c.tier, c.batch, c.producers, records, false)
				}
				b.ReportMetric(r[false].rate, "off-records/s")
				b.ReportMetric(r[true].rate, "on-records/s")
				b.ReportMetric(r[true].rate/r[false].rate, "on/off")
				b.ReportMetric(r[true].daemonCPU/r[false].daemonCPU, "cpu-on/off")
			}
		})
	}
}

// admissionPairs counts BenchmarkAdmission's pairs, to alternate their
// order.
var admissionPairs int
