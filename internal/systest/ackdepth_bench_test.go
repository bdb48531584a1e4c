package systest

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/vfs"
)

// BenchmarkAckDepth measures weir's ack path against Redis with
// `appendonly yes` and `appendfsync always` at the same pipeline depth, in
// the same run, on the same disk, next to a bare fdatasync loop:
//
//   - 1 producer waiting for each ack vs `redis-benchmark -c 1 -P 1`
//   - 64 producers with 16 records in flight each vs `-c 64 -P 16`
//   - 64 producers with 256 in flight each vs `-c 64 -P 256`, plus the
//     Buffered tier and 64-record frames at that depth
//
// Redis is a private redis-server on a spare loopback port with its data in
// a temporary directory (next to the daemon's); the benchmark is skipped
// when redis-server or redis-benchmark is missing. 256-byte values and
// records. Each weir setting runs against a fresh daemon with the default
// configuration (a shard per CPU, segments sealed after 1 s, the drain delivering
// to the file sink), driven by
// the client package, one connection per producer; a Redis client is one
// connection too. Ack latency is from PushAsync (or Push) to the Ack.
//
// Each BENCH line of a weir setting carries the same iteration's Redis (or
// disk) figures and the ratios, so medians of ratios are same-run ratios:
//
//	go test -run '^$' -bench AckDepth -benchtime 1x -count 5 ./internal/systest
//
// scripts/ackbench.sh runs it and writes docs/benchmarks/ack_depth.md. With
// WEIR_ACK_PROFILE=dir it instead runs each weir setting for a fixed time
// against a daemon started with --debug-pprof and saves the daemon's CPU
// profile (dir/<setting>.cpu.pprof) and a scheduler trace
// (dir/<setting>.trace) taken under that load. WEIR_ACK_ONLY=substring
// runs only the settings whose name contains it.
func BenchmarkAckDepth(b *testing.B) {
	records := 500_000
	if s := os.Getenv("WEIR_BENCH_RECORDS"); s != "" {
		fmt.Sscan(s, &records)
	}
	if dir := os.Getenv("WEIR_ACK_PROFILE"); dir != "" {
		ackProfiles(b, dir)
		return
	}
	redisServer, err1 := exec.LookPath("redis-server")
	redisBench, err2 := exec.LookPath("redis-benchmark")
	if err1 != nil || err2 != nil {
		b.Skip("redis-server and redis-benchmark are needed")
	}
	for range b.N {
		disk := ackDiskBaseline(b)
		benchLine(b, map[string]any{"name": "ack/disk", "fdatasync_per_s": disk.rate,
			"fdatasync_p50_us": disk.p50, "fdatasync_p99_us": disk.p99,
			"prealloc_fdatasync_per_s": disk.preRate, "prealloc_fdatasync_p50_us": disk.preP50,
			"prealloc_fdatasync_p99_us": disk.preP99, "record_fdatasync_per_s": disk.recRate,
			"record_fdatasync_p50_us": disk.recP50, "record_fdatasync_p99_us": disk.recP99,
			"durable_mib_per_s": disk.mib})
		rs := startRedis(b, redisServer)
		for _, set := range ackSettings(records) {
			if only := os.Getenv("WEIR_ACK_ONLY"); only != "" && !strings.Contains(set.name, only) {
				continue
			}
			var red redisResult
			if set.redisClients > 0 {
				red = rs.bench(b, redisBench, set.redisClients, set.redisPipeline, set.records)
				benchLine(b, map[string]any{"name": fmt.Sprintf("ack/redis/c%dP%d", set.redisClients, set.redisPipeline),
					"records_per_s": red.rate, "p50_us": red.p50, "p99_us": red.p99, "records": set.records})
			}
			r := ackRun(b, set, nil)
			line := r.fields(map[string]any{"name": "ack/weir/" + set.name, "records_per_s": r.rate,
				"p50_us": r.p50, "p99_us": r.p99, "p999_us": r.p999, "records": r.records})
			if set.redisClients > 0 {
				line["redis_records_per_s"] = red.rate
				line["redis_p50_us"] = red.p50
				line["redis_p99_us"] = red.p99
				line["x_redis_rate"] = r.rate / red.rate
				line["x_redis_p99"] = r.p99 / red.p99
			}
			if set.producers == 1 {
				line["fdatasync_p50_us"] = disk.p50
				line["prealloc_fdatasync_p50_us"] = disk.preP50
				line["p50_over_prealloc_fdatasync_us"] = r.p50 - disk.preP50
				line["p50_over_fdatasync_us"] = r.p50 - disk.p50
				line["record_fdatasync_p50_us"] = disk.recP50
				line["p50_over_record_fdatasync_us"] = r.p50 - disk.recP50
				// What a round trip costs beyond the daemon's own
				// fdatasync: sockets both ways, the hops inside the daemon
				// and the client.
				line["mean_over_wab_fdatasync_us"] = r.mean - r.syncMean
			}
			if set.batch > 1 {
				line["durable_mib_per_s"] = disk.mib
				line["x_disk_bandwidth"] = r.rate * benchRecordBytes / (disk.mib * (1 << 20))
			}
			benchLine(b, line)
			b.ReportMetric(r.rate, set.name+"-records/s")
		}
		rs.stop()
	}
}

