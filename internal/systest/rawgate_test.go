package systest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// TestKafkaRawGate: gate = "raw", no write-ahead buffer: a Kafka source
// writes straight into a Postgres [sink] table and commits its offsets
// only after the table's commit. The daemon is killed -9 under a steady
// producer; right after each kill every record below the group's committed
// offsets must already be in the table (nothing else holds it), and in the
// end the table holds every produced record.
func TestKafkaRawGate(t *testing.T) {
	const (
		topic = "direct"
		group = "weir-direct"
		n     = 4000
	)
	db := newPGTable(t, "weir_rawgate")
	c, cl := startKafka(t, topic, 3)
	cfg := writeConfig(t, fmt.Sprintf(`
gate = "raw"
[sink]
type = "postgres"
[sink.postgres]
dsn = %q
table = %q
`, db.dsn, db.table)+kafkaSourceTOML("orders", group, topic, c.ListenAddrs()))
	d := newDaemon(t, "--config", cfg)
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
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := tablePayloads(t, db.conn, db.table)
		missing := 0
		for p := range produced {
			if got[p] == 0 {
				missing++
			}
		}
		if missing == 0 {
			t.Logf("all %d records in the table after %d kills, with no write-ahead buffer", n, sourceKillCycles)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the table misses %d of %d records\n%s", missing, n, tail(d.log.String(), 4000))
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
