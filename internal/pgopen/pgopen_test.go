package pgopen_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/pgopen"
	"github.com/weir-io/weir/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseTable(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "" means refused
	}{
		{"events", `"events"`},
		{"Ingest.Events", `"Ingest"."Events"`},
		{`we"ird`, `"we""ird"`},
		{"", ""}, {"a.b.c", ""}, {"a.", ""}, {".a", ""}, {"a\x00b", ""}, {strings.Repeat("x", 64), ""},
	} {
		id, err := pgopen.ParseTable(tc.in)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%q accepted as %v", tc.in, id)
		case tc.want != "" && (err != nil || id.Sanitize() != tc.want):
			t.Errorf("%q: %v, %v; want %s", tc.in, id, err, tc.want)
		}
	}
}

// A role or server whose default is synchronous_commit = off still gets
// it on: a COMMIT that returned is on the server's disk.
func TestSynchronousCommitOn(t *testing.T) {
	dsn := testenv.Postgres(t)
	cfg, err := pgopen.Config(dsn, 1, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off" // as a role default would
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var sc, app string
	if err := pool.QueryRow(context.Background(),
		`SELECT current_setting('synchronous_commit'), current_setting('application_name')`).Scan(&sc, &app); err != nil {
		t.Fatal(err)
	}
	if sc != "on" || app != pgopen.ApplicationName {
		t.Fatalf("synchronous_commit %q, application_name %q; want on and %q", sc, app, pgopen.ApplicationName)
	}
	if _, err := pgopen.Config("postgres://u:secret@[::1", 1, time.Second); err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("a bad DSN: %v (must not quote it)", err)
	}
}

// A server that accepts bytes but never answers — a statement in flight,
// its cancel request unanswered — holds pgx's polite close for 15 s; Close
// gives up on it after CloseGrace and closes the sockets, leaking nothing.
func TestCloseStalledServer(t *testing.T) {
	via, p := testenv.PostgresProxy(t, testenv.Postgres(t))
	pool, err := pgopen.Open(context.Background(), via, 2, 5*time.Second, "SELECT 1")
	if err != nil {
		t.Fatal(err)
	}
	p.Stall()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err = pool.Exec(ctx, "SELECT pg_sleep(0)")
	cancel()
	if err == nil {
		t.Fatal("a statement through a stalled server succeeded")
	}
	start := time.Now()
	pool.Close()
	if took := time.Since(start); took > pgopen.CloseGrace+2*time.Second {
		t.Fatalf("Close took %v against a stalled server", took)
	}
	p.Resume()
}

// Against a server that answers, Close ends the connections politely,
// well within CloseGrace.
func TestCloseHealthy(t *testing.T) {
	pool, err := pgopen.Open(context.Background(), testenv.Postgres(t), 2, 5*time.Second, "SELECT 1")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	pool.Close()
	if took := time.Since(start); took >= pgopen.CloseGrace {
		t.Fatalf("Close took %v against a healthy server", took)
	}
}
