package systest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
)

// BenchmarkHTTPvsSocket compares the HTTP door with the producer socket on
// one daemon in one run (Durable, 256-byte records, the same disk): the
// socket driven by our Go client, HTTP by wrk (a load generator that is
// not ours, HTTP/1.1 keep-alive, one thread; ApacheBench speaks HTTP/1.0
// and does not keep a connection a Go server answers
// "Connection: keep-alive"). Three settings, each for
// WEIR_HTTP_BENCH_SECONDS (default 5):
//
//   - batch: 64 connections, 64 records a frame / an NDJSON request of 64
//     lines;
//   - single: 64 connections, one record a frame / a raw-body request;
//   - lone: one connection, one record at a time (the latency floor).
//
// It prints a BENCH line per setting and door: records/s, p50 and p99 of
// a request, and the daemon's CPU µs per record. Without wrk it skips
// (apt-get install wrk).
func BenchmarkHTTPvsSocket(b *testing.B) {
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		b.Skip("no wrk on PATH: apt-get install wrk")
	}
	secs := envDuration(b, "WEIR_HTTP_BENCH_SECONDS", 5*time.Second)
	rec := payload256()
	line := append(append([]byte(`{"payload":"`), bytes.Repeat([]byte("a"), len(rec)-20)...), []byte("\"}\n")...)
	dir := b.TempDir()
	ndjson := filepath.Join(dir, "batch.ndjson")
	raw := filepath.Join(dir, "one.bin")
	script := filepath.Join(dir, "post.lua")
	if err := os.WriteFile(ndjson, bytes.Repeat(line, 64), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(raw, rec, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(script, []byte(wrkScript), 0o644); err != nil {
		b.Fatal(err)
	}
	for range b.N {
		d := newDaemon(b, "--log-level", "warn")
		d.start()
		pid := d.cmd.Process.Pid
		url := fmt.Sprintf("http://127.0.0.1:%d/v1/records", d.httpPort)
		for _, s := range []struct {
			name         string
			conns, frame int
			body, ctype  string
		}{
			{"batch", 64, 64, ndjson, "application/x-ndjson"},
			{"single", 64, 1, raw, "application/octet-stream"},
			{"lone", 1, 1, raw, "application/octet-stream"},
		} {
			cpu0 := procCPU(pid)
			n, lat := socketLoad(b, d.socket, s.conns, s.frame, rec, secs)
			report(b, "socket", s.name, n, lat, procCPU(pid)-cpu0, secs)

			cpu0 = procCPU(pid)
			cmd := exec.Command(wrk, "-t", "1", "-c", strconv.Itoa(s.conns), "-d", strconv.Itoa(int(secs.Seconds()))+"s",
				"--latency", "-s", script, url)
			cmd.Env = append(os.Environ(), "WRK_BODY="+s.body, "WRK_CTYPE="+s.ctype)
			out, err := cmd.CombinedOutput()
			if err != nil {
				b.Fatalf("wrk: %v\n%s", err, out)
			}
			reqs, bad, p50, p99 := parseWrk(b, out)
			if bad > 0 {
				b.Fatalf("wrk: %d requests were not answered 2xx or failed\n%s", bad, out)
			}
			benchLine(b, map[string]any{"name": "http_vs_socket/http/" + s.name, "records_per_s": float64(reqs*s.frame) / secs.Seconds(),
				"p50_ms": p50, "p99_ms": p99, "cpu_us_per_record": (procCPU(pid) - cpu0) * 1e6 / float64(max(1, reqs*s.frame))})
		}
		d.stop(30 * time.Second)
	}
}

// wrkScript makes wrk POST the file WRK_BODY as WRK_CTYPE, Durable.
const wrkScript = `local f = io.open(os.getenv("WRK_BODY"), "rb")
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = os.getenv("WRK_CTYPE")
wrk.headers["Weir-Durability"] = "durable"
`

// socketLoad runs conns socket producers for d, each pushing frames of
// frame copies of rec, Durable, one at a time; it returns the records
// acked and every push's latency.
func socketLoad(b *testing.B, socket string, conns, frame int, rec []byte, d time.Duration) (int, []time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	var all []time.Duration
	n := 0
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			c, err := client.Dial(context.Background(), socket)
			if err != nil {
				b.Error(err)
				return
			}
			defer c.Close(context.Background())
			recs := make([][]byte, frame)
			for i := range recs {
				recs[i] = rec
			}
			var lat []time.Duration
			done := 0
			for ctx.Err() == nil {
				t0 := time.Now()
				if err := c.PushBatch(context.Background(), recs, client.Durable); err != nil {
					b.Error(err)
					return
				}
				lat = append(lat, time.Since(t0))
				done += frame
			}
			mu.Lock()
			all, n = append(all, lat...), n+done
			mu.Unlock()
		})
	}
	wg.Wait()
	return n, all
}

func report(b *testing.B, door, setting string, n int, lat []time.Duration, cpu float64, d time.Duration) {
	qs := quantiles(lat) // µs
	benchLine(b, map[string]any{"name": "http_vs_socket/" + door + "/" + setting, "records_per_s": float64(n) / d.Seconds(),
		"p50_ms": qs[0] / 1000, "p99_ms": qs[1] / 1000, "cpu_us_per_record": cpu * 1e6 / float64(max(1, n))})
}

var (
	wrkRequests = regexp.MustCompile(`(\d+) requests in`)
	wrkNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses:\s+(\d+)`)
	wrkErrors   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkPct      = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$`)
)

// parseWrk reads wrk's report: requests answered, those not answered 2xx
// or failed, and the p50 and p99 of a request in ms.
func parseWrk(b *testing.B, out []byte) (reqs, bad int, p50, p99 float64) {
	m := wrkRequests.FindSubmatch(out)
	if m == nil {
		b.Fatalf("wrk: no request count in\n%s", out)
	}
	reqs, _ = strconv.Atoi(string(m[1]))
	if m := wrkNon2xx.FindSubmatch(out); m != nil {
		k, _ := strconv.Atoi(string(m[1]))
		bad += k
	}
	if m := wrkErrors.FindSubmatch(out); m != nil {
		for _, g := range m[1:] {
			k, _ := strconv.Atoi(string(g))
			bad += k
		}
	}
	scale := map[string]float64{"us": 1e-3, "ms": 1, "s": 1e3}
	for _, m := range wrkPct.FindAllSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(string(m[2]), 64)
		v *= scale[string(m[3])]
		if string(m[1]) == "50" {
			p50 = v
		} else {
			p99 = v
		}
	}
	return reqs, bad, p50, p99
}
