package systest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestKafkaRawGate: gate = "raw", no write-ahead buffer: a Kafka source
// writes straight into a Postgres raw table — through the fan-out, which
// also feeds a file secondary — and commits its offsets only after raw's
// commit. The daemon is killed -9 under a steady producer; right after each
// kill every record below the group's committed offsets must already be in
// raw (nothing else holds it), and in the end raw and the secondary hold
// every produced record.
func TestKafkaRawGate(t *testing.T) {
	const (
		topic = "direct"
		group = "weir-direct"
		n     = 4000
	)
	db := newPGTable(t, "weir_rawgate")
	db.table = pgRaw(t, db.conn) // raw: dropped with its offset store rows
	c, cl := startKafka(t, topic, 3)
	cfg := writeConfig(t, fmt.Sprintf(`
gate = "raw"
[sink]
type = "postgres"
[sink.postgres]
dsn = %q
table = %q
[[secondary]]
name = "copy"
type = "file"
`, db.dsn, db.table)+kafkaSourceTOML("orders", group, topic, c.ListenAddrs()))
	d := newDaemon(t, "--config", cfg, "--coverage-flush-interval", "50ms")
	d.startNoSocket()

	l := &kafkaLedger{bySrc: map[string]kafkaPos{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		produceKafka(ctx, t, cl, "g", n, 20, 100*time.Millisecond, l)
	}()
	var before int64
	for cycle := 1; cycle <= sourceKillCycles; cycle++ {
		waitCommitted(t, cl, group, topic, min(before, n-1), 30*time.Second)
		time.Sleep(time.Duration(200+cycle*137%400) * time.Millisecond)
		d.kill()
		committed := committedOffsets(t, cl, group, topic)
		produced := l.snapshot()
		checkCommittedBehindDurable(t, cycle, committed, produced, tablePayloads(t, db.conn, db.table))
		t.Logf("cycle %d: produced %d, committed %v", cycle, len(produced), committed)
		before = 0
		for _, o := range committed {
			before += o
		}
		d.startNoSocket()
	}
	wg.Wait()
	produced := l.snapshot()
	if len(produced) != n {
		t.Fatalf("produced %d of %d", len(produced), n)
	}
	copyDir := filepath.Join(d.dir, "secondary", "copy")
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := tablePayloads(t, db.conn, db.table)
		sec := sinkPayloads(t, copyDir)
		missing, missingSec := 0, 0
		for p := range produced {
			if got[p] == 0 {
				missing++
			}
			if sec[p] == 0 {
				missingSec++
			}
		}
		if missing == 0 && missingSec == 0 {
			t.Logf("all %d records in raw and in the secondary after %d kills, with no write-ahead buffer", n, sourceKillCycles)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("raw misses %d and the secondary %d of %d records\n%s", missing, missingSec, n, tail(d.log.String(), 4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := os.Stat(d.wabDir()); !os.IsNotExist(err) {
		t.Errorf("%s exists with gate = raw (%v)", d.wabDir(), err)
	}
	m := d.scrape()
	if sum(m, "weir_source_records_written_total") == 0 {
		t.Error("weir_source_records_written_total is 0")
	}
}
