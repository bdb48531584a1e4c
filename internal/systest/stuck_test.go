package systest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-io/weir/client"
)

// The stuck detector, on the real binary: a sink commit that never returns
// while records are held fails /live and ends the process with exit code
// 70, on every kind of node; a slow sink that does return does not.

// Stuck detector timings of these tests (the defaults are minutes).
const (
	stuckFail = 2 * time.Second // flow.stuck_fail_after
	stuckExit = 3 * time.Second // flow.stuck_exit_after
	// stuckShutdown is the daemon's shutdown_timeout: a stuck daemon's
	// shutdown waits for the hung call that long, then the process exits
	// exitGrace (5 s, internal/daemon) later.
	stuckShutdown = time.Second
	// stuckSlack covers a segment's sealing (segment_max_age 200ms), the
	// drain's pickup, the sampling interval and a loaded machine.
	stuckSlack  = 5 * time.Second
	stuckBudget = 32 << 20
)

// stuckArgs are the flow flags of the stuck tests: a 32 MiB budget at full
// size from the start, held memory counted high from 20 % (a drain
// sub-batch opens with at most a quarter of the budget), warn after 1 s,
// /live failing after 2 s, exit 3 s later. live_stall_timeout is an hour,
// so that only the stuck detector can fail /live.
func stuckArgs() []string {
	return []string{"--memory-budget", fmt.Sprint(stuckBudget), "--flow-warmup-percent", "100",
		"--flow-sample-interval", "100ms", "--flow-stuck-memory-percent", "20",
		"--flow-stuck-warn-after", "1s", "--flow-stuck-fail-after", stuckFail.String(),
		"--flow-stuck-exit-after", stuckExit.String(), "--flow-stuck-clear-after", "2s",
		"--live-stall-timeout", "1h", "--shutdown-timeout", stuckShutdown.String()}
}

// hangSync is a WEIR_FAULTS rule holding every fdatasync under dir (a
// glob) for an hour: a sink commit that never returns.
func hangSync(dir string) string { return "WEIR_FAULTS=sync:" + dir + ":delay=1h" }

// bigRecords are n distinct payloads of size bytes.
func bigRecords(prefix string, n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		p := make([]byte, size)
		for j := range p {
			p[j] = 'a' + byte((i+j)%26)
		}
		copy(p, fmt.Sprintf("%s-%04d|", prefix, i))
		out[i] = p
	}
	return out
}

