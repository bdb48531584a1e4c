package systest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/internal/quarantine/pgquarantine"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// quarantinedRecords are n records a secondary "pg" refused — as decode
// or, every third, retry-exhausted — with their original ids, by payload.
func quarantinedRecords(n int) ([]lane.Rejected, map[string]sink.RecordID) {
	now := time.Now()
	orig := map[string]sink.RecordID{}
	var recs []lane.Rejected
	for i := range n {
		id := record.HashID([]byte("quarantine-replay"), fmt.Appendf(nil, "%d", i))
		p := fmt.Sprintf("quarantined-%02d", i)
		orig[p] = id
		code := record.CodeDecode
		if i%3 == 0 {
			code = record.CodeRetryExhausted
		}
		recs = append(recs, lane.Rejected{Sink: "pg", Pos: uint64(i), OriginPos: fmt.Sprintf("orders/0@%d", i),
			Record: sink.Record{ID: id, Payload: []byte(p), Source: "kafka:orders", Received: now, Key: fmt.Appendf(nil, "k%d", i)},
			Reject: record.Rejection{Code: code, Stage: record.StageSecondary, Component: "pg", Error: "refused before the fix",
				Attempts: 1, FirstSeen: now.UnixNano()}})
	}
	return recs, orig
}

// TestQuarantineReplayTwiceIntoPostgres: `weir quarantine replay`, run
// twice on the same quarantine — an NDJSON directory, and a quarantine
// table — into a daemon whose sink is Postgres (idempotent on
// weir_record_id), leaves each record in the table once, under the id it
// was quarantined with.
func TestQuarantineReplayTwiceIntoPostgres(t *testing.T) {
	const n = 20
	t.Run("dir", func(t *testing.T) {
		d, conn, table := pgDaemon(t)
		recs, orig := quarantinedRecords(n)
		parent := t.TempDir()
		w, err := quarantine.Open(quarantine.Options{Dir: filepath.Join(parent, "pg")})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Reject(context.Background(), recs); err != nil {
			t.Fatal(err)
		}
		w.Close()
		replayQuarantineTwice(t, n, "--dir", parent, "--sink", "pg", "--socket-path", d.socket)
		replayedOnce(t, d, conn, table, orig)
	})
	t.Run("postgres", func(t *testing.T) {
		d, conn, table := pgDaemon(t)
		dsn := testenv.Postgres(t)
		qtable := testenv.TableName("weir_sys_quarantine")
		t.Cleanup(func() { conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+qtable) })
		w, err := pgquarantine.Open(context.Background(), pgquarantine.Options{DSN: dsn, Table: qtable})
		if err != nil {
			t.Fatal(err)
		}
		recs, orig := quarantinedRecords(n)
		if err := w.Reject(context.Background(), recs); err != nil {
			t.Fatal(err)
		}
		w.Close()
		// Only the retry-exhausted ones first: the filter reaches the table.
		out, errOut, code := weirCmd(t, nil, "quarantine", "replay", "--postgres", dsn, "--table", qtable,
			"--code", "retry-exhausted", "--dry-run")
		if want := fmt.Sprintf("would replay %d records", (n+2)/3); code != 0 || !strings.Contains(out, want) {
			t.Fatalf("dry run: exit %d, no %q\n%s\n%s", code, want, out, errOut)
		}
		replayQuarantineTwice(t, n, "--postgres", dsn, "--table", qtable, "--sink", "pg", "--socket-path", d.socket)
		replayedOnce(t, d, conn, table, orig)
	})
}

func replayQuarantineTwice(t *testing.T, n int, args ...string) {
	t.Helper()
	for round := 1; round <= 2; round++ {
		out, errOut, code := weirCmd(t, nil, append([]string{"quarantine", "replay"}, args...)...)
		if code != 0 || !strings.Contains(out, fmt.Sprintf("replayed %d records, 0 refused", n)) {
			t.Fatalf("replay %d: exit %d\n%s\n%s", round, code, out, errOut)
		}
	}
}
