package systest

import (
	"testing"
	"time"

	"github.com/weir-io/weir/client"
)

func recovered(m map[string]float64) float64 {
	return m[`weir_secondary_delivered_records_total{path="recovery",sink="pg"}`]
}

// TestRecoveryNode: an ingest node (role = "ingest") takes pushes while
// its Postgres secondary is unreachable from it, so its live queue
// overflows and nothing reaches the table. A second daemon with role =
// "recovery", on the same sink.file.dir and the same secondary, reads that
// raw read-only and fills the table; it is killed -9 mid-recovery,
// restarted, and resumes from the shared offset store while raw keeps
// growing. In the end the table holds every raw record by weir_record_id
// and the recovery node's weir_recovery_backlog is 0.
func TestRecoveryNode(t *testing.T) {
	db := newPGTable(t, "weir_recnode")
	proxy, conn, table := db.proxy, db.conn, db.table
	secondary := func(dsn string) string {
		return writeConfig(t, pgSecondaryTOML(dsn, table, "queue_batches = 1", `timeout = "2s"`))
	}

	// The ingest node reaches the database only through the proxy, cut
	// for the whole test.
	ing := newDaemon(t, "--config", secondary(db.via), "--role", "ingest", "--coverage-flush-interval", "50ms")
	proxy.Cut()
	ing.start()
	const n, more = 12000, 2000
	l := newLedger()
	produce(ctxTimeout(t, 30*time.Second), t, ing.socket, "rn", n, 100, client.Durable, l, 10*time.Second)
	if got := l.ackedCount(); got != n {
		t.Fatalf("%d of %d records acked", got, n)
	}
	ing.waitScrape("live batches dropped on the ingest node", 10*time.Second, func(m map[string]float64) bool {
		return sum(m, "weir_secondary_dropped_batches_total") > 0
	})

	// The recovery node: its own data_dir, the ingest node's raw.
	rec := newDaemon(t, "--config", secondary(db.dsn), "--role", "recovery", "--sink-file-dir", ing.outDir(),
		"--recovery-window-records", "50", "--coverage-flush-interval", "50ms")
	rec.startNoSocket()
	covered := func(m map[string]float64) float64 { return m[`weir_secondary_coverage_end{sink="pg"}`] }
	// Coverage is reported just after it is written to the offset store
	// (leading the file by at most the windows acked in between): once a
	// good part shows, the restart has something to resume from.
	m := rec.waitScrape("recovery under way", 30*time.Second, func(m map[string]float64) bool {
		return covered(m) >= 1000 && m["weir_recovery_backlog"] > 0
	})
	rec.kill()
	covBefore := covered(m)
	inTable := len(tableIDs(t, conn, table))
	t.Logf("recovery node killed mid-recovery: backlog %.0f, recovered %.0f, table %d of %d",
		m["weir_recovery_backlog"], recovered(m), inTable, n)
	if inTable >= n {
		t.Fatalf("recovery had already finished (%d rows) when the node was killed", inTable)
	}

	start := time.Now()
	rec.startNoSocket()
	produce(ctxTimeout(t, 30*time.Second), t, ing.socket, "rn-more", more, 100, client.Durable, l, 10*time.Second)
	if got := l.ackedCount(); got != n+more {
		t.Fatalf("%d of %d records acked", got, n+more)
	}
	waitTableEqualsRaw(t, ing, conn, table, n+more, 60*time.Second)
	// The gauges start at 0: wait for the covered prefix to reach raw's
	// end too, so that a 0 backlog is a measured one.
	m = rec.waitScrape("backlog 0 on the recovery node", 30*time.Second, func(m map[string]float64) bool {
		return m["weir_recovery_backlog"] == 0 && covered(m) >= n+more
	})
	t.Logf("after the restart: caught up in %v, recovered %.0f records this run (%.0f were covered before the kill)",
		time.Since(start).Round(time.Millisecond), recovered(m), covBefore)
	const slack = 10 * 50 // ten recovery windows acked between a write and its report
	if r := recovered(m); r == 0 || r > n+more-covBefore+slack {
		t.Errorf("the restarted recovery node recovered %.0f records; want 1 to %.0f (it resumes from the coverage on disk)", r, n+more-covBefore+slack)
	}
	if got := recovered(ing.scrape()); got != 0 {
		t.Errorf("the ingest node (role = ingest) recovered %.0f records", got)
	}
	if err := rec.stop(10 * time.Second); err != nil {
		t.Errorf("recovery node stop: %v\n%s", err, tail(rec.log.String(), 4000))
	}
}
