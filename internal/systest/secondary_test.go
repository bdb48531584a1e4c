package systest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// pgSecondary is a daemon reading a Kafka topic into raw, with a Postgres
// secondary reached through a proxy the test can cut.
type pgSecondary struct {
	d     *daemon
	proxy *testenv.Proxy
	conn  *pgx.Conn
	table string
	kafka *kafkaLedger
	cl    interface{ Close() }
}

func newPGSecondary(t *testing.T, topic, group string, extra ...string) (*pgSecondary, func(ctx context.Context, n, batch int, pause time.Duration)) {
	return newPGSecondaryCut(t, topic, group, false, extra...)
}

// newPGSecondaryCut is newPGSecondary with the database unreachable from
// the start when cut is set.
func newPGSecondaryCut(t *testing.T, topic, group string, cut bool, extra ...string) (*pgSecondary, func(ctx context.Context, n, batch int, pause time.Duration)) {
	t.Helper()
	db := newPGTable(t, "weir_sec")
	proxy, via, conn, table := db.proxy, db.via, db.conn, db.table
	c, cl := startKafka(t, topic, 3)
	// A short queue, so that the outage drops batches and recovery
	// replays them.
	cfg := writeConfig(t, kafkaSourceTOML("orders", group, topic, c.ListenAddrs())+
		pgSecondaryTOML(via, table, "queue_batches = 4", `timeout = "2s"`))
	args := append([]string{"--config", cfg, "--coverage-flush-interval", "50ms"}, extra...)
	d := newDaemon(t, args...)
	if cut {
		proxy.Cut()
	}
	d.start()
	l := &kafkaLedger{bySrc: map[string]kafkaPos{}}
	produce := func(ctx context.Context, n, batch int, pause time.Duration) {
		produceKafka(ctx, t, cl, "p", n, batch, pause, l)
	}
	return &pgSecondary{d: d, proxy: proxy, conn: conn, table: table, kafka: l}, produce
}

// pgTable is a fresh table in the test database, dropped at the end,
// reachable directly (dsn) and through a proxy the test can cut (via).
type pgTable struct {
	dsn, via string
	proxy    *testenv.Proxy
	conn     *pgx.Conn
	table    string
}

func newPGTable(t testing.TB, prefix string) *pgTable {
	t.Helper()
	dsn := testenv.Postgres(t)
	via, proxy := testenv.PostgresProxy(t, dsn)
	table := testenv.TableName(prefix)
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize())
		conn.Close(context.Background())
	})
	return &pgTable{dsn: dsn, via: via, proxy: proxy, conn: conn, table: table}
}

// pgSecondaryTOML is a [[secondary]] named "pg" writing to table at dsn,
// with extra keys for the secondary itself and for [secondary.postgres].
func pgSecondaryTOML(dsn, table, secondaryKeys, postgresKeys string) string {
	return namedPGSecondaryTOML("pg", dsn, table, secondaryKeys, postgresKeys)
}

// namedPGSecondaryTOML is pgSecondaryTOML for a secondary called name.
func namedPGSecondaryTOML(name, dsn, table, secondaryKeys, postgresKeys string) string {
	return fmt.Sprintf(`
[[secondary]]
name = %q
type = "postgres"
%s
[secondary.postgres]
dsn = %q
table = %q
%s
`, name, secondaryKeys, dsn, table, postgresKeys)
}

func rawIDs(t testing.TB, d *daemon) map[sink.RecordID]bool {
	t.Helper()
	var lines []filesink.Line
	var err error
	for range 20 { // a file may be renamed while it is read
		if lines, err = filesink.ReadDirFS(vfs.OS, d.outDir(), true); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[sink.RecordID]bool, len(lines))
	for _, l := range lines {
		out[l.ID] = true
	}
	return out
}

func tableIDs(t testing.TB, conn *pgx.Conn, table string) map[sink.RecordID]bool {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT weir_record_id FROM "+pgx.Identifier{table}.Sanitize())
	if err != nil {
		return map[sink.RecordID]bool{} // not created yet
	}
	defer rows.Close()
	out := map[sink.RecordID]bool{}
	for rows.Next() {
		var id [16]byte
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out[sink.RecordID(id)] = true
	}
	return out
}

// waitTableEqualsRaw waits until raw holds every produced payload and the
// table holds every raw record id, and nothing else.
func (p *pgSecondary) waitTableEqualsRaw(t *testing.T, produced int, timeout time.Duration) {
	t.Helper()
	waitTableEqualsRaw(t, p.d, p.conn, p.table, produced, timeout)
}

