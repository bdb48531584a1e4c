package pgsink

import (
	"context"
	"testing"

	"github.com/weir-io/weir/internal/component"
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

// TestComponentAsyncCommit: the kind asks for AsyncCommit when it is
// opened for a secondary with durable = false, never in raw mode.
func TestComponentAsyncCommit(t *testing.T) {
	for _, tc := range []struct{ nonDurable, positions, want bool }{
		{false, false, false}, {true, false, true}, {true, true, false},
	} {
		p := component.SinkParams[Config]{Env: component.Env{NonDurable: tc.nonDurable}, Config: &Config{}}
		if got := options(p, tc.positions).AsyncCommit; got != tc.want {
			t.Errorf("NonDurable %v, positions %v: AsyncCommit %v, want %v", tc.nonDurable, tc.positions, got, tc.want)
		}
	}
}
