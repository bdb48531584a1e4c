package systest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkFlightVsSocket: one daemon, one run, Durable, the same disk:
// the producer socket with 64 connections pushing frames of 64 records
// of 256 bytes (socketLoad), then the Flight source with 8 arrow-go
// DoPut streams of batches of 1,024 rows whose payloads are about 256
// bytes, each stream keeping WEIR_FLIGHT_BENCH_WINDOW (default 4) batches
// unacknowledged. Each for WEIR_FLIGHT_BENCH_SECONDS (default 5). It
// prints a BENCH line per door: records (rows) acknowledged per second,
// p50 / p99 of a frame's or batch's acknowledgement, and the daemon's CPU
// µs per record.
func BenchmarkFlightVsSocket(b *testing.B) {
	secs := envDuration(b, "WEIR_FLIGHT_BENCH_SECONDS", 5*time.Second)
	window := envInt(b, "WEIR_FLIGHT_BENCH_WINDOW", 4)
	const streams, rows = 8, 1024
	// {"id":N,"body":"…"}: 20 bytes of JSON around the body, ~256 in all.
	batch := ordersBatch(b, 0, rows, 256-28)
	defer batch.Release()
	rec := payload256()
	for range b.N {
		d, addr := flightDaemon(b, nil, "", "--log-level", "warn")
		pid := d.cmd.Process.Pid

		cpu0 := procCPU(pid)
		n, lat := socketLoad(b, d.socket, 64, 64, rec, secs)
		benchLine(b, flightBenchFields("socket_64x64", n, lat, procCPU(pid)-cpu0, secs))

		cpu0 = procCPU(pid)
		c := flightClient(b, addr)
		ctx, cancel := context.WithTimeout(context.Background(), secs)
		var acked atomic.Int64
		var mu sync.Mutex
		var all []time.Duration
		var wg sync.WaitGroup
		for s := range streams {
			wg.Go(func() {
				call, err := openPut(context.Background(), c, ordersSchema, "orders", fmt.Sprintf("bench-%d", s))
				if err != nil {
					b.Error(err)
					return
				}
				sentAt := make(chan time.Time, window)
				counted := make(chan struct{})
				go func() {
					defer close(counted)
					var lat []time.Duration
					for range call.acks {
						lat = append(lat, time.Since(<-sentAt))
						acked.Add(rows)
					}
					mu.Lock()
					all = append(all, lat...)
					mu.Unlock()
				}()
				for seq := uint64(0); ctx.Err() == nil; seq++ {
					sentAt <- time.Now() // waits while window batches are unacknowledged
					if err := call.Send(batch, seq); err != nil {
						b.Error(err)
						break
					}
				}
				if err := call.Close(); err != nil {
					b.Error(err)
				}
				<-counted
			})
		}
		wg.Wait()
		cancel()
		mu.Lock()
		benchLine(b, flightBenchFields(fmt.Sprintf("flight_%dx%d", streams, rows), int(acked.Load()), all, procCPU(pid)-cpu0, secs))
		mu.Unlock()
		d.stop(30 * time.Second)
	}
}

func flightBenchFields(name string, n int, lat []time.Duration, cpu float64, d time.Duration) map[string]any {
	qs := quantiles(lat) // µs
	return map[string]any{"name": "flight_vs_socket/" + name, "records_per_s": float64(n) / d.Seconds(),
		"p50_ms": qs[0] / 1000, "p99_ms": qs[1] / 1000, "cpu_us_per_record": cpu * 1e6 / float64(max(1, n))}
}
