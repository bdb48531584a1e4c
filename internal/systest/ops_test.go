package systest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

// weirCmd runs the weir binary with args and returns stdout, stderr and
// the exit code. It never waits longer than 30s (a hang fails the test).
func weirCmd(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, weirBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("weir %v hung", args)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && !strings.HasSuffix(p, "LOCK") {
			b, _ := os.ReadFile(p)
			out[p] = string(b)
		}
		return nil
	})
	return out
}

// TestInspectVerify runs `weir inspect` and `weir verify` as subprocesses on
// a WAB directory left by kill -9 (open segments), with a torn tail
// appended, and then with a corrupted sealed segment. They report each
// state, never modify anything, and verify's exit code tells corruption.
// Then `weir repair` reports the damage, and with --cut cuts it.
func TestInspectVerify(t *testing.T) {
	d := newDaemon(t, "--shards", "2", "--segment-max-age", "1h")
	d.start()
	ctx := ctxTimeout(t, 20*time.Second)
	l := newLedger()
	produce(ctx, t, d.socket, "ops", 300, 1, client.Durable, l, 10*time.Second)
	d.kill()

	// A torn tail on one open segment: half a record of garbage.
	open, _ := filepath.Glob(filepath.Join(d.wabDir(), "shard-000", "*.wab"))
	if len(open) == 0 {
		t.Fatal("no open segment after kill -9")
	}
	f, _ := os.OpenFile(open[0], os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{0, 0, 1, 0, 0xde, 0xad})
	f.Close()

	before := snapshotDir(t, d.wabDir())
	out, errOut, code := weirCmd(t, nil, "inspect", "--wab-dir", d.wabDir())
	if code != 0 || !strings.Contains(out, "torn tail at") || !strings.Contains(out, "open") {
		t.Fatalf("inspect: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "300 records") {
		t.Errorf("inspect summary does not count the 300 records:\n%s", out)
	}
	_, _, code = weirCmd(t, nil, "verify", d.wabDir())
	if code != 0 {
		t.Fatalf("verify failed on a torn tail (normal after a crash): exit %d", code)
	}
	if after := snapshotDir(t, d.wabDir()); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatal("inspect/verify modified the WAB directory")
	}

	// A sealed segment from a fresh daemon stopped gracefully.
	d2, seg := undrainedSegment(t, "sealed", 200)
	sealed := []string{seg}
	b, _ := os.ReadFile(sealed[0])
	b[len(b)/2] ^= 0xff
	os.WriteFile(sealed[0], b, 0o600)
	out, _, code = weirCmd(t, nil, "verify", "--wab-dir", d2.wabDir())
	if code != 1 || !strings.Contains(out, "CORRUPT at") || !strings.Contains(out, filepath.Base(sealed[0])) {
		t.Fatalf("verify on a corrupt sealed segment: exit %d\n%s", code, out)
	}
	// weir serve trusts a sealed segment's footer and reads only its ends;
	// damage there makes it refuse to start, naming file and offset.
	b[len(b)-3] ^= 0xff
	os.WriteFile(sealed[0], b, 0o600)
	if err := d2.launch(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d2.done:
	case <-time.After(15 * time.Second):
		t.Fatal("daemon started on a sealed segment with a corrupt footer")
	}
	if log := d2.log.String(); d2.err == nil || !strings.Contains(log, filepath.Base(sealed[0])) || !strings.Contains(log, "offset") {
		t.Fatalf("daemon did not refuse naming file and offset (err %v):\n%s", d2.err, tail(log, 2000))
	}
	// weir repair reports the damage and changes nothing; with --cut it
	// cuts the segment at its first bad frame, and verify passes again.
	before = snapshotDir(t, d2.wabDir())
	out, _, code = weirCmd(t, nil, "repair", d2.wabDir())
	if code != 1 || !strings.Contains(out, filepath.Base(sealed[0])) || !strings.Contains(out, "--cut") {
		t.Fatalf("repair without --cut: exit %d\n%s", code, out)
	}
	if after := snapshotDir(t, d2.wabDir()); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatal("repair without --cut modified the WAB directory")
	}
	out, _, code = weirCmd(t, nil, "repair", "--cut", "--wab-dir", d2.wabDir())
	if code != 0 || !strings.Contains(out, "cut") {
		t.Fatalf("repair --cut: exit %d\n%s", code, out)
	}
	if out, _, code = weirCmd(t, nil, "verify", d2.wabDir()); code != 0 {
		t.Fatalf("verify after repair --cut: exit %d\n%s", code, out)
	}
}