// pushAcked pushes recs Durable, one per frame, and fails unless each is
// acked.
func pushAcked(t *testing.T, socket string, recs [][]byte, opts ...client.Option) {
	t.Helper()
	ctx := ctxTimeout(t, 60*time.Second)
	c, err := client.Dial(ctx, socket, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for i, r := range recs {
		if err := c.Push(ctx, r, client.Durable); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
}

// expectStuckExit waits for /live to fail with the stuck detector's reason
// within failBound of since, then for the process to exit with code 70.
// Meanwhile every control daemon — the same kind of node, its sink
// working — must answer /live with 200.
func expectStuckExit(t *testing.T, d *daemon, since time.Time, failBound time.Duration, controls ...*daemon) {
	t.Helper()
	checks := 0
	checkControls := func() {
		for _, c := range controls {
			if code, body := c.live(); code != 200 {
				t.Fatalf("control node (sink working): /live %d %q\n%s", code, body, tail(c.log.String(), 4000))
			}
		}
		checks++
	}
	defer func() {
		if len(controls) > 0 && !t.Failed() {
			t.Logf("control node: /live 200 on %d checks while the hung node failed and exited", checks)
		}
	}()
	deadline := since.Add(failBound)
	for {
		checkControls()
		code, body := d.live()
		if code == 503 {
			if !strings.Contains(body, "stuck") || !strings.Contains(body, "no progress") {
				t.Fatalf("/live 503 for another reason: %s", body)
			}
			t.Logf("/live 503 %v after the records were held: %s", time.Since(since).Round(time.Millisecond), body)
			break
		}
		if d.exited() {
			t.Fatalf("the daemon exited (%v) before /live failed\n%s", d.err, tail(d.log.String(), 4000))
		}
		if time.Now().After(deadline) {
			m, _ := d.tryScrape()
			t.Fatalf("/live still %d %q %v after the records were held (stuck stage %v, budget in use %v, heap %v)\n%s",
				code, body, failBound, stuckStage(m), m["weir_memory_budget_in_use_bytes"], m["weir_flow_live_heap_bytes"],
				tail(d.log.String(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	failed := time.Now()
	exitBound := stuckExit + stuckShutdown + 5*time.Second + stuckSlack
	for !d.exited() && time.Since(failed) < exitBound {
		checkControls()
		time.Sleep(100 * time.Millisecond)
	}
	code := d.exitCode(time.Millisecond)
	if code != 70 {
		t.Fatalf("exit code %d %v after /live failed (want 70 within %v)\n%s", code, time.Since(failed).Round(time.Millisecond),
			exitBound, tail(d.log.String(), 4000))
	}
	t.Logf("exited with code 70 %v after /live failed", time.Since(failed).Round(time.Millisecond))
	if !strings.Contains(d.log.String(), "stuck detector: exiting") {
		t.Errorf("the log does not say why the daemon exited\n%s", tail(d.log.String(), 4000))
	}
}

// stuckStage names the stuck detector's stage in a scrape.
func stuckStage(m map[string]float64) string {
	for _, s := range []string{"clear", "warn", "unhealthy", "exit"} {
		if m[`weir_flow_stuck_stage{stage="`+s+`"}`] == 1 {
			return s
		}
	}
	return "?"
}

// TestStuckDetectorHungSink: a socket-ingest node whose file sink's
// fdatasync never returns, with 8 MiB of records held by the drain's
// commit (a quarter of the budget): /live fails within
// flow.stuck_fail_after and the process exits with 70. The drain reads
// sealed segments only here, so that its hung commit holds the whole
// segment (reading the open segment, its first sub-batch would hold the
// records that had arrived by then, fewer than the detector's share).
func TestStuckDetectorHungSink(t *testing.T) {
	d := newDaemon(t, append(stuckArgs(), "--sink-file-batch-records", "64", "--drain-open-segments=false")...)
	d.env = []string{hangSync("*/out/*")}
	d.start()
	pushAcked(t, d.socket, bigRecords("hung", 16, 512<<10))
	expectStuckExit(t, d, time.Now(), stuckFail+stuckSlack)
}

// TestStuckDetectorSlowSinkStaysLive: the same node and load, but the
// sink's fdatasync takes 300 ms and returns. Records keep flowing for
// longer than flow.stuck_fail_after + flow.stuck_exit_after and the node
// then idles as long: /live answers 200 throughout (a saturated sink, or an
// idle node with a small budget, is not stuck), and every record arrives.
func TestStuckDetectorSlowSinkStaysLive(t *testing.T) {
	d := newDaemon(t, append(stuckArgs(), "--sink-file-batch-records", "4")...)
	d.env = []string{"WEIR_FAULTS=sync:*/out/*:delay=300ms"}
	d.start()
	watch := stuckFail + stuckExit + 2*time.Second
	done := make(chan [][]byte, 1)
	go func() {
		var all [][]byte
		end := time.Now().Add(watch)
		for k := 0; time.Now().Before(end); k++ {
			recs := bigRecords(fmt.Sprintf("slow%03d", k), 4, 512<<10)
			c, err := client.Dial(context.Background(), d.socket)
			if err != nil {
				break
			}
			for _, r := range recs {
				if c.Push(context.Background(), r, client.Durable) == nil {
					all = append(all, r)
				}
			}
			c.Close(context.Background())
			time.Sleep(200 * time.Millisecond)
		}
		done <- all
	}()
	checkLive := func(what string, dur time.Duration) {
		end := time.Now().Add(dur)
		n := 0
		for time.Now().Before(end) {
			if code, body := d.live(); code != 200 {
				t.Fatalf("%s: /live %d %q\n%s", what, code, body, tail(d.log.String(), 4000))
			}
			n++
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("%s: /live 200 on %d checks over %v", what, n, dur)
	}
	checkLive("slow sink under load", watch)
	recs := <-done
	checkLive("idle", watch)
	want := map[string]bool{}
	for _, r := range recs {
		want[string(r)] = true
	}
	waitDelivered(t, d, want, 60*time.Second)
	m := d.scrape()
	if st := stuckStage(m); st != "clear" {
		t.Errorf("stuck stage %s at the end", st)
	}
	t.Logf("%d records of 512 KiB through a sink 300 ms per fdatasync; stuck stage %s", len(recs), stuckStage(m))
}

// TestStuckDetectorRecoveryNode: a recovery-only node (role = "recovery",
// no socket, no source) reading another node's raw into a file secondary
// whose fdatasync never returns: its recovery window holds the records,
// /live fails and the process exits with 70.
func TestStuckDetectorRecoveryNode(t *testing.T) {
	// The raw: a node's file sink in raw mode (it has a secondary of its
	// own), filled and stopped.
	src := newDaemon(t, "--config", writeConfig(t, "[[secondary]]\nname = \"copy\"\ntype = \"file\"\n"))
	src.start()
	recs := bigRecords("rec", 16, 512<<10)
	pushAcked(t, src.socket, recs)
	want := map[string]bool{}
	for _, r := range recs {
		want[string(r)] = true
	}
	waitDelivered(t, src, want, 30*time.Second)
	if err := src.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	// The control node recovers a copy of the same raw into a secondary
	// that works.
	rawCopy := filepath.Join(t.TempDir(), "raw")
	if err := os.CopyFS(rawCopy, os.DirFS(src.outDir())); err != nil {
		t.Fatal(err)
	}
	recNode := func(raw, name string) *daemon {
		cfg := writeConfig(t, fmt.Sprintf("[[secondary]]\nname = %q\ntype = \"file\"\n", name))
		// A recovery window reads no more than it reserved: seeded with
		// the records' size, the first window after the start holds a
		// quarter of the budget (above the stuck threshold), not one
		// record learnt from a 256-byte estimate.
		return newDaemon(t, append(stuckArgs(), "--config", cfg, "--role", "recovery", "--sink-file-dir", raw,
			"--recovery-window-records", "64", "--record-size-estimate", "512KiB")...)
	}
	rec, control := recNode(src.outDir(), "hang"), recNode(rawCopy, "ok")
	rec.env = []string{hangSync("*/secondary/hang/*")}
	rec.startNoSocket()
	control.startNoSocket()
	expectStuckExit(t, rec, time.Now(), stuckFail+stuckSlack, control)
	if got := len(sinkPayloads(t, filepath.Join(control.dir, "secondary", "ok"))); got != len(recs) {
		t.Errorf("the control node recovered %d of %d records", got, len(recs))
	}
}

// TestStuckDetectorRawGate: gate = "raw" (no write-ahead buffer): a Kafka
// source writes straight into a file raw whose fdatasync never returns;
// the source's batch is held, /live fails and the process exits with 70.
func TestStuckDetectorRawGate(t *testing.T) {
	const topic, group = "stuck", "weir-stuck"
	c, cl := startKafka(t, topic, 1)
	recs := bigRecords("gate", 16, 512<<10)
	var krecs []*kgo.Record
	for _, r := range recs {
		krecs = append(krecs, &kgo.Record{Value: r})
	}
	if err := cl.ProduceSync(ctxTimeout(t, 30*time.Second), krecs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	node := func(group string) *daemon {
		cfg := writeConfig(t, "gate = \"raw\"\n"+kafkaSourceTOML("orders", group, topic, c.ListenAddrs()))
		return newDaemon(t, append(stuckArgs(), "--config", cfg)...)
	}
	// The control node reads the same topic in a group of its own into a
	// raw that works.
	d, control := node(group), node(group+"-control")
	d.env = []string{hangSync("*/out/*")}
	d.startNoSocket()
	control.startNoSocket()
	expectStuckExit(t, d, time.Now(), stuckFail+stuckSlack+5*time.Second, control) // + the group's join
	if got := len(sinkPayloads(t, control.outDir())); got != len(recs) {
		t.Errorf("the control node wrote %d of %d records to raw", got, len(recs))
	}
}
