package systest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

// pgRows lists a table's (payload, weir_record_id) rows by payload.
func pgRows(t *testing.T, conn *pgx.Conn, table string) map[string][]sink.RecordID {
	t.Helper()
	return pgSourceRows(t, conn, table, "")
}

// pgSourceRows is pgRows of the rows whose source is source ("": all).
func pgSourceRows(t *testing.T, conn *pgx.Conn, table, source string) map[string][]sink.RecordID {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT payload, weir_record_id FROM "+pgx.Identifier{table}.Sanitize()+
		" WHERE $1 = '' OR source = $1", source)
	if err != nil {
		return nil // not created yet
	}
	defer rows.Close()
	out := map[string][]sink.RecordID{}
	for rows.Next() {
		var p []byte
		var id [16]byte
		if err := rows.Scan(&p, &id); err != nil {
			t.Fatal(err)
		}
		out[string(p)] = append(out[string(p)], id)
	}
	return out
}

// TestDeadLetterReplayTwiceIntoPostgres: `weir deadletter replay`, run
// twice on the same dead-letter file into a daemon whose sink is Postgres
// (idempotent on weir_record_id), must leave each record in the table
// once, under the id it was dead-lettered with.
func TestDeadLetterReplayTwiceIntoPostgres(t *testing.T) {
	d, conn, table := pgDaemon(t)
	const n = 20
	orig := map[string]sink.RecordID{}
	var recs []wab.Record
	now := time.Now()
	for i := range n {
		id := record.HashID([]byte("replay-test"), fmt.Appendf(nil, "%d", i))
		p := fmt.Sprintf("replayed-%02d", i)
		orig[p] = id
		recs = append(recs, wab.Record{Received: now.UnixNano(), Payload: []byte(p), Meta: record.Encode(&record.Meta{
			ID: id, HasID: true, Source: drain.RecordSource, Key: fmt.Appendf(nil, "k%d", i),
			Reject: &record.Rejection{Code: record.CodeSinkRefused, Stage: record.StageDrain, Component: "postgres",
				Error: "refused before the fix", Attempts: 1, FirstSeen: now.UnixNano(), HasLocation: true, Index: uint64(i)}})})
	}
	dir := drain.DeadLetterDir(d.wabDir())
	if err := vfs.OS.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := wab.WriteSealed(vfs.OS, filepath.Join(dir, drain.DeadLetterName(1)), wab.Header{Shard: wab.DeadLetterShard}, recs); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 2; round++ {
		out, errOut, code := weirCmd(t, nil, "deadletter", "replay", "--wab-dir", d.wabDir(), "--socket-path", d.socket, "--all")
		if code != 0 || !strings.Contains(out, fmt.Sprintf("replayed %d records", n)) {
			t.Fatalf("replay %d: exit %d\n%s\n%s", round, code, out, errOut)
		}
	}
	replayedOnce(t, d, conn, table, orig)
}

// replayedOnce waits until the daemon has delivered two copies of every
// record of orig (two replays, both acked) and checks that the table
// holds each once, under its original id: a second copy under a new id
// would be in the table by then.
func replayedOnce(t *testing.T, d *daemon, conn *pgx.Conn, table string, orig map[string]sink.RecordID) {
	t.Helper()
	n := len(orig)
	d.waitScrape(fmt.Sprintf("%d records delivered", 2*n), 30*time.Second, func(m map[string]float64) bool {
		return sum(m, "weir_records_delivered_total") >= float64(2*n)
	})
	got := pgRows(t, conn, table)
	if len(got) != n {
		t.Fatalf("the table holds %d distinct payloads, want %d", len(got), n)
	}
	for p, ids := range got {
		if len(ids) != 1 || ids[0] != orig[p] {
			t.Errorf("%s: ids %v, want once under %v", p, ids, orig[p])
		}
	}
}
