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
	rows, err := conn.Query(context.Background(), "SELECT payload, weir_record_id FROM "+pgx.Identifier{table}.Sanitize())
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
//
// A replay that cannot keep a record's identity says so on stderr; the
// test then checks what such a replay does — every record arrives, each
// replay under new ids — and stops there, skipped, since the identity
// checks cannot hold.
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
	keepsIdentity := true
	for round := 1; round <= 2; round++ {
		out, errOut, code := weirCmd(t, nil, "deadletter", "replay", "--wab-dir", d.wabDir(), "--socket-path", d.socket, "--all")
		if code != 0 || !strings.Contains(out, fmt.Sprintf("replayed %d records", n)) {
			t.Fatalf("replay %d: exit %d\n%s\n%s", round, code, out, errOut)
		}
		if strings.Contains(errOut, "replaying a record twice delivers it twice") {
			keepsIdentity = false
		}
	}
	want := n
	if !keepsIdentity {
		want = 2 * n
	}
	var got map[string][]sink.RecordID
	deadline := time.Now().Add(30 * time.Second)
	for rows := 0; rows < want; {
		if time.Now().After(deadline) {
			t.Fatalf("the table holds %d rows after 30s, want %d", rows, want)
		}
		time.Sleep(50 * time.Millisecond)
		got, rows = pgRows(t, conn, table), 0
		for _, ids := range got {
			rows += len(ids)
		}
	}
	time.Sleep(300 * time.Millisecond) // let a duplicate land, if one is coming
	got = pgRows(t, conn, table)
	if len(got) != n {
		t.Fatalf("the table holds %d distinct payloads, want %d", len(got), n)
	}
	for p, ids := range got {
		switch {
		case keepsIdentity && (len(ids) != 1 || ids[0] != orig[p]):
			t.Errorf("%s: ids %v, want once under %v", p, ids, orig[p])
		case !keepsIdentity && (len(ids) != 2 || ids[0] == ids[1] || ids[0] == orig[p] || ids[1] == orig[p]):
			t.Errorf("%s: ids %v; a replay without identity should store it twice under new ids", p, ids)
		}
	}
	if !keepsIdentity {
		t.Skip("this build's replay re-submits payloads without their ids (wire version 1): each replay added every record again, under new ids")
	}
}
