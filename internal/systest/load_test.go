package systest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/weir-io/weir/client"
)

// The load suite: scenarios beyond steady ingest. Each is a benchmark that
// prints a BENCH line (see bench_test.go) and is bounded in records and
// time.

// daemonRSS returns the daemon's peak resident set (VmHWM) in MiB.
func daemonRSS(d *daemon) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				kb, _ := strconv.ParseFloat(f[1], 64)
				return kb / 1024
			}
		}
	}
	return 0
}

func payload256() []byte {
	p := make([]byte, benchRecordBytes)
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return p
}

// BenchmarkLoadSingleProducer: one producer waiting for each Durable ack
// before the next push — the latency floor of one record.
func BenchmarkLoadSingleProducer(b *testing.B) {
	for range b.N {
		d := newDaemon(b, "--log-level", "warn")
		d.start()
		c, err := client.Dial(context.Background(), d.socket)
		if err != nil {
			b.Fatal(err)
		}
		const n = 3000
		lat := make([]time.Duration, 0, n)
		p := payload256()
		start := time.Now()
		for range n {
			t0 := time.Now()
			if err := c.Push(context.Background(), p, client.Durable); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		el := time.Since(start)
		c.Close(context.Background())
		d.stop(30 * time.Second)
		qs := quantiles(lat)
		benchLine(b, map[string]any{"name": "load/single_producer_sync", "records_per_s": n / el.Seconds(),
			"p50_us": qs[0], "p99_us": qs[1], "p999_us": qs[2]})
	}
}

// BenchmarkLoadThunderingHerd: 256 producers connect at the same instant
// and each pushes 200 Durable records.
func BenchmarkLoadThunderingHerd(b *testing.B) {
	for range b.N {
		d := newDaemon(b, "--log-level", "warn")
		d.start()
		const producers, each = 256, 200
		var wg sync.WaitGroup
		var failed atomic.Int64
		gate := make(chan struct{})
		l := newLedger()
		for i := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				produce(context.Background(), b, d.socket, fmt.Sprintf("herd%03d", i), each, 1, client.Durable, l, 30*time.Second)
			}()
		}
		start := time.Now()
		close(gate)
		wg.Wait()
		el := time.Since(start)
		acked := l.ackedCount()
		failed.Add(int64(producers*each - acked))
		rss := daemonRSS(d)
		d.stop(30 * time.Second)
		if failed.Load() > 0 {
			b.Fatalf("thundering herd: %d of %d records not acked (nacks %v)", failed.Load(), producers*each, l.nacked)
		}
		benchLine(b, map[string]any{"name": "load/thundering_herd_256", "records_per_s": float64(acked) / el.Seconds(),
			"seconds": el.Seconds(), "rss_mib": rss})
	}
}

// BenchmarkLoadConnectionChurn: 8 producers each connect, push 10 Durable
// records, close — 100 times.
func BenchmarkLoadConnectionChurn(b *testing.B) {
	for range b.N {
		d := newDaemon(b, "--log-level", "warn")
		d.start()
		const producers, rounds, each = 8, 100, 10
		var conns atomic.Int64
		var wg sync.WaitGroup
		p := payload256()
		start := time.Now()
		for range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					c, err := client.Dial(context.Background(), d.socket)
					if err != nil {
						b.Error(err)
						return
					}
					conns.Add(1)
					for range each {
						if err := c.Push(context.Background(), p, client.Durable); err != nil {
							b.Error(err)
						}
					}
					c.Close(context.Background())
				}
			}()
		}
		wg.Wait()
		el := time.Since(start)
		d.stop(30 * time.Second)
		benchLine(b, map[string]any{"name": "load/connection_churn", "connections_per_s": float64(conns.Load()) / el.Seconds(),
			"records_per_s": float64(conns.Load()*each) / el.Seconds()})
	}
}

// BenchmarkLoadOverload: 64 fire-and-forget producers with huge windows
// against a small queue and a short queue_timeout. They must get
// QueueTimeout Nacks (never a hang) while the daemon's memory stays bounded.
func BenchmarkLoadOverload(b *testing.B) {
	for range b.N {
		d := newDaemon(b, "--log-level", "warn", "--queue-capacity", "256", "--queue-timeout", "2ms")
		d.start()
		const producers = 64
		dur := 3 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), dur)
		var acked, nacked, timeouts atomic.Int64
		var wg sync.WaitGroup
		p := payload256()
		for range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := client.Dial(context.Background(), d.socket, client.WithWindow(8192))
				if err != nil {
					b.Error(err)
					return
				}
				for ctx.Err() == nil {
					err := c.PushAsync(ctx, [][]byte{p}, client.Durable, func(err error) {
						switch {
						case err == nil:
							acked.Add(1)
						case errors.Is(err, client.ErrQueueTimeout):
							timeouts.Add(1)
							nacked.Add(1)
						default:
							nacked.Add(1)
						}
					})
					if err != nil {
						break
					}
				}
				cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
				c.Close(cctx)
				ccancel()
			}()
		}
		wg.Wait()
		cancel()
		rss := daemonRSS(d)
		if err := d.stop(30 * time.Second); err != nil {
			b.Fatalf("daemon after overload: %v", err)
		}
		benchLine(b, map[string]any{"name": "load/overload_fire_and_forget", "records_per_s": float64(acked.Load()) / dur.Seconds(),
			"acked": acked.Load(), "nacked": nacked.Load(), "queue_timeouts": timeouts.Load(), "rss_mib": rss})
		b.ReportMetric(rss, "peak-RSS-MiB")
		b.ReportMetric(float64(timeouts.Load()), "QueueTimeout-nacks")
	}
}

