package pgsink

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

// metaRecords are records with a key (an empty one too), headers (a
// repeated name, a NUL in a value) and an event time, and a bare one.
func metaRecords(prefix string) []sink.Record {
	recs := rawRecords(prefix, 4)
	recs[0].Key = []byte("k0")
	recs[0].Headers = []sink.Header{{Key: "z", Value: []byte("1")}, {Key: "a", Value: []byte{0, 0xff}}, {Key: "z", Value: []byte("2")}}
	recs[0].EventTime = time.Date(2024, 1, 2, 3, 4, 5, 6000, time.UTC)
	recs[1].Key = []byte{}
	recs[2].Headers = []sink.Header{{Key: "h"}}
	return recs
}

func sameMeta(a, b sink.Record) bool { return sinktest.MetaDiff(b, a) == "" }

// TestRawReadsMetadataBack: a raw table keeps key, headers and event time
// (without any option) and ReadFrom — recovery's read — returns them.
func TestRawReadsMetadataBack(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, e.dsn, Options{Positions: true})
	want := metaRecords("m")
	commitRaw(t, s, want)
	got := readAll(t, s, 3)
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i, p := range got {
		if !sameMeta(p.Record, want[i]) {
			t.Errorf("position %d: key %q headers %q event %s; want %q %q %s", i,
				p.Record.Key, p.Record.Headers, p.Record.EventTime, want[i].Key, want[i].Headers, want[i].EventTime)
		}
	}
}

// Tables as the sink created them before metadata columns existed.
const (
	todaysTable = `CREATE TABLE %s (
	weir_record_id uuid PRIMARY KEY,
	payload bytea NOT NULL,
	source text NOT NULL,
	durability text NOT NULL,
	received_at timestamptz NOT NULL,
	committed_at timestamptz NOT NULL DEFAULT now()
)`
	todaysRawTable = `CREATE TABLE %s (
	weir_position bigint PRIMARY KEY,
	weir_record_id uuid NOT NULL,
	payload bytea NOT NULL,
	source text NOT NULL,
	durability text NOT NULL,
	received_at timestamptz NOT NULL,
	committed_at timestamptz NOT NULL DEFAULT now()
)`
)

// columnsOfTable lists the table's column names.
func (e *env) columnsOfTable(t *testing.T) string {
	t.Helper()
	c := e.conn(context.Background())
	defer c.Close(context.Background())
	var cols []string
	err := c.QueryRow(context.Background(), `SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`, pgx.Identifier{e.table}.Sanitize()).Scan(&cols)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(cols, ",")
}

// TestTodaysTablesWithMetadataColumns: a table created before metadata
// columns existed keeps working unchanged with the option off (no column
// added, records committed); with the option on and create_table off the
// sink refuses to start, naming the ALTER TABLE to run; with create_table
// on it adds the columns, and old rows read as having no metadata.
func TestTodaysTablesWithMetadataColumns(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.exec(ctx, fmt.Sprintf(todaysTable, pgx.Identifier{e.table}.Sanitize()))
	before := e.columnsOfTable(t)
	s := e.open(t, e.dsn, Options{})
	old := rawRecords("old", 3)
	commitAll(t, s, metaRecordsBare(old))
	s.Close()
	if got := e.columnsOfTable(t); got != before {
		t.Fatalf("columns changed with metadata_columns off: %s, was %s", got, before)
	}

	_, err := New(ctx, Options{DSN: e.dsn, Table: e.table, MetadataColumns: true, CreateTable: false})
	if err == nil || !strings.Contains(err.Error(), "ADD COLUMN IF NOT EXISTS weir_key bytea") || !strings.Contains(err.Error(), "create_table") {
		t.Fatalf("New with metadata_columns on, create_table off: %v; want a refusal naming the ALTER TABLE", err)
	}

	s = e.open(t, e.dsn, Options{MetadataColumns: true})
	want := metaRecords("new")
	commitAll(t, s, want)
	got, err := e.readBack(ctx, false, true)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[sink.RecordID]sink.Record{}
	for _, r := range append(old, want...) {
		byID[r.ID] = r
	}
	if len(got) != len(byID) {
		t.Fatalf("%d rows, want %d", len(got), len(byID))
	}
	for _, g := range got {
		w := byID[g.ID]
		if !sameMeta(sink.Record{Key: g.Key, Headers: g.Headers, EventTime: g.EventTime}, w) {
			t.Errorf("%s: key %q headers %q event %s; want %q %q %s", g.Payload, g.Key, g.Headers, g.EventTime, w.Key, w.Headers, w.EventTime)
		}
	}
}

// TestTodaysRawTableGetsMetadataColumns: a raw table created before
// metadata columns existed gets them at open (create_table on), and its
// old rows read back with none.
func TestTodaysRawTableGetsMetadataColumns(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.exec(ctx, fmt.Sprintf(todaysRawTable, pgx.Identifier{e.table}.Sanitize()))
	e.exec(ctx, fmt.Sprintf(`INSERT INTO %s (weir_position, weir_record_id, payload, source, durability, received_at)
		VALUES (0, gen_random_uuid(), 'before', 'test', 'durable', now())`, pgx.Identifier{e.table}.Sanitize()))
	s := e.open(t, e.dsn, Options{Positions: true})
	if cols := e.columnsOfTable(t); !strings.Contains(cols, "weir_key,weir_headers,weir_event_time") {
		t.Fatalf("columns %s: metadata columns not added", cols)
	}
	want := metaRecords("raw")
	commitRaw(t, s, want)
	got := readAll(t, s, 10)
	if len(got) != 1+len(want) {
		t.Fatalf("%d records, want %d", len(got), 1+len(want))
	}
	if r := got[0].Record; string(r.Payload) != "before" || r.Key != nil || r.Headers != nil || !r.EventTime.IsZero() {
		t.Errorf("old row read as %+v", r)
	}
	for i, p := range got[1:] {
		if !sameMeta(p.Record, want[i]) {
			t.Errorf("position %d: %+v, want %+v", p.Pos, p.Record, want[i])
		}
	}
}

// metaRecordsBare is recs with metadata: what a sink with the option off
// must still accept (and drop).
func metaRecordsBare(recs []sink.Record) []sink.Record {
	out := append([]sink.Record(nil), recs...)
	out[0].Key, out[0].EventTime = []byte("dropped"), time.Now()
	return out
}

func commitAll(t *testing.T, s *Sink, recs []sink.Record) {
	t.Helper()
	res, err := s.Commit(context.Background(), sink.NewBatch(recs))
	if err != nil || len(res.Rejected) != 0 {
		t.Fatalf("Commit: %v %v", res, err)
	}
}
