package pgsink

import (
	"context"
	"testing"
)

// TestAsyncCommit: with AsyncCommit (a secondary with durable = false)
// the sink's connections run with synchronous_commit = off; without it,
// on. A raw table refuses AsyncCommit.
func TestAsyncCommit(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	for _, tc := range []struct {
		name  string
		async bool
		dsn   string
		want  string
	}{
		{"durable", false, e.dsn, "on"},
		{"not durable", true, e.dsn, "off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := e.open(t, tc.dsn, Options{AsyncCommit: tc.async})
			commitAll(t, s, mkRecords("a", 3))
			var got string
			if err := s.pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("synchronous_commit = %s, want %s", got, tc.want)
			}
		})
	}
	if _, err := New(ctx, Options{DSN: e.dsn, Table: e.table, Positions: true, AsyncCommit: true}); err == nil {
		t.Error("a raw table accepted AsyncCommit")
	}
}