// BenchmarkLoadSaturationRamp: Durable single-record producers doubling
// from 1 to 128; records/s and p99 at each step show where the daemon
// saturates.
func BenchmarkLoadSaturationRamp(b *testing.B) {
	for range b.N {
		d := newDaemon(b, "--log-level", "warn")
		d.start()
		p := payload256()
		for producers := 1; producers <= 128; producers *= 2 {
			dur := 700 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), dur)
			var mu sync.Mutex
			var lat []time.Duration
			var wg sync.WaitGroup
			for range producers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := client.Dial(context.Background(), d.socket, client.WithWindow(64))
					if err != nil {
						b.Error(err)
						return
					}
					for ctx.Err() == nil {
						t0 := time.Now()
						if c.PushAsync(ctx, [][]byte{p}, client.Durable, func(err error) {
							if err == nil {
								mu.Lock()
								lat = append(lat, time.Since(t0))
								mu.Unlock()
							}
						}) != nil {
							break
						}
					}
					c.Close(context.Background())
				}()
			}
			wg.Wait()
			cancel()
			qs := quantiles(lat)
			benchLine(b, map[string]any{"name": fmt.Sprintf("load/saturation_ramp/p%03d", producers),
				"records_per_s": float64(len(lat)) / dur.Seconds(), "p50_us": qs[0], "p99_us": qs[1], "p999_us": qs[2]})
		}
		d.stop(30 * time.Second)
	}
}

// quantiles returns p50, p99, p999 in microseconds.
func quantiles(lat []time.Duration) [3]float64 {
	if len(lat) == 0 {
		return [3]float64{}
	}
	s := append([]time.Duration(nil), lat...)
	sortDurations(s)
	at := func(f float64) float64 { return float64(s[int(f*float64(len(s)-1))].Microseconds()) }
	return [3]float64{at(0.5), at(0.99), at(0.999)}
}

// scrape fetches the daemon's /metrics as parsed families.
func scrape(tb testing.TB, d *daemon) map[string]*dto.MetricFamily {
	tb.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", d.metricsPort))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return fams
}

// histTotals sums a histogram family's sample sums and counts.
func histTotals(fams map[string]*dto.MetricFamily, name string) (sum float64, count uint64) {
	for _, m := range fams[name].GetMetric() {
		sum += m.GetHistogram().GetSampleSum()
		count += m.GetHistogram().GetSampleCount()
	}
	return sum, count
}

// recordsPerCommit is the mean number of records per Sink.Commit of the
// drain's sink, and the number of commits, from a scrape.
func recordsPerCommit(fams map[string]*dto.MetricFamily) (float64, uint64) {
	_, commits := histTotals(fams, "weir_sink_commit_duration_seconds")
	var committed float64
	for _, m := range fams["weir_sink_commit_records_total"].GetMetric() {
		committed += m.GetCounter().GetValue()
	}
	return committed / float64(max(commits, 1)), commits
}

// BenchmarkLoadRecordsPerCommit: 64 pipelined Durable producers; then, from
// the daemon's own metrics, how many records each fdatasync covered (group
// commit) and how many each sink commit carried.
func BenchmarkLoadRecordsPerCommit(b *testing.B) {
	for range b.N {
		d := newDaemon(b, "--log-level", "warn")
		d.start()
		ctx := context.Background()
		l := newLedger()
		var wg sync.WaitGroup
		for p := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				produce(ctx, b, d.socket, fmt.Sprintf("rpc%02d", p), 3000, 1, client.Durable, l, 30*time.Second)
			}()
		}
		wg.Wait()
		waitDelivered(b, d, l.snapshot(), 60*time.Second)
		fams := scrape(b, d)
		recs, batches := histTotals(fams, "weir_batch_records")
		_, syncs := histTotals(fams, "weir_fdatasync_duration_seconds")
		perCommit, commits := recordsPerCommit(fams)
		d.stop(30 * time.Second)
		perSync := recs / float64(max(syncs, 1))
		b.ReportMetric(perSync, "records/fdatasync")
		b.ReportMetric(perCommit, "records/commit")
		benchLine(b, map[string]any{"name": "load/records_per_commit", "records": recs, "batches": batches,
			"fdatasyncs": syncs, "records_per_fdatasync": perSync, "sink_commits": commits, "records_per_sink_commit": perCommit})
	}
}
