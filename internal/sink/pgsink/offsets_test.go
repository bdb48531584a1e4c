package pgsink

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/engine/enginetest"
)

// The offsets table's fencing, every store of a check on one raw table
// through its own sink (its own pool), as nodes sharing the table.
func TestRawOffsetStoreFences(t *testing.T) {
	enginetest.Fences(t, func(t *testing.T) enginetest.StoreOpener {
		e := newEnv(t)
		return func(t *testing.T) *engine.OffsetStore {
			st, err := e.open(t, e.dsn, Options{Positions: true}).OffsetStore(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
	})
}

// A fence is a row of kind 'fence' holding its token in position, and a
// write never lowers it.
func TestRawOffsetStoreFenceRows(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	s := e.open(t, e.dsn, Options{Positions: true})
	st, err := s.OffsetStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Enter(ctx, engine.Fence{Window: "pg/2", Token: 41}); err != nil {
		t.Fatal(err)
	}
	c := e.conn(ctx)
	defer c.Close(context.Background())
	var tok int64
	q := fmt.Sprintf(`SELECT position FROM %s WHERE raw_table = $1 AND kind = 'fence' AND name = 'pg/2'`, OffsetsTable)
	name := pgx.Identifier{e.table}.Sanitize()
	if err := c.QueryRow(ctx, q, name).Scan(&tok); err != nil {
		t.Fatal(err)
	}
	if tok != 41 {
		t.Fatalf("fence row holds %d, want 41", tok)
	}
	// A row raised behind the store's back (another node) is not lowered
	// by this store's next write, and fences it.
	if _, err := c.Exec(ctx, fmt.Sprintf(`UPDATE %s SET position = 50 WHERE raw_table = $1 AND kind = 'fence'`, OffsetsTable), name); err != nil {
		t.Fatal(err)
	}
	st.Cover("pg", 0, 3)
	if err := st.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, q, name).Scan(&tok); err != nil || tok != 50 {
		t.Fatalf("fence row after a flush: %d, %v; want 50", tok, err)
	}
	if err := st.CoverFenced(ctx, "pg", 3, 9, engine.Fence{Window: "pg/2", Token: 41}); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("CoverFenced under a superseded token: %v", err)
	}
}
