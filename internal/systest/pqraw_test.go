package systest

import (
	"path/filepath"
	"testing"
	"time"

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
	acked := pushKillRecover(t, d, sec, "pq", 4000, 2000)
	waitRawAndSecondary(t, d, sec.conn, sec.table, acked, func() (map[sink.RecordID]bool, map[string]int) {
		return parquetRaw(t, filepath.Join(d.dir, "parquet"))
	}, 90*time.Second)
	d.waitScrape("backlog 0", 30*time.Second, func(m map[string]float64) bool { return m["weir_recovery_backlog"] == 0 })
}
