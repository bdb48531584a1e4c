package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
)

// tapLine is a record line of weir tap.
type tapLine struct {
	ID, Source, Code, Rule, Error, Payload string
	Bytes                                  int
}

// tapTopologyTOML: a file secondary "copy" behind a contract on the
// socket stream that refuses {"ok": false}, and a file source "files"
// reading dir.
func tapTopologyTOML(dir string) string {
	return fmt.Sprintf(`
[[secondary]]
name = "copy"
type = "file"

[[source]]
name = "files"
type = "file"
[source.file]
glob = %q
poll_interval = "50ms"

[[contract]]
source = "socket"
  [[contract.rule]]
  name = "ok_true"
  expr = "record.ok == true"
  severity = "fail"
`, filepath.Join(dir, "*.log"))
}

// tapLoad keeps producers pushing over the socket — every fifth record
// {"ok": false} — and a file growing in the file source's directory,
// until the test ends; pushed counts the socket's records.
func tapLoad(t *testing.T, d *daemon, dir string) (pushed *atomic.Int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	pushed = new(atomic.Int64)
	for p := range 2 {
		c, err := client.Dial(ctx, d.socket, client.WithWindow(256))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer c.Close(context.Background())
			for i := 0; ctx.Err() == nil; i++ {
				batch := make([][]byte, 50)
				for j := range batch {
					batch[j] = fmt.Appendf(nil, `{"ok":%v,"p":%d,"n":%d}`, (i*50+j)%5 != 0, p, i*50+j)
				}
				if err := c.PushBatch(ctx, batch, client.Durable); err != nil {
					if ctx.Err() == nil {
						t.Errorf("push: %v", err)
					}
					return
				}
				pushed.Add(50)
			}
		})
	}
	f, err := os.Create(filepath.Join(dir, "app.log"))
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		defer f.Close()
		for i := 0; ctx.Err() == nil; i++ {
			fmt.Fprintf(f, `{"line":%d}`+"\n", i)
			time.Sleep(2 * time.Millisecond)
		}
	})
	return pushed
}

