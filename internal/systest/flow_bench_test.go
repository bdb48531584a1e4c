package systest

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// Benchmarks of flow control (docs/benchmarks.md, "Flow control"); each
// prints BENCH lines. scripts/flowbench.sh runs them and BenchmarkAdmission
// (admission on vs off), with the binary from before flow control for the
// overload's baseline.

// BenchmarkFlowOverloadRSS: the overload scenario of
// TestOverloadMemoryBound (64 producers, 64 KiB records, windows of 256,
// a 64 MiB budget, the primary's Postgres connection stalled, a slow
// secondary) for WEIR_OVERLOAD_SECONDS (default 10), on this tree's binary
// and — when WEIR_BASE_BIN names one, built with -tags faultinject — on a
// binary from before flow control (no flow flags). It reports each one's
// peak RSS, its idle RSS, the pushes acked and refused, the longest wait
// for an answer, and the time the sink took to receive every acked record
// once it returned.
func BenchmarkFlowOverloadRSS(b *testing.B) {
	dur := envDuration(b, "WEIR_OVERLOAD_SECONDS", 10*time.Second)
	type variant struct {
		name string
		o    overloadOpts
	}
	vs := []variant{{"flow", overloadOpts{budget: 64 << 20, dur: dur, window: 256, wabDelay: 40 * time.Millisecond}}}
	if base := os.Getenv("WEIR_BASE_BIN"); base != "" {
		vs = append(vs, variant{"base", overloadOpts{budget: 64 << 20, dur: dur, window: 256, wabDelay: 40 * time.Millisecond,
			bin: base, noFlow: true}})
	}
	for range b.N {
		for _, v := range vs {
			r := runOverload(b, v.o)
			refused := 0
			for k, n := range r.answers {
				if k != "ok" {
					refused += n
				}
			}
			benchLine(b, map[string]any{"name": "flow/overload_rss/" + v.name, "peak_rss_mib": float64(r.peak) / (1 << 20),
				"idle_rss_mib": float64(r.idle) / (1 << 20), "budget_mib": float64(r.budget) / (1 << 20),
				"seconds": r.duration.Seconds(), "pushed": r.pushed, "acked": len(r.acked), "refused": refused,
				"answers": r.answers, "max_wait_s": r.maxWait.Seconds(), "drained_s": r.drained.Seconds()})
			b.ReportMetric(float64(r.peak)/(1<<20), v.name+"-peak-MiB")
		}
	}
}

// BenchmarkFlowSinkRecovery: time from a sink's return to full throughput.
// Eight Durable producers (1 KiB records, batches of 32) offer 8,000
// records a second together to a daemon whose Postgres secondary sits
// behind a proxy; after a steady phase (its ingest rate is the reference)
// the proxy stalls for 10 s and resumes. Reported: the ingest rate during
// the stall, and the time from the resume until the ingest rate is back
// at 90 % of the reference for 3 seconds running, until the state is
// Normal again, and until the secondary has caught up (its lag 0), with
// the default hysteresis and without it (flow.recovery_hold = 0,
// flow.recovery_time = 0).
func BenchmarkFlowSinkRecovery(b *testing.B) {
	for _, v := range []struct {
		name  string
		extra []string
	}{
		{"hysteresis", nil},
		{"no_hysteresis", []string{"--flow-recovery-hold", "0s", "--flow-recovery-time", "0s"}},
	} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				sinkRecoveryOnce(b, v.name, v.extra)
			}
		})
	}
}

func sinkRecoveryOnce(b *testing.B, name string, extra []string) {
	const (
		steady = 8 * time.Second
		stall  = 10 * time.Second
		limit  = 3 * time.Minute
	)
	db := newPGTable(b, "weir_flowrec")
	cfg := writeConfig(b, pgSecondaryTOML(db.via, db.table, "", `timeout = "1m"`))
	d := newDaemon(b, append([]string{"--config", cfg, "--memory-budget", "64MiB", "--log-level", "warn",
		"--coverage-flush-interval", "100ms"}, extra...)...)
	d.start()
	defer d.stop(30 * time.Second)
	ingest := d.sampleRate(time.Second, "weir_records_acked_total")
	var acked, refused atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	producers := steadyProducers(ctx, d.socket, 8, 8000, &acked, &refused)
	defer func() { cancel(); producers.Wait() }()

	time.Sleep(steady)
	n := len(ingest.counts())
	ref := median(ingest.rates()[n/2:]) // the second half: past the start-up
	db.proxy.Stall()
	time.Sleep(stall)
	during := ingest.rates()[n:]
	db.proxy.Resume()
	resumed := time.Now()
	var full, normal, caughtUp time.Duration = -1, -1, -1
	run := 0
	seen := len(ingest.rates())
	for time.Since(resumed) < limit && (full < 0 || normal < 0 || caughtUp < 0) {
		time.Sleep(250 * time.Millisecond)
		rs := ingest.rates()
		for ; seen < len(rs); seen++ {
			if rs[seen] >= 0.9*ref {
				run++
			} else {
				run = 0
			}
			if run >= 3 && full < 0 {
				full = time.Since(resumed) - 3*time.Second
			}
		}
		m, err := d.tryScrape()
		if err != nil {
			b.Fatal(err)
		}
		if normal < 0 && m[`weir_flow_state{state="normal"}`] == 1 {
			normal = time.Since(resumed)
		}
		if caughtUp < 0 && m[`weir_secondary_missing_positions{sink="pg"}`] == 0 {
			caughtUp = time.Since(resumed)
		}
	}
	cancel()
	producers.Wait()
	ingest.finish()
	secs := func(d time.Duration) float64 {
		if d < 0 {
			return -1 // not reached within the limit
		}
		return d.Seconds()
	}
	benchLine(b, map[string]any{"name": "flow/sink_recovery/" + name, "reference_records_per_s": ref,
		"during_stall_records_per_s": median(during), "full_throughput_s": secs(full), "normal_s": secs(normal),
		"caught_up_s": secs(caughtUp), "refused": refused.Load()})
	b.ReportMetric(secs(full), "full-throughput-s")
	b.ReportMetric(secs(normal), "normal-s")
}