// ackSetting is one weir load of BenchmarkAckDepth and the Redis load it is
// compared with (none when redisClients is 0).
type ackSetting struct {
	name                        string
	tier                        client.Durability
	producers, window, batch    int
	records                     int
	redisClients, redisPipeline int
}

func ackSettings(records int) []ackSetting {
	return []ackSetting{
		{name: "Durable/single/p1w1", tier: client.Durable, producers: 1, window: 1, batch: 1,
			records: max(records/50, 2000), redisClients: 1, redisPipeline: 1},
		{name: "Durable/single/p64w16", tier: client.Durable, producers: 64, window: 16, batch: 1,
			records: records, redisClients: 64, redisPipeline: 16},
		{name: "Durable/single/p64w256", tier: client.Durable, producers: 64, window: 256, batch: 1,
			records: records, redisClients: 64, redisPipeline: 256},
		{name: "Buffered/single/p64w256", tier: client.Buffered, producers: 64, window: 256, batch: 1,
			records: records},
		{name: "Durable/batch64/p64w256", tier: client.Durable, producers: 64, window: 256, batch: 64,
			records: 2 * records},
	}
}

type ackResult struct {
	rate, p50, p99, p999, mean float64
	daemonCPU, clientCPU       float64
	records                    int
	// The daemon's own measurements over the run: fdatasyncs of the
	// buffer, their mean duration in µs, and records per batch.
	syncs, syncMean, batchRecords float64
}

