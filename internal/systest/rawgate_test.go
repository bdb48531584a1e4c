package systest

import (
	"fmt"
	"os"
	"path/filepath"
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

	produced := produceAndKill(t, d, cl, group, topic, "g", n,
		func() map[string]int { return tablePayloads(t, db.conn, db.table) }, d.startNoSocket)
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
