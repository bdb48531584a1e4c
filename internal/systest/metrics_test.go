package systest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/wab"
)

// Responses are not compressed: gzip would cost the daemon CPU on every
// scrape, which the benchmarks poll often.
var httpClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableCompression: true}}

// httpGet fetches path from the daemon's metrics endpoint.
func (d *daemon) httpGet(path string) (int, string, error) {
	hc := httpClient
	if d.hc != nil {
		hc = d.hc
	}
	resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d%s", d.metricsPort, path))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// scrape reads /metrics into sample name (with labels, as exposed) → value.
func (d *daemon) scrape() map[string]float64 {
	d.t.Helper()
	m, err := d.tryScrape()
	if err != nil {
		d.t.Fatal(err)
	}
	return m
}

// tryScrape is scrape for any goroutine: it returns the error instead of
// failing the test.
func (d *daemon) tryScrape() (map[string]float64, error) {
	code, body, err := d.httpGet("/metrics")
	if err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %d %v", code, err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("unparsable sample %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("sample %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out, nil
}

// sum adds the samples of a family (every label set).
func sum(samples map[string]float64, name string) float64 {
	var s float64
	for k, v := range samples {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}

// waitScrape scrapes until cond holds, failing after timeout.
func (d *daemon) waitScrape(what string, timeout time.Duration, cond func(map[string]float64) bool) map[string]float64 {
	d.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		m := d.scrape()
		if cond(m) {
			return m
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("timed out waiting for %s\n--- daemon log (tail) ---\n%s", what, tail(d.log.String(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMetricsEndpoint pushes records in both tiers and checks, over HTTP,
// that the received, acknowledged, committed and delivered counts agree,
// and that /ready and /live answer 200.
func TestMetricsEndpoint(t *testing.T) {
	d := newDaemon(t, "--shards", "2")
	d.start()
	for _, path := range []string{"/ready", "/live"} {
		if code, body, err := d.httpGet(path); err != nil || code != http.StatusOK {
			t.Fatalf("GET %s: %d %q %v", path, code, body, err)
		}
	}
	first := d.scrape()
	for _, k := range []string{`weir_drain_state{state="blocked_dead_letter_full"}`, `weir_sink_health{sink="file",state="down"}`, `weir_shard_failed{shard="1"}`} {
		if _, ok := first[k]; !ok {
			t.Errorf("first scrape lacks %s", k)
		}
	}

	ctx := ctxTimeout(t, 60*time.Second)
	const durable, buffered = 700, 300
	l := newLedger()
	done := make(chan struct{}, 2)
	go func() {
		produce(ctx, t, d.socket, "md", durable, 10, client.Durable, l, 10*time.Second)
		done <- struct{}{}
	}()
	go func() {
		produce(ctx, t, d.socket, "mb", buffered, 1, client.Buffered, l, 10*time.Second)
		done <- struct{}{}
	}()
	<-done
	<-done
	if got := l.ackedCount(); got != durable+buffered {
		t.Fatalf("acked %d of %d", got, durable+buffered)
	}
	waitDelivered(t, d, l.snapshot(), 30*time.Second)

	const total = durable + buffered
	m := d.waitScrape("every record committed and every segment delivered", 30*time.Second, func(m map[string]float64) bool {
		return sum(m, `weir_sink_commit_records_total{result="ok",sink="file"}`) == total &&
			m["weir_wab_segments"] == 0 && m["weir_records_delivered_total"] == total
	})
	for k, want := range map[string]float64{
		`weir_records_received_total{durability="durable"}`:  durable,
		`weir_records_acked_total{durability="durable"}`:     durable,
		`weir_records_received_total{durability="buffered"}`: buffered,
		`weir_records_acked_total{durability="buffered"}`:    buffered,
		// The producer listeners are a source like the others.
		`weir_source_records_written_total{source="socket"}`: total,
		`weir_source_running{source="socket"}`:               1,
		`weir_connections_open`:                              0,
		`weir_wab_bytes`:                                     0,
		`weir_dead_letter_files`:                             0,
		`weir_drain_retries_total`:                           0,
		`weir_sink_rejected_records_total{sink="file"}`:      0,
		`weir_sink_health{sink="file",state="healthy"}`:      1,
		`weir_build_info`:                                    -1, // presence only
	} {
		got, ok := m[k]
		if k == "weir_build_info" {
			if sum(m, k) != 1 {
				t.Errorf("weir_build_info: %v", sum(m, k))
			}
			continue
		}
		if !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	// The producers' connections and the harness's readiness probe.
	if got := m["weir_connections_total"]; got < 2 {
		t.Errorf("weir_connections_total = %v, want at least 2", got)
	}
	if got := sum(m, "weir_records_nacked_total"); got != 0 {
		t.Errorf("nacked %v records", got)
	}
	for _, tier := range []string{"durable", "buffered"} {
		r, a := m[`weir_bytes_received_total{durability="`+tier+`"}`], m[`weir_bytes_acked_total{durability="`+tier+`"}`]
		if r == 0 || r != a {
			t.Errorf("%s bytes received %v, acked %v", tier, r, a)
		}
	}
	// Records per commit is derivable: records over calls.
	calls := m[`weir_sink_commit_duration_seconds_count{result="ok",sink="file"}`]
	if calls < 1 || calls > total {
		t.Errorf("sink commit calls %v for %d records", calls, total)
	}
	if s, dl := m["weir_wab_sealed_segments_total"], m["weir_segments_delivered_total"]; s < 1 || s != dl {
		t.Errorf("segments sealed %v, delivered %v", s, dl)
	}
	if m["weir_wab_sealed_bytes_total"] != m["weir_wab_delivered_bytes_total"] {
		t.Errorf("bytes sealed %v, delivered %v", m["weir_wab_sealed_bytes_total"], m["weir_wab_delivered_bytes_total"])
	}
	if sum(m, "weir_batch_records_count") < 1 || sum(m, "weir_fdatasync_duration_seconds_count") < 1 {
		t.Errorf("no batches or fdatasyncs observed")
	}
	if got := sum(m, "weir_shard_failed"); got != 0 {
		t.Errorf("shard_failed sum %v", got)
	}
	if err := d.stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, tail(d.log.String(), 4000))
	}
}

// diskWAB counts the sealed segments under the daemon's WAB directory and
// their size.
func diskWAB(t *testing.T, d *daemon) (float64, float64) {
	t.Helper()
	refs, err := wab.ListSealed(vfs.OS, d.wabDir())
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, r := range refs {
		fi, err := os.Stat(r.Path)
		if err != nil {
			t.Fatal(err)
		}
		size += fi.Size()
	}
	return float64(len(refs)), float64(size)
}

// TestMetricsFromDiskAfterKill9 keeps the drain from delivering (every
// file the sink creates fails), plants a dead-letter file, pushes records,
// kills the daemon with SIGKILL and restarts it: the write-ahead buffer and
// dead-letter gauges on the first scrapes must match what is on disk. A
// failing sink must not fail /live.
func TestMetricsFromDiskAfterKill9(t *testing.T) {
	d := newDaemon(t, "--shards", "2", "--drain-retry-base", "50ms", "--drain-retry-max", "200ms")
	d.env = []string{"WEIR_FAULTS=create:*/out/*:EIO"}

	dlDir := drain.DeadLetterDir(d.wabDir())
	if err := os.MkdirAll(dlDir, 0o700); err != nil {
		t.Fatal(err)
	}
	dlPath := filepath.Join(dlDir, drain.DeadLetterName(1))
	recs := []wab.Record{{Payload: []byte("refused once"), Meta: record.Encode(&record.Meta{HasID: true, Reject: &record.Rejection{Error: "planted by the test"}})}}
	if err := wab.WriteSealed(vfs.OS, dlPath, wab.Header{Shard: wab.DeadLetterShard, Seq: 1}, recs); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dlPath)
	if err != nil {
		t.Fatal(err)
	}
	dlBytes := float64(fi.Size())

	d.start()
	ctx := ctxTimeout(t, 60*time.Second)
	l := newLedger()
	produce(ctx, t, d.socket, "k", 400, 20, client.Durable, l, 10*time.Second)
	if got := l.ackedCount(); got != 400 {
		t.Fatalf("acked %d of 400", got)
	}
	// Segments age out (200ms) and stay on disk: the sink cannot create files.
	m := d.waitScrape("sealed segments held on disk", 30*time.Second, func(m map[string]float64) bool {
		n, _ := diskWAB(t, d)
		return n >= 1 && m["weir_wab_segments"] == n && m["weir_drain_retries_total"] >= 1
	})
	n, size := diskWAB(t, d)
	if m["weir_wab_bytes"] != size {
		t.Errorf("before the kill: weir_wab_bytes %v, disk %v", m["weir_wab_bytes"], size)
	}
	if m["weir_dead_letter_files"] != 1 || m["weir_dead_letter_bytes"] != dlBytes {
		t.Errorf("before the kill: dead letter %v files %v bytes, disk 1 and %v", m["weir_dead_letter_files"], m["weir_dead_letter_bytes"], dlBytes)
	}
	if code, body, err := d.httpGet("/live"); err != nil || code != http.StatusOK {
		t.Errorf("/live with a failing sink: %d %q %v", code, body, err)
	}
	t.Logf("before the kill: %v sealed segments, %v bytes", n, size)

	d.kill()
	d.start()
	m = d.scrape()
	n, size = diskWAB(t, d)
	if n < 1 {
		t.Fatalf("no sealed segments on disk after the restart")
	}
	if m["weir_wab_segments"] != n || m["weir_wab_bytes"] != size {
		t.Errorf("after the restart: weir_wab_segments %v bytes %v, disk %v and %v", m["weir_wab_segments"], m["weir_wab_bytes"], n, size)
	}
	if m["weir_dead_letter_files"] != 1 || m["weir_dead_letter_bytes"] != dlBytes {
		t.Errorf("after the restart: dead letter %v files %v bytes, disk 1 and %v", m["weir_dead_letter_files"], m["weir_dead_letter_bytes"], dlBytes)
	}
	if got := sum(m, "weir_records_received_total"); got != 0 {
		t.Errorf("a new process starts its counters at 0, got %v received", got)
	}
	for _, path := range []string{"/ready", "/live"} {
		if code, body, err := d.httpGet(path); err != nil || code != http.StatusOK {
			t.Errorf("after the restart, GET %s: %d %q %v", path, code, body, err)
		}
	}
	d.kill()
}

// TestMetricsPortTaken checks that a metrics port already in use stops the
// daemon at start with an error naming the settings.
func TestMetricsPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := newDaemon(t, "--metrics-port", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	if err := d.launch(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(15 * time.Second):
		t.Fatal("weir kept running with its metrics port taken")
	}
	if d.err == nil {
		t.Fatal("weir exited 0 with its metrics port taken")
	}
	if log := d.log.String(); !strings.Contains(log, "metrics endpoint (metrics_bind, metrics_port)") || !strings.Contains(log, "address already in use") {
		t.Errorf("start-up error does not name the metrics endpoint:\n%s", log)
	}
	if _, err := os.Stat(d.socket); err == nil {
		t.Error("socket created although start-up failed")
	}
}