// ackRun runs one weir setting against a fresh daemon. With prof set, the
// daemon serves pprof, the producers keep pushing until prof returns (it
// is given the daemon), and the records count is ignored.
func ackRun(b *testing.B, set ackSetting, prof func(d *daemon)) ackResult {
	b.StopTimer()
	// The product's defaults for sealing segments and sink files (the
	// harness shortens both for tests).
	args := []string{"--log-level", "warn", "--segment-max-age", "1s", "--sink-file-max-age", "1m"}
	if prof != nil {
		args = append(args, "--debug-pprof")
	}
	// WEIR_ACK_DAEMON_ARGS adds flags, for experiments (e.g. --shards 1, or
	// --segment-max-age 1h: no segment is sealed, so nothing is drained,
	// during a run).
	args = append(args, strings.Fields(os.Getenv("WEIR_ACK_DAEMON_ARGS"))...)
	d := newDaemon(b, args...)
	d.start()
	defer d.stop(30 * time.Second)
	payload := make([]byte, benchRecordBytes)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	ctx := context.Background()
	clients := make([]*client.Client, set.producers)
	for i := range clients {
		c, err := client.Dial(ctx, d.socket, client.WithWindow(set.window))
		if err != nil {
			b.Fatal(err)
		}
		clients[i] = c
	}
	perProducer := set.records / set.producers / set.batch * set.batch
	var stop atomic.Bool
	if prof != nil {
		perProducer = 1 << 62
	}
	lat := make([][]time.Duration, set.producers)
	counts := make([]int, set.producers)
	var failed atomic.Int64
	var wg sync.WaitGroup
	m0 := d.scrape()
	daemonCPU0, clientCPU0 := m0["process_cpu_seconds_total"], cpuSeconds()
	b.StartTimer()
	start := time.Now()
	for p := range set.producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine, sent, err := pushFrames(ctx, clients[p], payload, set.batch, perProducer, set.tier, set.window == 1, &stop, &failed)
			if err != nil {
				b.Error(err)
			}
			lat[p], counts[p] = mine, sent
		}()
	}
	if prof != nil {
		prof(d)
		stop.Store(true)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	clientCPU := cpuSeconds() - clientCPU0
	m1 := d.scrape()
	daemonCPU := m1["process_cpu_seconds_total"] - daemonCPU0
	delta := func(k string) float64 { return m1[k] - m0[k] }
	if n := failed.Load(); n > 0 {
		b.Fatalf("%s: %d pushes refused", set.name, n)
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	all := slices.Concat(lat...)
	qs := quantiles(all)
	var sumLat time.Duration
	for _, l := range all {
		sumLat += l
	}
	r := ackResult{rate: float64(total) / elapsed.Seconds(), p50: qs[0], p99: qs[1], p999: qs[2],
		daemonCPU: daemonCPU * 1e6 / float64(total), clientCPU: clientCPU * 1e6 / float64(total), records: total}
	if len(all) > 0 {
		r.mean = float64(sumLat.Microseconds()) / float64(len(all))
	}
	if n := delta("weir_fdatasync_duration_seconds_count"); n > 0 {
		r.syncs = n
		r.syncMean = delta("weir_fdatasync_duration_seconds_sum") * 1e6 / n
	}
	if n := delta("weir_batch_records_count"); n > 0 {
		r.batchRecords = delta("weir_batch_records_sum") / n
	}
	return r
}

// fields are the result's BENCH fields besides the rate and quantiles.
func (r ackResult) fields(line map[string]any) map[string]any {
	line["mean_us"] = r.mean
	line["daemon_cpu_us_per_record"] = r.daemonCPU
	line["producer_cpu_us_per_record"] = r.clientCPU
	line["wab_fdatasyncs"] = r.syncs
	line["wab_fdatasync_mean_us"] = r.syncMean
	line["wab_records_per_batch"] = r.batchRecords
	return line
}

// ackProfiles runs each weir setting of BenchmarkAckDepth for a few
// seconds and saves the daemon's CPU profile and a scheduler trace taken
// under that load into dir.
func ackProfiles(b *testing.B, dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	secs := 4
	if s := os.Getenv("WEIR_ACK_PROFILE_SECONDS"); s != "" {
		fmt.Sscan(s, &secs)
	}
	only := os.Getenv("WEIR_ACK_ONLY")
	long := &http.Client{Timeout: time.Duration(secs+30) * time.Second}
	fetch := func(d *daemon, path, file string) {
		resp, err := long.Get(fmt.Sprintf("http://127.0.0.1:%d%s", d.metricsPort, path))
		if err != nil {
			b.Errorf("GET %s: %v", path, err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(file)
		if err != nil {
			b.Error(err)
			return
		}
		defer f.Close()
		if _, err := io.Copy(f, resp.Body); err != nil {
			b.Errorf("GET %s: %v", path, err)
		}
	}
	for range b.N {
		for _, set := range ackSettings(0) {
			if only != "" && !strings.Contains(set.name, only) {
				continue
			}
			base := filepath.Join(dir, strings.ReplaceAll(set.name, "/", "_"))
			r := ackRun(b, set, func(d *daemon) {
				time.Sleep(500 * time.Millisecond) // past the start
				fetch(d, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), base+".cpu.pprof")
				fetch(d, "/debug/pprof/trace?seconds=1", base+".trace")
			})
			benchLine(b, r.fields(map[string]any{"name": "ack/profile/" + set.name, "records_per_s": r.rate,
				"p50_us": r.p50, "p99_us": r.p99, "p999_us": r.p999, "records": r.records}))
		}
	}
}

type diskResult struct {
	rate, p50, p99, preRate, preP50, preP99, recRate, recP50, recP99, mib float64
}

// ackRecordFrame is the size of the WAB frame of one 256-byte record
// from a version-2 producer: frame overhead, 31 bytes of stored metadata,
// the payload.
const ackRecordFrame = 20 + 31 + benchRecordBytes

// ackDiskBaseline is BenchmarkDiskBaseline with latencies: 4 KiB
// append+fdatasync on a growing file and on one preallocated with
// fallocate(KEEP_SIZE) as the WAB does, appends of one record's WAB frame
// (ackRecordFrame bytes) + fdatasync on a preallocated file — what a lone
// producer's round trip makes the disk do — and 1 MiB writes each
// fdatasynced.
func ackDiskBaseline(b *testing.B) diskResult {
	dir := b.TempDir()
	syncLoop := func(size int, prealloc bool) (float64, [3]float64) {
		f, err := vfs.OS.Create(filepath.Join(dir, fmt.Sprintf("sync-%d-%v", size, prealloc)), 0o600)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		const n = 3000
		if prealloc {
			f.Preallocate(0, int64(n*size))
			f.Sync()
		}
		buf := make([]byte, size)
		lat := make([]time.Duration, 0, n)
		start := time.Now()
		for range n {
			t0 := time.Now()
			f.Write(buf)
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		return n / time.Since(start).Seconds(), quantiles(lat)
	}
	var r diskResult
	var q [3]float64
	r.rate, q = syncLoop(4096, false)
	r.p50, r.p99 = q[0], q[1]
	r.preRate, q = syncLoop(4096, true)
	r.preP50, r.preP99 = q[0], q[1]
	r.recRate, q = syncLoop(ackRecordFrame, true)
	r.recP50, r.recP99 = q[0], q[1]
	r.mib = diskBandwidthMiB(b, dir)
	return r
}

// redisServer is a private redis-server with an append-only file synced
// on every write, its data in a temporary directory.
type redisServer struct {
	port int
	cmd  *exec.Cmd
	dir  string
}

func startRedis(b *testing.B, bin string) *redisServer {
	dir, err := os.MkdirTemp("", "weir-redis-")
	if err != nil {
		b.Fatal(err)
	}
	port := freePort(b)
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
		"--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		b.Fatal(err)
	}
	rs := &redisServer{port: port, cmd: cmd, dir: dir}
	b.Cleanup(rs.stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			return rs
		}
		if time.Now().After(deadline) {
			b.Fatalf("redis-server on port %d not ready: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (rs *redisServer) stop() {
	if rs.cmd == nil {
		return
	}
	rs.cmd.Process.Kill()
	rs.cmd.Wait()
	rs.cmd = nil
	os.RemoveAll(rs.dir)
}

type redisResult struct{ rate, p50, p99 float64 }

// bench runs redis-benchmark's SET with 256-byte values: clients
// connections, pipeline commands in flight on each, n requests in all. The
// AOF is rewritten away first (FLUSHALL, BGREWRITEAOF) so every run starts
// from a small file.
func (rs *redisServer) bench(b *testing.B, bin string, clients, pipeline, n int) redisResult {
	b.StopTimer()
	defer b.StartTimer()
	out, err := exec.Command(bin, "-h", "127.0.0.1", "-p", strconv.Itoa(rs.port), "-t", "set", "-d", "256",
		"-c", strconv.Itoa(clients), "-P", strconv.Itoa(pipeline), "-n", strconv.Itoa(n), "--csv").Output()
	if err != nil {
		b.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	rows, err := csv.NewReader(bufio.NewReader(strings.NewReader(string(out)))).ReadAll()
	if err != nil || len(rows) < 2 {
		b.Fatalf("redis-benchmark output %q: %v", out, err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	get := func(k string) float64 {
		i, ok := col[k]
		if !ok {
			b.Fatalf("redis-benchmark output lacks %q: %q", k, out)
		}
		v, err := strconv.ParseFloat(rows[len(rows)-1][i], 64)
		if err != nil {
			b.Fatalf("redis-benchmark %s: %v", k, err)
		}
		return v
	}
	r := redisResult{rate: get("rps"), p50: get("p50_latency_ms") * 1000, p99: get("p99_latency_ms") * 1000}
	// Start the next run from an empty AOF.
	exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strconv.Itoa(rs.port), "FLUSHALL").Run()
	exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strconv.Itoa(rs.port), "BGREWRITEAOF").Run()
	time.Sleep(200 * time.Millisecond)
	return r
}