// TestTapPoints runs weir tap against the real daemon under load at each
// kind of point — a source (the socket, a file source), the gate, a
// secondary, a quarantine lane — and finds the records that pass there:
// the socket's and the file's sources, the secondary's ids, the
// quarantine's reason code and rule. A filter keeps what it names; a slow
// reader (--rate) is told, on stderr, how many records it was not shown.
func TestTapPoints(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, tapTopologyTOML(dir))
	d := newDaemon(t, "--config", cfg)
	d.start()
	pushed := tapLoad(t, d, dir)
	addr := fmt.Sprintf("127.0.0.1:%d", d.metricsPort)

	for _, tc := range []struct {
		at    string
		args  []string
		check func(l tapLine) string // "" when the line is right
	}{
		{"source:socket", nil, func(l tapLine) string {
			return want(l.Source == "socket" && strings.Contains(l.Payload, `"ok"`), "a socket record")
		}},
		{"source:files", nil, func(l tapLine) string {
			return want(l.Source == "files" && strings.HasPrefix(l.Payload, `{"line":`) && l.ID != "", "a line of the file, with its id")
		}},
		{"gate", nil, func(l tapLine) string {
			return want(l.Source == "socket" || l.Source == "files", "a record of either source")
		}},
		{"gate", []string{"--filter", `source == "files"`}, func(l tapLine) string { return want(l.Source == "files", "only the file's records") }},
		{"secondary:copy", nil, func(l tapLine) string {
			return want(l.ID != "" && !strings.Contains(l.Payload, `"ok":false`), "a record the secondary took (with its id, never a refused one)")
		}},
		{"quarantine:copy", nil, func(l tapLine) string {
			return want(l.Code == "dq" && l.Rule == "ok_true" && strings.Contains(l.Payload, `"ok":false`) && l.Error != "", "a refused record with its reason")
		}},
	} {
		t.Run(tc.at+strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := weirCmd(t, nil, append([]string{"tap", "--at", tc.at, "--limit", "20", "--metrics-addr", addr}, tc.args...)...)
			if code != 0 {
				t.Fatalf("weir tap --at %s: exit %d\n%s", tc.at, code, errOut)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 20 {
				t.Fatalf("%d lines, want 20:\n%s\n%s", len(lines), out, errOut)
			}
			for _, s := range lines {
				var l tapLine
				if err := json.Unmarshal([]byte(s), &l); err != nil {
					t.Fatalf("line %q: %v", s, err)
				}
				if l.Bytes != len(l.Payload) {
					t.Errorf("line %s: bytes %d for a payload of %d", s, l.Bytes, len(l.Payload))
				}
				if why := tc.check(l); why != "" {
					t.Errorf("line %s: want %s", s, why)
				}
			}
			if !strings.Contains(errOut, "weir tap: 20 records shown") {
				t.Errorf("stderr: %s", errOut)
			}
		})
	}

	// A reader slower than the pipeline: 4 records at 2 a second from a
	// buffer of 4, the rest dropped and counted.
	out, errOut, code := weirCmd(t, nil, "tap", "--at", "gate", "--limit", "4", "--rate", "2", "--buffer", "4", "--metrics-addr", addr)
	if code != 0 || strings.Count(out, "\n") != 4 {
		t.Fatalf("slow tap: exit %d, %q\n%s", code, out, errOut)
	}
	var shown, dropped int
	if _, err := fmt.Sscanf(errOut[strings.LastIndex(errOut, "weir tap: "):], "weir tap: %d records shown, %d dropped", &shown, &dropped); err != nil || dropped == 0 {
		t.Errorf("slow tap reports %d dropped (%v):\n%s", dropped, err, errOut)
	}

	// The points and the refusals.
	_, errOut, code = weirCmd(t, nil, "tap", "--at", "nope", "--metrics-addr", addr)
	if code != 2 || !strings.Contains(errOut, `"quarantine:buffer"`) || !strings.Contains(errOut, `"secondary:copy"`) {
		t.Errorf("unknown point: exit %d: %s", code, errOut)
	}
	_, errOut, code = weirCmd(t, nil, "tap", "--at", "gate", "--filter", "record.", "--metrics-addr", addr)
	if code != 2 || !strings.Contains(errOut, "filter") {
		t.Errorf("bad filter: exit %d: %s", code, errOut)
	}
	m := d.scrape()
	if m[`weir_tap_readers{point="gate"}`] != 0 || m[`weir_tap_dropped_total{point="gate"}`] == 0 {
		t.Errorf("after the taps: readers %v, dropped %v at the gate", m[`weir_tap_readers{point="gate"}`], m[`weir_tap_dropped_total{point="gate"}`])
	}
	if pushed.Load() == 0 {
		t.Error("no load")
	}
}

func want(ok bool, what string) string {
	if ok {
		return ""
	}
	return what
}

// TestTapNeverRead: a tap whose client never reads is dropped with a
// count while the pipeline carries on: acks keep coming, the gate's drop
// counter grows, and once the client goes its reader is gone.
func TestTapNeverRead(t *testing.T) {
	dir := t.TempDir()
	d := newDaemon(t, "--config", writeConfig(t, tapTopologyTOML(dir)))
	d.start()
	tapLoad(t, d, dir)
	stop := attachIdleTap(t, d, "gate")
	acked := func(m map[string]float64) float64 { return sum(m, "weir_records_acked_total") }
	m0 := d.waitScrape("the idle tap dropping", 30*time.Second, func(m map[string]float64) bool {
		return m[`weir_tap_dropped_total{point="gate"}`] > 10_000
	})
	m1 := d.waitScrape("acks while the idle tap drops", 30*time.Second, func(m map[string]float64) bool {
		return acked(m) > acked(m0)+10_000 && m[`weir_tap_dropped_total{point="gate"}`] > m0[`weir_tap_dropped_total{point="gate"}`]
	})
	if m1[`weir_tap_readers{point="gate"}`] != 1 {
		t.Errorf("readers at the gate: %v, want 1", m1[`weir_tap_readers{point="gate"}`])
	}
	t.Logf("idle tap: %.0f records dropped and counted while %.0f were acked", m1[`weir_tap_dropped_total{point="gate"}`], acked(m1))
	stop()
	d.waitScrape("the idle tap's reader gone", 30*time.Second, func(m map[string]float64) bool {
		return m[`weir_tap_readers{point="gate"}`] == 0
	})
}

