package systest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// tablePayloads counts the rows of table by payload.
func tablePayloads(t *testing.T, conn *pgx.Conn, table string) map[string]int {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT payload FROM "+pgx.Identifier{table}.Sanitize())
	if err != nil {
		return map[string]int{} // not created yet
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var p []byte
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		out[string(p)]++
	}
	return out
}

// TestFileSourceOwnRaw: a file source is its own primary raw (own_raw).
// No copy of the lines is kept: each batch's origin file is fdatasynced
// and its positions appended to the index before the cursor moves. A
// Postgres secondary, cut off at first, is filled live and recovered from
// the origin files themselves, across rotation by rename, a stop and two
// kill -9s; in the end it holds every line exactly once (a line read again
// after a crash has the same id).
func TestFileSourceOwnRaw(t *testing.T) {
	sec := newPGTable(t, "weir_ownraw")
	logDir := t.TempDir()
	logPath := filepath.Join(logDir, "app.log")
	cfg := writeConfig(t, fmt.Sprintf(`
[[source]]
name = "applog"
type = "file"
own_raw = true
[source.file]
glob = %q
poll_interval = "50ms"
max_batch_records = 100
`, filepath.Join(logDir, "*.log"))+pgSecondaryTOML(sec.via, sec.table, "queue_batches = 2", `timeout = "2s"
create_table = true`))
	d := newDaemon(t, "--config", cfg, "--recovery-window-records", "100", "--coverage-flush-interval", "50ms")
	sec.proxy.Cut()
	d.startNoSocket()

	lg := newGrowingLog(t, logPath, "own")
	write, rotate := lg.write, lg.rotate
	steps := []func(){
		func() { write(2000) },
		func() { time.Sleep(150 * time.Millisecond); d.kill(); write(500); d.startNoSocket() }, // kill -9 mid-file
		func() { write(1000); rotate(); write(1000) },
		func() {
			if err := sec.proxy.Restore(); err != nil { // recovery from the origin files starts
				t.Fatal(err)
			}
			write(1000)
			m := d.waitScrape("recovery from the origin files", 30*time.Second, func(m map[string]float64) bool { return recovered(m) > 0 })
			d.kill()
			t.Logf("killed with %.0f records recovered from the origin files, backlog %.0f", recovered(m), m["weir_recovery_backlog"])
			rotate()
			write(500)
			d.startNoSocket()
		},
		func() {
			if err := d.stop(30 * time.Second); err != nil {
				t.Fatalf("stop: %v", err)
			}
			write(300)
			d.startNoSocket()
		},
	}
	for _, s := range steps {
		s()
		time.Sleep(300 * time.Millisecond)
	}
	lg.close()
	want := lg.want

	deadline := time.Now().Add(60 * time.Second)
	for {
		got := tablePayloads(t, sec.conn, sec.table)
		missing, extra, twice := 0, 0, 0
		for p := range want {
			if got[p] == 0 {
				missing++
			}
		}
		for p, c := range got {
			if !want[p] {
				extra++
			}
			twice += c - 1
		}
		if extra != 0 || twice != 0 {
			t.Fatalf("the secondary holds %d lines never written and %d lines twice (a line read again must keep its id)", extra, twice)
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the secondary misses %d of %d lines\n%s", missing, len(want), tail(d.log.String(), 4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	m := d.waitScrape("backlog 0", 30*time.Second, func(m map[string]float64) bool { return m["weir_recovery_backlog"] == 0 })
	t.Logf("the secondary holds all %d lines once: %.0f delivered live, %.0f recovered from the origin files",
		len(want), m[`weir_secondary_delivered_records_total{path="live",sink="pg"}`], recovered(m))
	if recovered(m) == 0 && m[`weir_secondary_delivered_records_total{path="live",sink="pg"}`] == 0 {
		t.Error("nothing delivered in the last run")
	}
	// No copy of the records: no buffer, no raw sink directory.
	for _, dir := range []string{d.wabDir(), d.outDir()} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s exists on a node whose source is its own raw (%v)", dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(d.dir, "origin", "applog", "index", "origin.index")); err != nil {
		t.Errorf("origin index: %v", err)
	}
}
