package systest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/sink/pgsink"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
)

// pgRaw is a Postgres raw table for a test, dropped (with its offset
// store rows) at the end.
func pgRaw(t testing.TB, conn *pgx.Conn) string {
	t.Helper()
	table := testenv.TableName("weir_pgraw")
	t.Cleanup(func() {
		ctx := context.Background()
		name := pgx.Identifier{table}.Sanitize()
		conn.Exec(ctx, "DROP TABLE IF EXISTS "+name)
		conn.Exec(ctx, "DELETE FROM "+pgsink.OffsetsTable+" WHERE raw_table = $1", name)
	})
	return table
}

// pgRawTOML is a [sink] table making the Postgres table raw, reached
// through dsn, created if absent; extra lines (key = value) follow.
func pgRawTOML(dsn, raw string, extra ...string) string {
	return fmt.Sprintf(`
[sink]
type = "postgres"
[sink.postgres]
dsn = %q
table = %q
create_table = true
%s
`, dsn, raw, strings.Join(extra, "\n"))
}

// rawTable reads the raw table: its ids and how often each payload is
// there.
func rawTable(t *testing.T, conn *pgx.Conn, table string) (ids map[sink.RecordID]bool, payloads map[string]int) {
	t.Helper()
	r, err := conn.Query(context.Background(), "SELECT weir_record_id, payload FROM "+pgx.Identifier{table}.Sanitize()+" ORDER BY weir_position")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ids, payloads = map[sink.RecordID]bool{}, map[string]int{}
	for r.Next() {
		var id [16]byte
		var p []byte
		if err := r.Scan(&id, &p); err != nil {
			t.Fatal(err)
		}
		ids[sink.RecordID(id)] = true
		payloads[string(p)]++
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return ids, payloads
}

// TestPostgresRawWithSecondary: primary raw is a Postgres table (positions
// numbered in the commit's own transaction, offset store rows beside it)
// and a second Postgres table is a secondary behind a proxy that is cut.
// Producers push while the daemon is killed -9 twice — once mid-drain into
// raw, once mid-recovery of the secondary after the proxy is restored.
// In the end raw holds every acked record and the secondary equals raw by
// weir_record_id.
func TestPostgresRawWithSecondary(t *testing.T) {
	sec := newPGTable(t, "weir_pgraw_sec")
	raw := pgRaw(t, sec.conn)
	cfg := writeConfig(t, pgRawTOML(sec.dsn, raw, "batch_records = 200")+pgSecondaryTOML(sec.via, sec.table, "queue_batches = 2", `timeout = "2s"
create_table = true`))
	d := newDaemon(t, "--config", cfg, "--recovery-window-records", "100", "--coverage-flush-interval", "50ms")
	acked := pushKillRecover(t, d, sec, "pr", 6000, 3000)
	waitRawAndSecondary(t, d, sec.conn, sec.table, acked, func() (map[sink.RecordID]bool, map[string]int) {
		return rawTable(t, sec.conn, raw)
	}, 90*time.Second)
	d.waitScrape("backlog 0", 30*time.Second, func(m map[string]float64) bool { return m["weir_recovery_backlog"] == 0 })

	// The offset store lives in raw's database: the secondary's coverage
	// row reaches raw's end.
	var cov []byte
	var end int64
	name := pgx.Identifier{raw}.Sanitize()
	err := sec.conn.QueryRow(context.Background(), "SELECT (SELECT value FROM "+pgsink.OffsetsTable+
		" WHERE raw_table = $1 AND kind = 'coverage' AND name = 'pg'), (SELECT position FROM "+pgsink.OffsetsTable+
		" WHERE raw_table = $1 AND kind = 'raw_end')", name).Scan(&cov, &end)
	if err != nil || len(cov) == 0 || end < int64(len(acked)) {
		t.Fatalf("offset store rows: coverage %x, raw end %d, %v", cov, end, err)
	}
}

// pushKillRecover is the raw tests' scenario on d, whose secondary sec is
// cut off: n1 records are pushed and the daemon killed -9 at once (raw
// anywhere behind the buffer); after the restart n2 more are pushed, the
// secondary is restored and, once recovery from raw has delivered
// something, the daemon is killed again and restarted. It returns the
// acked payloads.
func pushKillRecover(t *testing.T, d *daemon, sec *pgTable, prefix string, n1, n2 int) map[string]bool {
	t.Helper()
	sec.proxy.Cut()
	d.start()
	l := newLedger()
	produce(ctxTimeout(t, 30*time.Second), t, d.socket, prefix+"1", n1, 100, client.Durable, l, 10*time.Second)
	d.kill() // acked = durable in the buffer; raw may be anywhere behind
	d.start()
	produce(ctxTimeout(t, 30*time.Second), t, d.socket, prefix+"2", n2, 100, client.Durable, l, 10*time.Second)
	if got := l.ackedCount(); got != n1+n2 {
		t.Fatalf("%d of %d records acked", got, n1+n2)
	}
	d.waitScrape("the secondary behind", 30*time.Second, func(m map[string]float64) bool { return m["weir_recovery_backlog"] > 0 })
	if err := sec.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	// Recovery from raw is fast; the kill lands in it or just after it
	// (TestKill9DuringRecovery pins a kill inside a recovery).
	m := d.waitScrape("recovery under way", 60*time.Second, func(m map[string]float64) bool { return recovered(m) > 0 })
	d.kill()
	t.Logf("killed with the recovery backlog at %.0f; the secondary holds %d of %d",
		m["weir_recovery_backlog"], len(tableIDs(t, sec.conn, sec.table)), n1+n2)
	d.start()
	return l.snapshot()
}

// waitRawAndSecondary waits until raw (read by readRaw: its ids and how
// often each payload is there) holds every acked payload and the
// secondary table every raw record id, and nothing else.
func waitRawAndSecondary(t *testing.T, d *daemon, conn *pgx.Conn, secondary string, acked map[string]bool,
	readRaw func() (map[sink.RecordID]bool, map[string]int), timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		// The secondary first: what it holds was in raw before, so a
		// raw read after it can only hold more.
		tbl := tableIDs(t, conn, secondary)
		ids, payloads := readRaw()
		missingRaw, missingSec, extra, dup := 0, 0, 0, 0
		for p := range acked {
			if payloads[p] == 0 {
				missingRaw++
			}
		}
		for _, c := range payloads {
			dup += c - 1
		}
		for id := range ids {
			if !tbl[id] {
				missingSec++
			}
		}
		for id := range tbl {
			if !ids[id] {
				extra++
			}
		}
		if extra != 0 {
			t.Fatalf("the secondary holds %d ids raw does not", extra)
		}
		if missingRaw == 0 && missingSec == 0 {
			t.Logf("raw holds all %d acked records (%d ids, %d payloads resent by a reconnecting producer); the secondary equals raw by weir_record_id",
				len(acked), len(ids), dup)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("raw misses %d acked records, the secondary misses %d raw records\n%s", missingRaw, missingSec, tail(d.log.String(), 4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRecoveryNodePostgresRaw: the recovery-only node on a Postgres raw
// table. The ingest node cannot reach the secondary; the recovery node
// reads the raw table through the database and fills the secondary,
// sharing the weir_offsets rows.
func TestRecoveryNodePostgresRaw(t *testing.T) {
	sec := newPGTable(t, "weir_pgraw_rn")
	raw := pgRaw(t, sec.conn)
	cfg := func(secDSN string) string {
		return writeConfig(t, pgRawTOML(sec.dsn, raw)+pgSecondaryTOML(secDSN, sec.table, "queue_batches = 1", `timeout = "2s"
create_table = true`))
	}
	ing := newDaemon(t, "--config", cfg(sec.via), "--role", "ingest", "--coverage-flush-interval", "50ms")
	sec.proxy.Cut()
	ing.start()
	l := newLedger()
	const n = 5000
	produce(ctxTimeout(t, 30*time.Second), t, ing.socket, "rnpg", n, 100, client.Durable, l, 10*time.Second)
	if got := l.ackedCount(); got != n {
		t.Fatalf("%d of %d records acked", got, n)
	}
	rec := newDaemon(t, "--config", cfg(sec.dsn), "--role", "recovery", "--recovery-window-records", "200",
		"--coverage-flush-interval", "50ms")
	rec.startNoSocket()
	waitRawAndSecondary(t, ing, sec.conn, sec.table, l.snapshot(), func() (map[sink.RecordID]bool, map[string]int) {
		return rawTable(t, sec.conn, raw)
	}, 60*time.Second)
	rec.waitScrape("backlog 0 on the recovery node", 30*time.Second, func(m map[string]float64) bool {
		return m["weir_recovery_backlog"] == 0 && recovered(m) > 0
	})
	if got := recovered(ing.scrape()); got != 0 {
		t.Errorf("the ingest node (role = ingest) recovered %.0f records", got)
	}
	if err := rec.stop(10 * time.Second); err != nil {
		t.Errorf("recovery node stop: %v\n%s", err, tail(rec.log.String(), 4000))
	}
}