// waitTableEqualsRaw waits until d's raw holds at least produced records
// and table holds every raw record id, and nothing else.
func waitTableEqualsRaw(t testing.TB, d *daemon, conn *pgx.Conn, table string, produced int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		// The table first: a record reaches it only after raw has it,
		// so raw read afterwards holds at least the table's records.
		tbl := tableIDs(t, conn, table)
		raw := rawIDs(t, d)
		missing, extra := 0, 0
		for id := range raw {
			if !tbl[id] {
				missing++
			}
		}
		for id := range tbl {
			if !raw[id] {
				extra++
			}
		}
		if len(raw) >= produced && missing == 0 {
			if extra != 0 {
				t.Fatalf("table holds %d ids that are not in raw", extra)
			}
			t.Logf("table equals raw by weir_record_id: %d records", len(raw))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: raw %d ids (produced %d), table misses %d\n%s", timeout, len(raw), produced, missing, tail(d.log.String(), 4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func written(m map[string]float64) float64 { return sum(m, "weir_source_records_written_total") }

// rateOver measures records/s written to raw by the source over d.
func rateOver(d *daemon, dur time.Duration) float64 {
	a := written(d.scrape())
	start := time.Now()
	time.Sleep(dur)
	b := written(d.scrape())
	return (b - a) / time.Since(start).Seconds()
}

// TestPostgresSecondaryOutage: a Postgres secondary is cut off for a while
// under a steady Kafka source. The source's rate into raw holds during the
// outage, and afterwards the table equals raw by weir_record_id.
func TestPostgresSecondaryOutage(t *testing.T) {
	p, produce := newPGSecondary(t, "steady", "weir-steady")
	const n = 24000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		produce(ctx, n, 25, 20*time.Millisecond) // about 1000 records/s
	}()
	p.d.waitScrape("source writing", 30*time.Second, func(m map[string]float64) bool { return written(m) > 0 })
	before := rateOver(p.d, 3*time.Second)
	p.proxy.Cut()
	time.Sleep(500 * time.Millisecond)
	during := rateOver(p.d, 4*time.Second)
	m := p.d.scrape()
	backlog := m["weir_recovery_backlog"]
	if err := p.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	t.Logf("records/s into raw: before the outage %.0f, during %.0f (backlog at the end of the outage %.0f positions)", before, during, backlog)
	if before < 200 {
		t.Fatalf("source too slow before the outage to compare (%.0f/s)", before)
	}
	if during < 0.6*before {
		t.Errorf("source rate fell during the secondary's outage: %.0f/s → %.0f/s", before, during)
	}
	if backlog == 0 {
		t.Errorf("weir_recovery_backlog stayed 0 during the outage")
	}
	wg.Wait()
	p.waitTableEqualsRaw(t, n, 90*time.Second)
	m = p.d.waitScrape("backlog 0", 30*time.Second, func(m map[string]float64) bool { return m["weir_recovery_backlog"] == 0 })
	if f := sum(m, "weir_secondary_commit_failures_total") + sum(m, "weir_secondary_dropped_batches_total"); f == 0 {
		t.Errorf("the outage left no commit failure or dropped batch")
	}
	if r := m[`weir_secondary_delivered_records_total{path="recovery",sink="pg"}`]; r == 0 {
		t.Errorf("nothing was recovered: %v", r)
	}
}

// TestKill9DuringRecovery: the daemon is killed -9 while it recovers a
// Postgres secondary from raw; after the restart recovery resumes from the
// coverage on disk and completes.
func TestKill9DuringRecovery(t *testing.T) {
	p, produce := newPGSecondary(t, "backlog", "weir-backlog", "--recovery-window-records", "50", "--sink-file-batch-records", "100")
	const n = 12000
	p.d.waitScrape("secondary ready", 30*time.Second, func(m map[string]float64) bool {
		_, ok := m["weir_recovery_backlog"]
		return ok
	})
	p.proxy.Cut()
	produce(context.Background(), n, 500, 0)
	p.d.waitScrape("all records in raw", 60*time.Second, func(m map[string]float64) bool { return written(m) >= n })
	p.d.waitScrape("backlog", 10*time.Second, func(m map[string]float64) bool { return m["weir_recovery_backlog"] > 0 })
	if err := p.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	var m map[string]float64
	m = p.d.waitScrape("recovery under way", 60*time.Second, func(m map[string]float64) bool {
		return m[`weir_secondary_delivered_records_total{path="recovery",sink="pg"}`] > 0 && m["weir_recovery_backlog"] > 0
	})
	p.d.kill()
	inTable := len(tableIDs(t, p.conn, p.table))
	t.Logf("killed during recovery: backlog %.0f, recovered %.0f, table %d of %d", m["weir_recovery_backlog"],
		m[`weir_secondary_delivered_records_total{path="recovery",sink="pg"}`], inTable, n)
	if inTable >= n {
		t.Fatalf("recovery had already finished (%d rows) when the daemon was killed", inTable)
	}
	p.d.start()
	m = p.d.waitScrape("recovery resumes", 60*time.Second, func(m map[string]float64) bool {
		return m[`weir_secondary_delivered_records_total{path="recovery",sink="pg"}`] > 0
	})
	p.waitTableEqualsRaw(t, n, 90*time.Second)
	p.d.waitScrape("backlog 0", 30*time.Second, func(m map[string]float64) bool { return m["weir_recovery_backlog"] == 0 })
}

// TestSecondaryDownAtStart: a secondary that cannot be reached when the
// daemon starts does not stop it; records flow into raw, and once the
// database is back the table is filled from raw.
func TestSecondaryDownAtStart(t *testing.T) {
	p, produce := newPGSecondaryCut(t, "late", "weir-late", true, "--sink-file-batch-records", "100")
	const n = 3000
	produce(context.Background(), n, 100, 10*time.Millisecond)
	p.d.waitScrape("records in raw while the secondary is down", 60*time.Second, func(m map[string]float64) bool {
		return written(m) >= n && m["weir_recovery_backlog"] > 0
	})
	if err := p.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	p.waitTableEqualsRaw(t, n, 90*time.Second)
}
