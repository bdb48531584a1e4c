package mysqlsink

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

// todaysTable is the table the sink created before metadata columns
// existed.
const todaysTable = `CREATE TABLE %s (
	weir_record_id BINARY(16) NOT NULL PRIMARY KEY,
	payload LONGBLOB NOT NULL,
	source VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	durability VARCHAR(16) NOT NULL,
	received_at DATETIME(6) NOT NULL,
	committed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`

func (e *env) columnList(t *testing.T) string {
	t.Helper()
	db := e.db()
	defer db.Close()
	var cols string
	err := db.QueryRow(`SELECT GROUP_CONCAT(COLUMN_NAME ORDER BY ORDINAL_POSITION) FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, e.table).Scan(&cols)
	if err != nil {
		t.Fatal(err)
	}
	return cols
}

// TestTodaysTableWithMetadataColumns: a table created before metadata
// columns existed keeps working unchanged with the option off (records
// committed, no column added); with it on the sink adds the columns and
// writes key, headers and event time, old rows reading as having none.
func TestTodaysTableWithMetadataColumns(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.exec(fmt.Sprintf(todaysTable, quoteIdent(e.table)))
	before := e.columnList(t)
	s := e.open(t, e.dsn, Options{})
	old := mkRecords("old", 3)
	old[0].Key, old[0].EventTime = []byte("dropped"), time.Now() // not written with the option off
	res, err := s.Commit(ctx, sink.NewBatch(old))
	if err != nil || len(res.Rejected) != 0 {
		t.Fatalf("Commit: %v %v", res, err)
	}
	s.Close()
	if got := e.columnList(t); got != before {
		t.Fatalf("columns changed with metadata_columns off: %s, was %s", got, before)
	}

	s = e.open(t, e.dsn, Options{MetadataColumns: true})
	if got := e.columnList(t); !strings.HasSuffix(got, ",weir_key,weir_headers,weir_event_time") {
		t.Fatalf("columns %s: metadata columns not added", got)
	}
	recs := mkRecords("new", 3)
	recs[0].Key = []byte{0, 0xff}
	recs[0].Headers = []sink.Header{{Key: "z", Value: []byte("1")}, {Key: "a", Value: []byte{0}}, {Key: "z", Value: []byte("2")}}
	recs[0].EventTime = time.Date(2024, 1, 2, 3, 4, 5, 6000, time.UTC)
	recs[1].Key = []byte{}
	if res, err := s.Commit(ctx, sink.NewBatch(recs)); err != nil || len(res.Rejected) != 0 {
		t.Fatalf("Commit: %v %v", res, err)
	}
	got, err := e.readBackMeta(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	want := map[sink.RecordID]sink.Record{}
	for _, r := range old {
		r.Key, r.EventTime = nil, time.Time{}
		want[r.ID] = r
	}
	for _, r := range recs {
		want[r.ID] = r
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for _, g := range got {
		if why := sinktest.MetaDiff(want[g.ID], sink.Record{Key: g.Key, Headers: g.Headers, EventTime: g.EventTime}); why != "" {
			t.Errorf("%s: %s", g.Payload, why)
		}
	}
}
