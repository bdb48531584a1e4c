package systest

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/sink/parquetsink"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// parquetRaw reads a Parquet raw directory: its ids and how often each
// payload is there. A stage may be converted while it is read, so a
// failed read is tried again.
func parquetRaw(t *testing.T, dir string) (map[sink.RecordID]bool, map[string]int) {
	t.Helper()
	var recs []parquetsink.Record
	var err error
	for range 20 {
		if recs, err = parquetsink.ReadDir(vfs.OS, dir); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	ids, payloads := map[sink.RecordID]bool{}, map[string]int{}
	for _, r := range recs {
		ids[r.ID] = true
		payloads[string(r.Payload)]++
	}
	return ids, payloads
}

// TestParquetRawWithSecondary: primary raw is a Parquet directory in raw
// mode (stages fdatasynced per batch, converted to Parquet files named by
// their first position; the offset store beside them) and a Postgres
// secondary is cut off. The daemon is killed -9 while raw is written and
// again while the secondary is recovered from the Parquet files; in the
// end raw holds every acked record and the secondary equals raw by
// weir_record_id.
func TestParquetRawWithSecondary(t *testing.T) {
	sec := newPGTable(t, "weir_pqraw_sec")
	d := newDaemon(t, "--config", writeConfig(t, `
[sink]
type = "parquet"
[sink.parquet]
max_bytes = 65536
batch_records = 100
`+pgSecondaryTOML(sec.via, sec.table, "queue_batches = 2", `timeout = "2s"
create_table = true`)), "--recovery-window-records", "100", "--coverage-flush-interval", "50ms")
	rawDir := filepath.Join(d.dir, "parquet")
	sec.proxy.Cut()
	d.start()
	l := newLedger()
	const n1, n2 = 4000, 2000
	produce(ctxTimeout(t, 30*time.Second), t, d.socket, "pq1", n1, 100, client.Durable, l, 10*time.Second)
	d.kill()
	d.start()
	produce(ctxTimeout(t, 30*time.Second), t, d.socket, "pq2", n2, 100, client.Durable, l, 10*time.Second)
	if got := l.ackedCount(); got != n1+n2 {
		t.Fatalf("%d of %d records acked", got, n1+n2)
	}
	d.waitScrape("the secondary behind", 30*time.Second, func(m map[string]float64) bool { return m["weir_recovery_backlog"] > 0 })
	if err := sec.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	// Recovery from raw is fast; the kill lands in it or just after it
	// (TestKill9DuringRecovery pins a kill inside a recovery).
	m := d.waitScrape("recovery under way", 60*time.Second, func(m map[string]float64) bool { return recovered(m) > 0 })
	d.kill()
	t.Logf("killed with the recovery backlog at %.0f", m["weir_recovery_backlog"])
	d.start()
	acked := l.snapshot()
	deadline := time.Now().Add(90 * time.Second)
	for {
		tbl := tableIDs(t, sec.conn, sec.table) // before raw: raw only grows
		ids, payloads := parquetRaw(t, rawDir)
		missingRaw, missingSec, extra := 0, 0, 0
		for p := range acked {
			if payloads[p] == 0 {
				missingRaw++
			}
		}
		for id := range ids {
			if !tbl[id] {
				missingSec++
			}
		}
		for id := range tbl {
			if !ids[id] {
				extra++
			}
		}
		if extra != 0 {
			t.Fatalf("the secondary holds %d ids raw does not", extra)
		}
		if missingRaw == 0 && missingSec == 0 {
			t.Logf("Parquet raw holds all %d acked records (%d ids); the secondary equals raw by weir_record_id", len(acked), len(ids))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("raw misses %d acked records, the secondary misses %d raw records\n%s", missingRaw, missingSec, tail(d.log.String(), 4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	d.waitScrape("backlog 0", 30*time.Second, func(m map[string]float64) bool { return m["weir_recovery_backlog"] == 0 })
}
