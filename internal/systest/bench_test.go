package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/vfs"
)

// Benchmarks of the real binary over its Unix socket. Each prints a
// "BENCH: {json}" line that scripts/bench reads; run them with
//
//	go test -run '^$' -bench . -benchtime 1x -count 5 ./internal/systest
//
// Producers and the daemon share the machine's cores. The baselines
// (BenchmarkDiskBaseline) measure the same file system in the same run.

const benchRecordBytes = 256

func benchLine(b *testing.B, fields map[string]any) {
	fields["date"] = time.Now().UTC().Format(time.RFC3339)
	j, _ := json.Marshal(fields)
	fmt.Printf("BENCH: %s\n", j)
}

// BenchmarkDiskBaseline measures the disk under the daemon's data
// directory: a 4 KiB append+fdatasync loop on a growing file and on a
// preallocated one, and durable write bandwidth (1 MiB writes, each
// fdatasynced).
func BenchmarkDiskBaseline(b *testing.B) {
	dir := b.TempDir()
	syncLoop := func(prealloc bool) float64 {
		f, err := vfs.OS.Create(filepath.Join(dir, fmt.Sprintf("sync-%v", prealloc)), 0o600)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		const n = 2000
		if prealloc {
			f.Preallocate(0, n*4096)
			f.Sync()
		}
		buf := make([]byte, 4096)
		start := time.Now()
		for range n {
			f.Write(buf)
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
		return n / time.Since(start).Seconds()
	}
	for range b.N {
		appendRate := syncLoop(false)
		preRate := syncLoop(true)
		bw := diskBandwidthMiB(b, dir)
		b.ReportMetric(appendRate, "syncs/s")
		b.ReportMetric(preRate, "prealloc-syncs/s")
		b.ReportMetric(bw, "MiB/s")
		benchLine(b, map[string]any{"name": "disk_baseline", "fdatasync_per_s": appendRate,
			"prealloc_fdatasync_per_s": preRate, "durable_mib_per_s": bw})
	}
}

// BenchmarkIngest pushes 256-byte records through the real daemon: each
// producer is one connection keeping up to `window` records in flight;
// frames are single-record or batches. It reports records/s and the ack
// latency distribution (from PushAsync to the Ack).
func BenchmarkIngest(b *testing.B) {
	records := 200_000
	if s := os.Getenv("WEIR_BENCH_RECORDS"); s != "" {
		fmt.Sscan(s, &records)
	}
	for _, tier := range []client.Durability{client.Durable, client.Buffered} {
		for _, batch := range []int{1, 64} {
			for _, producers := range []int{1, 16, 64} {
				name := settingName(tier, batch, producers)
				b.Run(name, func(b *testing.B) {
					for range b.N {
						r := ingestOnce(b, name, tier, batch, producers, records, false)
						b.ReportMetric(r.rate, "records/s")
						b.ReportMetric(r.p50, "p50-µs")
						b.ReportMetric(r.p99, "p99-µs")
					}
				})
			}
		}
	}
}

// ingestResult is one ingest measurement: records/s, the ack latency's p50
// and p99 in µs, and the CPU time per record, in µs, of the daemon and of
// this process (the producers) from the first push to the last ack —
// steadier than the rate on a shared machine — and, when asked for, the
// daemon's until its drain has delivered every record (drainedCPU: the
// drain lags the acks, so part of its work comes after the last one).
type ingestResult struct{ rate, p50, p99, daemonCPU, clientCPU, drainedCPU float64 }

// cpuSeconds is this process's user and system CPU time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// ingestOnce runs one ingest measurement against a fresh daemon and prints
// its BENCH line; opts are added to every producer's client options. With
// untilDrained it also waits for the drain to deliver every record and
// measures the daemon's CPU time until then.
func ingestOnce(b *testing.B, name string, tier client.Durability, batch, producers, records int, untilDrained bool, opts ...client.Option) ingestResult {
	return ingestDaemon(b, nil, name, tier, batch, producers, records, untilDrained, opts...)
}

// ingestDaemon is ingestOnce against a daemon started with daemonArgs
// added to its command line.
func ingestDaemon(b *testing.B, daemonArgs []string, name string, tier client.Durability, batch, producers, records int, untilDrained bool, opts ...client.Option) ingestResult {
	return ingestDaemonWith(b, daemonArgs, nil, name, tier, batch, producers, records, untilDrained, opts...)
}

// ingestDaemonWith is ingestDaemon with attach, when not nil, called on
// the started daemon before the producers start; what it returns is
// called once they are done and the result is measured.
func ingestDaemonWith(b *testing.B, daemonArgs []string, attach func(d *daemon) (detach func()), name string, tier client.Durability, batch, producers, records int, untilDrained bool, opts ...client.Option) ingestResult {
	b.StopTimer()
	d := newDaemon(b, append([]string{"--log-level", "warn"}, daemonArgs...)...)
	d.start()
	defer d.stop(30 * time.Second)
	if attach != nil {
		defer attach(d)()
	}
	window := 256
	if batch > 1 {
		window = 4 * batch
	}
	perProducer := records / producers
	payload := make([]byte, benchRecordBytes)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	clients := make([]*client.Client, producers)
	ctx := context.Background()
	for i := range clients {
		c, err := client.Dial(ctx, d.socket, append([]client.Option{client.WithWindow(window)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		clients[i] = c
	}
	lat := make([][]time.Duration, producers)
	var failed atomic.Int64
	var wg sync.WaitGroup
	m0 := d.scrape()
	daemonCPU0, clientCPU0 := m0["process_cpu_seconds_total"], cpuSeconds()
	delivered0 := sum(m0, "weir_records_delivered_total") // what attach pushed, delivered
	b.StartTimer()
	start := time.Now()
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine, _, err := pushFrames(ctx, clients[p], payload, batch, perProducer, tier, false, nil, &failed)
			if err != nil {
				b.Error(err)
			}
			lat[p] = mine
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	clientCPU := cpuSeconds() - clientCPU0
	daemonCPU := d.scrape()["process_cpu_seconds_total"] - daemonCPU0
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d pushes refused", n)
	}
	qs := quantiles(slices.Concat(lat...))
	total := perProducer / batch * batch * producers
	rate := float64(total) / elapsed.Seconds()
	r := ingestResult{rate: rate, p50: qs[0], p99: qs[1],
		daemonCPU: daemonCPU * 1e6 / float64(total), clientCPU: clientCPU * 1e6 / float64(total)}
	line := map[string]any{"name": "ingest/" + name, "records_per_s": rate,
		"p50_us": qs[0], "p99_us": qs[1], "p999_us": qs[2], "records": total,
		"producers": producers, "batch": batch, "window": window, "record_bytes": benchRecordBytes,
		"daemon_cpu_us_per_record": r.daemonCPU, "producer_cpu_us_per_record": r.clientCPU}
	if untilDrained {
		m := d.waitScrape(fmt.Sprintf("%d records delivered", total), 2*time.Minute, func(m map[string]float64) bool {
			return sum(m, "weir_records_delivered_total") >= delivered0+float64(total)
		})
		r.drainedCPU = (m["process_cpu_seconds_total"] - daemonCPU0) * 1e6 / float64(total)
		line["daemon_cpu_us_per_record_drained"] = r.drainedCPU
	}
	benchLine(b, line)
	return r
}

// BenchmarkWireVersions compares wire protocol versions 1 and 2 in the
// same run: 64 Durable producers of 256-byte records, single-record and
// batch frames, the client pinned to version 1 (no Hello, no producer id)
// or speaking version 2 (a producer id and sequence number per record,
// stored with it). Each iteration runs both versions, each against a
// fresh daemon, in an order that alternates from one pair to the next:
// on this machine the second run of a pair is measurably faster than the
// first, whatever its version. BENCH lines carry each run, with the
// daemon's CPU time per record also until its drain has delivered every
// record (the drain's work on the records' metadata — decoding it, hashing
// ids, writing event times — lags the acks); the reported metrics are the
// pair's.
//
//	go test -run '^$' -bench WireVersions -benchtime 1x -count 10 ./internal/systest
func BenchmarkWireVersions(b *testing.B) {
	records := 200_000
	if s := os.Getenv("WEIR_BENCH_RECORDS"); s != "" {
		fmt.Sscan(s, &records)
	}
	for _, batch := range []int{1, 64} {
		setting := settingName(client.Durable, batch, 64)
		b.Run(setting, func(b *testing.B) {
			for range b.N {
				rate := map[uint8]float64{}
				for _, second := range pairOrder(&wirePairs) {
					v := uint8(1)
					if second {
						v = 2
					}
					name := fmt.Sprintf("%s/v%d", setting, v)
					r := ingestOnce(b, "wire/"+name, client.Durable, batch, 64, records, true, client.WithProtocolVersion(v))
					rate[v] = r.rate
				}
				b.ReportMetric(rate[1], "v1-records/s")
				b.ReportMetric(rate[2], "v2-records/s")
				b.ReportMetric(rate[2]/rate[1], "v2/v1")
			}
		})
	}
}

// wirePairs counts BenchmarkWireVersions' pairs, to alternate their order.
var wirePairs int

// settingName names an ingest setting: its tier, its frames ("single" or
// "batchN") and its producers ("pN").
func settingName(tier client.Durability, batch, producers int) string {
	frames := "single"
	if batch > 1 {
		frames = fmt.Sprintf("batch%d", batch)
	}
	return fmt.Sprintf("%s/%s/p%d", tier, frames, producers)
}

// pairOrder is the order of a same-run pair's two runs — the baseline
// (false) and the other (true) — alternating from one pair to the next
// with the count *n: on this machine the second run of a pair is
// measurably faster than the first, whatever it measures.
func pairOrder(n *int) []bool {
	*n++
	if *n%2 == 0 {
		return []bool{true, false}
	}
	return []bool{false, true}
}

func sortDurations(s []time.Duration) { slices.Sort(s) }

// pushFrames pushes frames of batch copies of payload through c until n
// records are sent (or stop is set), each frame either awaited before the
// next (await) or pushed asynchronously within the client's window, and
// closes c. It returns each frame's ack latency and the records sent;
// refused pushes are counted in failed.
func pushFrames(ctx context.Context, c *client.Client, payload []byte, batch, n int, tier client.Durability,
	await bool, stop *atomic.Bool, failed *atomic.Int64) ([]time.Duration, int, error) {
	mine := make([]time.Duration, 0, min(n/batch+1, 1<<20))
	var mu sync.Mutex
	frame := make([][]byte, batch)
	for i := range frame {
		frame[i] = payload
	}
	sent := 0
	for ; sent < n && (stop == nil || !stop.Load()); sent += batch {
		t0 := time.Now()
		if await {
			if err := c.PushBatch(ctx, frame, tier); err != nil {
				failed.Add(1)
			}
			mine = append(mine, time.Since(t0))
			continue
		}
		err := c.PushAsync(ctx, frame, tier, func(err error) {
			if err != nil {
				failed.Add(1)
			}
			mu.Lock()
			mine = append(mine, time.Since(t0))
			mu.Unlock()
		})
		if err != nil {
			c.Close(ctx)
			return nil, sent, err
		}
	}
	c.Close(ctx) // waits for the outstanding acks, so mine is complete
	mu.Lock()
	defer mu.Unlock()
	return mine, sent, nil
}

// diskBandwidthMiB is the disk's durable write bandwidth in MiB/s: 256
// writes of 1 MiB to a new file in dir, each fdatasynced.
func diskBandwidthMiB(b *testing.B, dir string) float64 {
	f, err := vfs.OS.Create(filepath.Join(dir, "bw"), 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		f.Close()
		os.Remove(filepath.Join(dir, "bw"))
	}()
	buf := make([]byte, 1<<20)
	const n = 256
	start := time.Now()
	for range n {
		f.Write(buf)
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	return n / time.Since(start).Seconds()
}
