package systest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSinkDownAtStartRawGate: gate = "raw" with a Postgres raw table
// (whose offset store lives in the same database) and a file secondary,
// the database unreachable at start. The daemon starts and says its sink
// is down; the Kafka source does not read (nowhere to make a record
// durable) and commits nothing; once the database answers, every
// produced record reaches raw and the secondary.
func TestSinkDownAtStartRawGate(t *testing.T) {
	const (
		topic = "down-raw"
		group = "weir-down-raw"
		n     = 2000
	)
	db := newPGTable(t, "weir_down_raw")
	db.table = pgRaw(t, db.conn)
	via, p := pgBehind(t, db.dsn, proxyRefuse)
	c, cl := startKafka(t, topic, 2)
	cfg := writeConfig(t, fmt.Sprintf(`
gate = "raw"
sink_health_interval = "1s"
[sink]
type = "postgres"
[sink.postgres]
dsn = %q
table = %q
timeout = "1s"
[[secondary]]
name = "copy"
type = "file"
`, via, db.table)+kafkaSourceTOML("orders", group, topic, c.ListenAddrs()))
	d := newDaemon(t, "--config", cfg)
	launched := time.Now()
	d.startNoSocket()
	if took := time.Since(launched); took > scaledReadyBound()+2*time.Second {
		t.Errorf("ready %v after launch with raw down", took)
	}
	checkReadyDegraded(t, d, "postgres")

	l := &kafkaLedger{bySrc: map[string]kafkaPos{}}
	produceKafka(ctxTimeout(t, 30*time.Second), t, cl, "rd", n, 100, 0, l)
	time.Sleep(2 * time.Second)
	if off := committedOffsets(t, cl, group, topic); len(off) > 0 {
		t.Fatalf("offsets committed while raw was down: %v", off)
	}
	p.set(proxyForward)
	back := time.Now()
	copyDir := filepath.Join(d.dir, "secondary", "copy")
	deadline := back.Add(60 * time.Second)
	for {
		got := tablePayloads(t, db.conn, db.table)
		sec, _ := readSinkPayloads(copyDir) // no directory until the secondary opens
		missing, missingSec := 0, 0
		for pl := range l.snapshot() {
			if got[pl] == 0 {
				missing++
			}
			if sec[pl] == 0 {
				missingSec++
			}
		}
		if missing == 0 && missingSec == 0 {
			t.Logf("raw back: all %d records in raw and the secondary %v after its return", n, time.Since(back).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("raw back for 60s: raw misses %d, the secondary %d of %d\n%s", missing, missingSec, n, tail(d.log.String(), 6000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := d.stop(20 * time.Second); err != nil {
		t.Errorf("stop: %v\n%s", err, tail(d.log.String(), 4000))
	}
}

// checkReadyDegraded waits (at most 10 s) for /ready to answer 200 with a
// body saying the sink of kind is down.
func checkReadyDegraded(t *testing.T, d *daemon, kind string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body, err := d.httpGet("/ready")
		if err == nil && code == 200 && strings.Contains(body, sinkDownReady) && strings.Contains(body, kind) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/ready: %d %q (%v), want 200 with %q and %q", code, body, err, sinkDownReady, kind)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
