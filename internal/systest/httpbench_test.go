package systest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
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
// socket driven by our Go client, HTTP by ApacheBench (`ab`, a load
// generator that is not ours, keep-alive). Four settings, each for
// WEIR_HTTP_BENCH_SECONDS (default 5):
//
//   - batch: 64 connections, 64 records a frame / an NDJSON request of 64
//     lines;
//   - single: 64 connections, one record a frame / a raw-body request;
//   - lone: one connection, one record at a time (latency floor; HTTP by
//     Go's own keep-alive client, timed per request, as ab reports whole
//     milliseconds).
//
// It prints a BENCH line per setting and door: records/s, p50 and p99 of
// a request, and the daemon's CPU µs per record. Without ab it skips
// (apt-get install apache2-utils).
func BenchmarkHTTPvsSocket(b *testing.B) {
	ab, err := exec.LookPath("ab")
	if err != nil {
		b.Skip("no ab (ApacheBench) on PATH: apt-get install apache2-utils")
	}
	secs := envDuration(b, "WEIR_HTTP_BENCH_SECONDS", 5*time.Second)
	rec := payload256()
	line := append(append([]byte(`{"payload":"`), bytes.Repeat([]byte("a"), len(rec)-20)...), []byte("\"}\n")...)
	dir := b.TempDir()
	ndjson := filepath.Join(dir, "batch.ndjson")
	raw := filepath.Join(dir, "one.bin")
	if err := os.WriteFile(ndjson, bytes.Repeat(line, 64), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(raw, rec, 0o644); err != nil {
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
			if s.conns == 1 {
				// ab reports whole milliseconds: the lone client is Go's
				// own keep-alive HTTP client, timed per request.
				n, lat := httpLone(b, url, rec, secs)
				report(b, "http", s.name, n, lat, procCPU(pid)-cpu0, secs)
				continue
			}
			out, err := exec.Command(ab, "-q", "-k", "-t", strconv.Itoa(int(secs.Seconds())), "-n", "100000000",
				"-c", strconv.Itoa(s.conns), "-p", s.body, "-T", s.ctype, "-H", "Weir-Durability: durable", url).CombinedOutput()
			if err != nil {
				b.Fatalf("ab: %v\n%s", err, out)
			}
			reqs, non2xx, p50, p99 := parseAB(b, out)
			if non2xx > 0 {
				b.Fatalf("ab: %d requests were not answered 2xx\n%s", non2xx, out)
			}
			benchLine(b, map[string]any{"name": "http_vs_socket/http/" + s.name, "records_per_s": float64(reqs*s.frame) / secs.Seconds(),
				"p50_ms": p50, "p99_ms": p99, "cpu_us_per_record": (procCPU(pid) - cpu0) * 1e6 / float64(max(1, reqs*s.frame))})
		}
		d.stop(30 * time.Second)
	}
}

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

// httpLone posts rec as a raw body, Durable, one request at a time on one
// keep-alive connection for d; it returns the records answered and each
// request's latency.
func httpLone(b *testing.B, url string, rec []byte, d time.Duration) (int, []time.Duration) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer hc.CloseIdleConnections()
	var lat []time.Duration
	for end := time.Now().Add(d); time.Now().Before(end); {
		t0 := time.Now()
		resp, err := hc.Post(url, "application/octet-stream", bytes.NewReader(rec))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("POST: %s", resp.Status)
		}
		lat = append(lat, time.Since(t0))
	}
	return len(lat), lat
}

func report(b *testing.B, door, setting string, n int, lat []time.Duration, cpu float64, d time.Duration) {
	qs := quantiles(lat) // µs
	benchLine(b, map[string]any{"name": "http_vs_socket/" + door + "/" + setting, "records_per_s": float64(n) / d.Seconds(),
		"p50_ms": qs[0] / 1000, "p99_ms": qs[1] / 1000, "cpu_us_per_record": cpu * 1e6 / float64(max(1, n))})
}

var (
	abComplete = regexp.MustCompile(`Complete requests:\s+(\d+)`)
	abNon2xx   = regexp.MustCompile(`Non-2xx responses:\s+(\d+)`)
	abFailed   = regexp.MustCompile(`Failed requests:\s+(\d+)`)
	abPct      = regexp.MustCompile(`(?m)^\s+(50|99)%\s+(\d+)`)
)

// parseAB reads ab's report: complete requests, those not answered 2xx
// or failed, and the p50 and p99 of a request in ms (ab's resolution).
func parseAB(b *testing.B, out []byte) (reqs, bad int, p50, p99 float64) {
	m := abComplete.FindSubmatch(out)
	if m == nil {
		b.Fatalf("ab: no request count in\n%s", out)
	}
	reqs, _ = strconv.Atoi(string(m[1]))
	for _, re := range []*regexp.Regexp{abNon2xx, abFailed} {
		if m := re.FindSubmatch(out); m != nil {
			k, _ := strconv.Atoi(string(m[1]))
			bad += k
		}
	}
	for _, m := range abPct.FindAllSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(string(m[2]), 64)
		if string(m[1]) == "50" {
			p50 = v
		} else {
			p99 = v
		}
	}
	return reqs, bad, p50, p99
}