// attachIdleTap opens a tap at point whose body is never read, waits
// until the daemon has its reader, and returns what closes it.
func attachIdleTap(tb testing.TB, d *daemon, point string) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/v1/tap?at=%s", d.metricsPort, point), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		tb.Fatalf("tap at %s: %s", point, resp.Status)
	}
	d.waitScrape("the idle tap attached", 10*time.Second, func(m map[string]float64) bool {
		return m[fmt.Sprintf(`weir_tap_readers{point=%q}`, point)] == 1
	})
	return func() { cancel(); resp.Body.Close() }
}

// BenchmarkTapGate measures what a tap attached at the gate whose client
// never reads costs socket ingest: the same producers against a fresh
// daemon with such a tap and without one, in one run, in an order that
// alternates from one pair to the next. Both daemons first take
// tapWarmRecords records unmeasured, by which time the tap's reader and
// its client's socket buffers are full (a one-time cost: the lines that
// fit are built and sent); measured, every producer request then meets a
// full reader: the gate builds nothing and counts the request's records
// dropped. It reports both rates, the pair's ratio tap/none, and the
// daemon's CPU time per record tap/none from the first push until the
// drain has delivered the last record — the work, whenever it is done:
// the steadiest figure on a shared machine.
// The settings take 10 × and 3 × WEIR_BENCH_RECORDS records (default
// 200000): a second or more each, so the CPU time's 10 ms ticks weigh
// little.
//
//	go test -run '^$' -bench TapGate -benchtime 1x -count 8 ./internal/systest
func BenchmarkTapGate(b *testing.B) {
	records := 200_000
	if s := os.Getenv("WEIR_BENCH_RECORDS"); s != "" {
		fmt.Sscan(s, &records)
	}
	for _, c := range []struct {
		tier                    client.Durability
		batch, producers, scale int
	}{
		{client.Buffered, 64, 16, 10},
		{client.Durable, 1, 64, 3},
	} {
		setting := settingName(c.tier, c.batch, c.producers)
		b.Run(setting, func(b *testing.B) {
			for range b.N {
				r := map[bool]ingestResult{}
				for _, on := range pairOrder(&tapPairs) {
					attach := func(d *daemon) func() {
						stop := func() {}
						if on {
							stop = attachIdleTap(b, d, "gate")
						}
						warmTap(b, d)
						dropped0 := d.scrape()[`weir_tap_dropped_total{point="gate"}`]
						if on && dropped0 == 0 {
							b.Fatal("the idle tap drops nothing after the warm-up")
						}
						return func() {
							m := d.scrape()
							if on && (m[`weir_tap_readers{point="gate"}`] != 1 || m[`weir_tap_dropped_total{point="gate"}`] <= dropped0) {
								b.Errorf("the idle tap was not attached and dropping throughout: %v readers, %v dropped",
									m[`weir_tap_readers{point="gate"}`], m[`weir_tap_dropped_total{point="gate"}`]-dropped0)
							}
							stop()
						}
					}
					name := fmt.Sprintf("tapgate/%s/tap=%v", setting, on)
					r[on] = ingestDaemonWith(b, nil, attach, name, c.tier, c.batch, c.producers, records*c.scale, true)
				}
				b.ReportMetric(r[false].rate, "none-records/s")
				b.ReportMetric(r[true].rate, "tap-records/s")
				b.ReportMetric(r[true].rate/r[false].rate, "tap/none")
				b.ReportMetric(r[true].drainedCPU/r[false].drainedCPU, "cpu-tap/none")
			}
		})
	}
}

// tapWarmRecords are the records BenchmarkTapGate pushes before it
// measures.
const tapWarmRecords = 200_000

// warmTap pushes tapWarmRecords records to d in batches of 64.
func warmTap(b *testing.B, d *daemon) {
	ctx := context.Background()
	var failed atomic.Int64
	var wg sync.WaitGroup
	payload := make([]byte, benchRecordBytes)
	for range 4 {
		c, err := client.Dial(ctx, d.socket, client.WithWindow(256))
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			if _, _, err := pushFrames(ctx, c, payload, 64, tapWarmRecords/4, client.Buffered, false, nil, &failed); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		b.Fatalf("warm-up: %d pushes refused", failed.Load())
	}
	d.waitScrape("the warm-up delivered", time.Minute, func(m map[string]float64) bool {
		return sum(m, "weir_records_delivered_total") >= tapWarmRecords
	})
}

// tapPairs counts BenchmarkTapGate's pairs, to alternate their order.
var tapPairs int
