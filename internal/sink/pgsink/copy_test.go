package pgsink

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/sink"
)

// stagedRows counts the rows in the staging table of every idle
// connection of s that has one.
func stagedRows(t *testing.T, s *Sink) (conns, rows int) {
	t.Helper()
	ctx := context.Background()
	idle := s.pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range idle {
			c.Release()
		}
	}()
	for _, c := range idle {
		if c.Conn().PgConn().CustomData()[stagingReady] != true {
			continue
		}
		var n int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_temp."+stagingTable).Scan(&n); err != nil {
			t.Fatalf("staging table of a connection marked as having one: %v", err)
		}
		conns++
		rows += n
	}
	return conns, rows
}

// TestCopyStagingAcrossOutcomes: the staging table is created outside the
// batch's transaction, so a first batch that the server refuses in part
// (its transaction rolled back, the bad row isolated) leaves it in place
// for the next; and it is empty after every outcome, so no row of an
// earlier batch rides along with a later one.
func TestCopyStagingAcrossOutcomes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.open(t, e.dsn, Options{InsertMethod: InsertCopy, PayloadType: PayloadJSONB})
	e.exec(ctx, fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT no_poison CHECK (payload <> '"poison"'::jsonb)`,
		pgx.Identifier{e.table}.Sanitize()))

	first := mkRecords("first", 20)
	first[7].Payload = []byte(`"poison"`)
	res, err := s.Commit(ctx, sink.NewBatch(first))
	if err != nil || len(res.Rejected) != 1 || res.Rejected[0].Index != 7 {
		t.Fatalf("first batch, with a row the server refuses: %v, rejected %+v", err, res.Rejected)
	}
	if conns, n := stagedRows(t, s); conns == 0 || n != 0 {
		t.Fatalf("after a batch with a refused row: %d staging tables holding %d rows, want at least one, empty", conns, n)
	}
	if _, err := s.Commit(ctx, sink.NewBatch(mkRecords("second", 30))); err != nil {
		t.Fatalf("second batch: %v", err)
	}
	if conns, n := stagedRows(t, s); conns == 0 || n != 0 {
		t.Fatalf("after a committed batch: %d staging tables holding %d rows", conns, n)
	}
	// A commit that fails mid-way (its context ends) leaves nothing
	// staged either.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Commit(cctx, sink.NewBatch(mkRecords("cancelled", 10))); !sink.IsTransient(err) {
		t.Fatalf("cancelled commit: %v, want transient", err)
	}
	if _, err := s.Commit(ctx, sink.NewBatch(mkRecords("third", 5))); err != nil {
		t.Fatalf("third batch: %v", err)
	}
	if rows, distinct := e.countDistinct(ctx); rows != 19+30+5 || distinct != rows {
		t.Fatalf("table holds %d rows (%d distinct), want %d", rows, distinct, 19+30+5)
	}
}

// TestCopyStagingLost: a session that lost its staging table — what a
// pooler in transaction mode does, simulated by DISCARD TEMP — fails the
// commit permanently, naming insert_method; the connection makes the
// table again on the next commit.
func TestCopyStagingLost(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.open(t, e.dsn, Options{InsertMethod: InsertCopy})
	if _, err := s.Commit(ctx, sink.NewBatch(mkRecords("a", 10))); err != nil {
		t.Fatal(err)
	}
	idle := s.pool.AcquireAllIdle(ctx)
	for _, c := range idle {
		if _, err := c.Exec(ctx, "DISCARD TEMP"); err != nil {
			t.Fatal(err)
		}
		c.Release()
	}
	_, err := s.Commit(ctx, sink.NewBatch(mkRecords("b", 10)))
	if err == nil || sink.IsTransient(err) || !strings.Contains(err.Error(), `insert_method = "unnest"`) {
		t.Fatalf("commit without the staging table: %v (transient %v), want a permanent error naming insert_method",
			err, sink.IsTransient(err))
	}
	if _, err := s.Commit(ctx, sink.NewBatch(mkRecords("b", 10))); err != nil {
		t.Fatalf("the next commit: %v", err)
	}
	if rows, _ := e.countDistinct(ctx); rows != 20 {
		t.Fatalf("%d rows, want 20", rows)
	}
}

func TestInsertMethodOption(t *testing.T) {
	e := newEnv(t)
	_, err := New(context.Background(), Options{DSN: e.dsn, Table: e.table, CreateTable: true, InsertMethod: "merge"})
	if err == nil || !strings.Contains(err.Error(), `insert method "merge"`) {
		t.Fatalf("New with insert method merge: %v", err)
	}
}
