package dqaudit_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/internal/dqaudit"
	"github.com/weir-io/weir/internal/testenv"
)

// openPG opens a PGWriter on a unique table, dropped when the test ends.
func openPG(t *testing.T) (dsn, table string, w *dqaudit.PGWriter) {
	t.Helper()
	dsn = testenv.Postgres(t)
	table = testenv.PostgresTable(t, dsn, "dq_audit")
	w, err := dqaudit.OpenPostgres(context.Background(), dsn, table)
	if err != nil {
		t.Fatal(err)
	}
	return dsn, table, w
}

func TestPGWriterRoundTrip(t *testing.T) {
	dsn, table, w := openPG(t)
	ctx := context.Background()
	want := entries(0, 9)
	want[0].Outcomes = map[dqaudit.Outcome]int64{"pass": 7} // no codes, rules or sample: NULLs
	want[0].Codes, want[0].Rules, want[0].Sample = nil, nil, nil
	if err := w.Write(ctx, want[:4]); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, want[4:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Opening again finds the table as it is.
	w2, err := dqaudit.OpenPostgres(ctx, dsn, table)
	if err != nil {
		t.Fatal(err)
	}
	w2.Close()

	got, err := dqaudit.ReadPostgres(ctx, dsn, table, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back\n%+v\nwant\n%+v", got, want)
	}
	// since: only the windows that ended after it.
	since := want[5].To
	got, err = dqaudit.ReadPostgres(ctx, dsn, table, since)
	if err != nil || !reflect.DeepEqual(got, want[6:]) {
		t.Fatalf("since %v: %+v, %v; want the last 3", since, got, err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var nulls int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()+`
		WHERE kind = 'recovery' AND stream IS NULL AND contract IS NULL AND outcomes IS NULL AND codes IS NULL
		AND sample_rejected_ids IS NULL AND written_at IS NOT NULL`).Scan(&nulls); err != nil || nulls != 3 {
		t.Fatalf("recovery rows with NULL outcome columns: %d, %v; want 3", nulls, err)
	}
}

// The trail writes through a PGWriter like any Writer.
func TestTrailIntoPostgres(t *testing.T) {
	dsn, table, w := openPG(t)
	ctx := context.Background()
	c := newClock()
	tr := dqaudit.New(dqaudit.Options{Writer: w, Now: c.Now})
	if err := tr.Append(ctx, []dqaudit.Batch{{Stream: "orders", Sink: "pg", Contract: "orders@3",
		Obs: []dqaudit.Obs{{Outcome: dqaudit.Rejected, Code: "dq", Rule: "r", ID: id(7)}}}}); err != nil {
		t.Fatal(err)
	}
	tr.Recovered("pg", 10, 20, "skip-quarantine")
	closeTrail(t, tr)
	got, err := dqaudit.ReadPostgres(ctx, dsn, table, time.Time{})
	if err != nil || len(got) != 2 || got[0].Sample[0] != id(7).String() || got[1].Hi != 20 {
		t.Fatalf("%+v, %v", got, err)
	}
	if s := dqaudit.Summarise(got); len(s.Streams) != 1 || s.Streams[0].Codes["dq"] != 1 || len(got[0].Records) != 1 {
		t.Fatalf("the table's records do not read back: %+v", got[0])
	}
}

func TestOpenPostgresRefusesBadNames(t *testing.T) {
	for _, table := range []string{"a.b.c", "a..b", "x\x00y"} {
		if _, err := dqaudit.OpenPostgres(context.Background(), "postgres://127.0.0.1:1/x", table); err == nil {
			t.Fatalf("table %q accepted", table)
		}
	}
}

// A table an older version created, without the records column, gets it
// when it is opened; the entries written before read back without
// records.
func TestOpenPostgresAddsTheRecordsColumn(t *testing.T) {
	dsn := testenv.Postgres(t)
	table := testenv.PostgresTable(t, dsn, "dq_audit")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE `+pgx.Identifier{table}.Sanitize()+` (
	kind text NOT NULL, stream text, sink text NOT NULL, contract text,
	window_from timestamptz NOT NULL, window_to timestamptz NOT NULL,
	outcomes jsonb, codes jsonb, rules jsonb, sample_rejected_ids text[],
	lo bigint, hi bigint, mode text, written_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO `+pgx.Identifier{table}.Sanitize()+` (kind, stream, sink, contract, window_from, window_to, outcomes)
	VALUES ('outcomes', 'orders', 'pg', 'orders@3', now() - interval '2 minutes', now() - interval '1 minute', '{"pass": 5}')`); err != nil {
		t.Fatal(err)
	}
	w, err := dqaudit.OpenPostgres(ctx, dsn, table)
	if err != nil {
		t.Fatal(err)
	}
	tr := dqaudit.New(dqaudit.Options{Writer: w})
	if err := tr.Append(ctx, []dqaudit.Batch{{Stream: "orders", Sink: "pg", Contract: "orders@3",
		Obs: []dqaudit.Obs{{Outcome: dqaudit.Passed, ID: id(1)}, {Outcome: dqaudit.Passed, ID: id(2)}}}}); err != nil {
		t.Fatal(err)
	}
	closeTrail(t, tr)
	got, err := dqaudit.ReadPostgres(ctx, dsn, table, time.Time{})
	if err != nil || len(got) != 2 || len(got[0].Records) != 0 || len(got[1].Records) != 1 {
		t.Fatalf("%+v, %v; want the old row without records, the new one with", got, err)
	}
	if s := dqaudit.Summarise(got); s.Streams[0].Outcomes[dqaudit.Passed] != 7 {
		t.Fatalf("summary %+v, want 7 passed (5 counted, 2 by id)", s.Streams[0])
	}
}