// undrainedSegment runs a one-shard daemon, pushes n Durable records
// named "<name>-<i>" and stops it gracefully: the segment is sealed only at
// the stop (segment-max-age 1h), and the drain reads sealed segments only
// (drain_open_segments = false), so it has not read it. It returns the
// stopped daemon and the sealed segment's path.
func undrainedSegment(t *testing.T, name string, n int) (*daemon, string) {
	t.Helper()
	d := newDaemon(t, "--shards", "1", "--segment-max-age", "1h", "--drain-open-segments=false")
	d.start()
	l := newLedger()
	produce(ctxTimeout(t, 30*time.Second), t, d.socket, name, n, 1, client.Durable, l, 10*time.Second)
	if got := l.ackedCount(); got != n {
		t.Fatalf("%d of %d records acked", got, n)
	}
	if err := d.stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	sealed, _ := filepath.Glob(filepath.Join(d.wabDir(), "shard-000", "*.wab.sealed"))
	if len(sealed) != 1 {
		t.Fatalf("want one sealed segment after a graceful stop, got %v", sealed)
	}
	return d, sealed[0]
}

// TestRepairSalvageCLI: the real binary salvages a sealed segment damaged
// in its middle — the records after the damage are kept, the damaged file
// is kept under damaged/ — and the daemon, started on the repaired
// directory, delivers every kept record to the sink with the id it had
// before the damage.
func TestRepairSalvageCLI(t *testing.T) {
	d, seg := undrainedSegment(t, "salvage", 200)

	// The ids the drain gives each record, and where record 100 lies.
	ids := map[string]sink.RecordID{}
	var damageAt int64
	r, err := wab.OpenSegment(vfs.OS, seg)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(0); ; i++ {
		off := r.Offset()
		rec, err := r.Next()
		if err != nil {
			break
		}
		sr, err := drain.SinkRecord(r.Header(), i, rec)
		if err != nil {
			t.Fatal(err)
		}
		ids[string(rec.Payload)] = sr.ID
		if i == 100 {
			damageAt = off + wab.FrameOverhead + int64(len(rec.Meta)) + 3
		}
	}
	r.Close()
	if len(ids) != 200 || damageAt == 0 {
		t.Fatalf("read %d records from %s", len(ids), seg)
	}
	b, _ := os.ReadFile(seg)
	b[damageAt] ^= 0xff
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	lostPayload := "salvage-0000100"
	delete(ids, lostPayload)

	out, errOut, code := weirCmd(t, nil, "repair", "--salvage", "--wab-dir", d.wabDir())
	aside := filepath.Join(d.wabDir(), wab.DamagedDirName, "shard-000", filepath.Base(seg))
	if code != 0 || !strings.Contains(out, "199 records kept") || !strings.Contains(out, "kept at "+filepath.Join(wab.DamagedDirName, "shard-000", filepath.Base(seg))) {
		t.Fatalf("repair --salvage: exit %d\n%s\n%s", code, out, errOut)
	}
	if kept, err := os.ReadFile(aside); err != nil || !bytes.Equal(kept, b) {
		t.Fatalf("the damaged original is not kept at %s: %v", aside, err)
	}
	if out, _, code = weirCmd(t, nil, "verify", d.wabDir()); code != 0 {
		t.Fatalf("verify after repair --salvage: exit %d\n%s", code, out)
	}

	d.start()
	want := map[string]bool{}
	for p := range ids {
		want[p] = true
	}
	waitDelivered(t, d, want, 30*time.Second)
	lines, err := readSinkLines(d.outDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range lines {
		p := string(ln.Payload)
		if p == lostPayload {
			t.Fatalf("the damaged record %s was delivered", p)
		}
		if id, ok := ids[p]; ok && ln.ID != id {
			t.Fatalf("record %s delivered with id %v, had %v before the salvage", p, ln.ID, id)
		}
	}
	if err := d.stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedSegmentGauge: a sealed segment damaged in its middle is
// found by the drain of a running daemon — weir_segments_damaged is 1, the
// records before the damage are delivered, weir status says DAMAGED with
// what to run and exits 1 — and after weir repair --salvage on the stopped
// daemon the next start counts 0 and delivers the rest.
func TestDamagedSegmentGauge(t *testing.T) {
	d, seg := undrainedSegment(t, "damaged", 50)
	r, err := wab.OpenSegment(vfs.OS, seg)
	if err != nil {
		t.Fatal(err)
	}
	var damageAt int64
	for i := 0; i <= 20; i++ {
		off := r.Offset()
		rec, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		damageAt = off + wab.FrameOverhead + int64(len(rec.Meta)) + 1 // in record 20's payload
	}
	r.Close()
	b, _ := os.ReadFile(seg)
	b[damageAt] ^= 0xff
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	damaged := func() float64 {
		g := scrape(t, d)["weir_segments_damaged"].GetMetric()
		if len(g) != 1 {
			t.Fatalf("weir_segments_damaged has %d series", len(g))
		}
		return g[0].GetGauge().GetValue()
	}

	d.start()
	before := map[string]bool{}
	for i := range 20 {
		before[fmt.Sprintf("damaged-%07d", i)] = true
	}
	waitDelivered(t, d, before, 30*time.Second)
	deadline := time.Now().Add(15 * time.Second)
	for damaged() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("weir_segments_damaged = %v, want 1", damaged())
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, errOut, code := weirCmd(t, nil, "status", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", d.metricsPort))
	if code != 1 || !strings.Contains(out, "DAMAGED:      1 sealed segments") || !strings.Contains(out, "weir repair --salvage") {
		t.Fatalf("weir status with a damaged segment: exit %d\n%s\n%s", code, out, errOut)
	}
	if err := d.stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}

	if out, errOut, code := weirCmd(t, nil, "repair", "--salvage", "--wab-dir", d.wabDir()); code != 0 {
		t.Fatalf("repair --salvage: exit %d\n%s\n%s", code, out, errOut)
	}
	d.start()
	rest := map[string]bool{}
	for i := 21; i < 50; i++ {
		rest[fmt.Sprintf("damaged-%07d", i)] = true
	}
	waitDelivered(t, d, rest, 30*time.Second)
	if v := damaged(); v != 0 {
		t.Fatalf("weir_segments_damaged = %v after the salvage, want 0", v)
	}
	if err := d.stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestDeadLetterCLI: list, show, replay (into the running daemon, through
// the client) and purge, each as a subprocess.
func TestDeadLetterCLI(t *testing.T) {
	d := newDaemon(t)
	d.start()
	// A dead-letter file as the drain writes them.
	var recs []wab.Record
	for i := 0; i < 1500; i++ {
		recs = append(recs, wab.Record{
			Received: time.Now().UnixNano(),
			Meta: record.Encode(&record.Meta{ID: sink.RecordID{byte(i)}, HasID: true, Reject: &record.Rejection{
				Code: record.CodeSinkRefused, Error: "test: refused by sink", Seq: 7, Index: uint64(i), HasLocation: true}}),
			Payload: []byte(fmt.Sprintf("dead-%05d", i)),
		})
	}
	dir := drain.DeadLetterDir(d.wabDir())
	if err := vfs.OS.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	name := drain.DeadLetterName(1)
	if err := wab.WriteSealed(vfs.OS, filepath.Join(dir, name), wab.Header{Shard: wab.DeadLetterShard}, recs); err != nil {
		t.Fatal(err)
	}

	out, _, code := weirCmd(t, nil, "deadletter", "list", "--wab-dir", d.wabDir())
	if code != 0 || !strings.Contains(out, name) || !strings.Contains(out, "1500") {
		t.Fatalf("deadletter list: exit %d\n%s", code, out)
	}
	out, _, code = weirCmd(t, nil, "deadletter", "show", "--wab-dir", d.wabDir(), name)
	if code != 0 || !strings.Contains(out, "test: refused by sink") || !strings.Contains(out, `"dead-00007"`) {
		t.Fatalf("deadletter show: exit %d\n%s", code, tail(out, 1000))
	}
	_, _, code = weirCmd(t, nil, "deadletter", "purge", "--wab-dir", d.wabDir(), "--all")
	if code != 2 {
		t.Fatalf("purge --all without --yes: exit %d, want 2", code)
	}
	out, errOut, code := weirCmd(t, nil, "deadletter", "replay", "--wab-dir", d.wabDir(), "--socket-path", d.socket, "--remove", name)
	if code != 0 || !strings.Contains(out, "replayed 1500 records") {
		t.Fatalf("deadletter replay: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "1500/1500") {
		t.Errorf("no progress bar on a 1500-record replay:\n%q", errOut)
	}
	want := map[string]bool{}
	for _, r := range recs {
		want[string(r.Payload)] = true
	}
	waitDelivered(t, d, want, 30*time.Second)
	if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
		t.Fatalf("replay --remove left the file: %v", err)
	}
	out, _, _ = weirCmd(t, nil, "deadletter", "list", "--wab-dir", d.wabDir())
	if !strings.Contains(out, "0 files") {
		t.Fatalf("list after replay --remove:\n%s", out)
	}
	// purge by name.
	name2 := drain.DeadLetterName(2)
	if err := wab.WriteSealed(vfs.OS, filepath.Join(dir, name2), wab.Header{Shard: wab.DeadLetterShard}, recs[:3]); err != nil {
		t.Fatal(err)
	}
	out, _, code = weirCmd(t, nil, "deadletter", "purge", "--wab-dir", d.wabDir(), name2)
	if code != 0 || !strings.Contains(out, "removed "+name2) {
		t.Fatalf("purge: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, name2)); !os.IsNotExist(err) {
		t.Fatalf("purge left the file: %v", err)
	}
}

// TestStatusCLI: `weir status` against a running daemon summarises its
// metrics and health; against nothing it fails clearly.
func TestStatusCLI(t *testing.T) {
	d := newDaemon(t)
	d.start()
	ctx := ctxTimeout(t, 20*time.Second)
	l := newLedger()
	produce(ctx, t, d.socket, "status", 500, 10, client.Durable, l, 10*time.Second)
	waitDelivered(t, d, l.snapshot(), 30*time.Second)
	addr := fmt.Sprintf("127.0.0.1:%d", d.metricsPort)
	deadline := time.Now().Add(15 * time.Second)
	var out string
	for {
		var code int
		var errOut string
		out, errOut, code = weirCmd(t, nil, "status", "--metrics-addr", addr)
		if code == 0 && strings.Contains(out, "500 records delivered") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("weir status: exit %d\n%s\n%s", code, out, errOut)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, want := range []string{"ready, live", "500 received, 500 acked (durable 500", "none failed", "sink file:    healthy", "records per commit", "dead letter:  0 files, 0 B of 1.0 GiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("weir status output lacks %q:\n%s", want, out)
		}
	}
	d.stop(20 * time.Second)
	_, errOut, code := weirCmd(t, nil, "status", "--metrics-addr", addr)
	if code != 1 || !strings.Contains(errOut, "cannot reach") {
		t.Fatalf("status against a stopped daemon: exit %d, %q", code, errOut)
	}
}
