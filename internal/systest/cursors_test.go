package systest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/internal/testenv/wabtest"
)

// TestFileSourceCursorAcrossSecondaries: a file source's cursor stays
// where it is when a [[secondary]] is added and when it is removed again.
// The daemon reads N lines with no secondary and stops; restarted with a
// secondary it must not read them again, nor, restarted without it, the
// lines it read meanwhile. Every stop is clean, so every line is in the
// [sink] exactly once. With the write-ahead buffer as gate the cursor is
// in data_dir; with gate = "raw" in the offset store beside the [sink].
func TestFileSourceCursorAcrossSecondaries(t *testing.T) {
	for _, tc := range []struct {
		name, gate string
	}{
		{"buffer", "buffer"},
		{"raw", "raw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logDir := t.TempDir()
			source, secondary := cursorSourceTOML(tc.gate, logDir), copySecondaryTOML
			cfgPath := writeConfig(t, source)
			d := newDaemon(t, "--config", cfgPath, "--coverage-flush-interval", "50ms")
			start := func() {
				if tc.gate == "raw" {
					d.startNoSocket() // no write-ahead buffer, no producer socket
				} else {
					d.start()
				}
			}
			lg := newGrowingLog(t, filepath.Join(logDir, "app.log"), "line")
			defer lg.close()
			for i, phase := range []struct {
				what  string
				toml  string
				lines int
			}{
				{"no secondary", source, 1500},
				{"a secondary added", source + secondary, 700},
				{"the secondary removed", source, 400},
			} {
				if err := os.WriteFile(cfgPath, []byte(phase.toml), 0o600); err != nil {
					t.Fatal(err)
				}
				start()
				lg.write(phase.lines)
				waitDelivered(t, d, lg.want, 60*time.Second)
				// Stop only once the drain is done with every segment: one
				// stopped between the sink's commit and the drain's progress
				// record is delivered again (the file sink keeps such copies),
				// which would look like a re-read here.
				waitNoSealed(t, d, 60*time.Second)
				if err := d.stop(30 * time.Second); err != nil {
					t.Fatalf("phase %d (%s): stop: %v\n%s", i+1, phase.what, err, tail(d.log.String(), 4000))
				}
				got := sinkPayloads(t, d.outDir())
				var twice []string
				extra := 0
				for p, n := range got {
					if !lg.want[p] {
						extra++
					}
					if n > 1 {
						twice = append(twice, p)
					}
				}
				if extra > 0 || len(twice) > 0 {
					t.Fatalf("phase %d (%s): %d of %d lines in the sink more than once (e.g. %s), %d unknown payloads: the source read them again",
						i+1, phase.what, len(twice), len(lg.want), strings.Join(twice[:min(3, len(twice))], ", "), extra)
				}
				t.Logf("phase %d (%s): %d lines, each once", i+1, phase.what, len(lg.want))
			}
		})
	}
}

// cursorSourceTOML is a node with the gate given and a file source
// "applog" reading logDir/*.log.
func cursorSourceTOML(gate, logDir string) string {
	return fmt.Sprintf(`gate = %q
[[source]]
name = "applog"
type = "file"
[source.file]
glob = %q
poll_interval = "50ms"
max_batch_records = 100
`, gate, filepath.Join(logDir, "*.log"))
}

// copySecondaryTOML is a file [[secondary]] named "copy".
const copySecondaryTOML = `
[[secondary]]
name = "copy"
type = "file"
`

// waitNoSealed waits until the drain is done with every segment of d's
// write-ahead buffer (testenv.UndeliveredSegments; none at all with gate =
// "raw").
func waitNoSealed(t *testing.T, d *daemon, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n := wabtest.Undelivered(t, d.wabDir())
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d segments not wholly delivered after %v", n, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pgCountOnceMade is pgCount, with 0 rows while the sink has not yet
// created the table.
func pgCountOnceMade(t *testing.T, conn *pgx.Conn, table string) (rows, distinct int) {
	t.Helper()
	var made bool
	if err := conn.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&made); err != nil {
		t.Fatal(err)
	}
	if !made {
		return 0, 0
	}
	return pgCount(t, conn, pgx.Identifier{table}.Sanitize())
}

// TestFileSourceCursorPostgresAcrossSecondaries is
// TestFileSourceCursorAcrossSecondaries with gate = "raw" and a Postgres
// [sink] (a table of its own): the cursor lives in the offset store beside
// the table (weir_offsets) whether or not there are secondaries, so it is
// found after the [[secondary]] is removed, and after it is back. (The
// table is first written with the secondary, as primary raw: a table
// written without one lacks raw's columns and cannot become raw later.)
// A re-read
// shows as rows kept again (raw keeps a replayed record at a new
// position) and in the run's count of records the source wrote through
// the gate, which must be that run's new lines only. With the secondary
// back, it recovers from raw every line written without it.
func TestFileSourceCursorPostgresAcrossSecondaries(t *testing.T) {
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	table := pgRaw(t, conn)
	logDir := t.TempDir()
	source := cursorSourceTOML("raw", logDir) + fmt.Sprintf(`
[sink]
type = "postgres"
[sink.postgres]
dsn = %q
table = %q
`, dsn, table)
	secondary := copySecondaryTOML
	cfgPath := writeConfig(t, source)
	d := newDaemon(t, "--config", cfgPath, "--coverage-flush-interval", "50ms")
	lg := newGrowingLog(t, filepath.Join(logDir, "app.log"), "line")
	defer lg.close()
	for i, phase := range []struct {
		what  string
		toml  string
		lines int
	}{
		{"a secondary", source + secondary, 1500},
		{"the secondary removed", source, 700},
		{"the secondary back", source + secondary, 400},
	} {
		if err := os.WriteFile(cfgPath, []byte(phase.toml), 0o600); err != nil {
			t.Fatal(err)
		}
		d.startNoSocket()
		lg.write(phase.lines)
		deadline := time.Now().Add(60 * time.Second)
		for {
			// The sink opens in the background, so the table may not be
			// there yet just after the start.
			rows, distinct := pgCountOnceMade(t, conn, table)
			if distinct == len(lg.want) {
				if rows != distinct {
					t.Fatalf("phase %d (%s): %d rows for %d lines", i+1, phase.what, rows, distinct)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("phase %d (%s): %d of %d lines in the table\n%s", i+1, phase.what, distinct, len(lg.want), tail(d.log.String(), 4000))
			}
			time.Sleep(50 * time.Millisecond)
		}
		if phase.toml != source {
			// Raw stayed whole while the secondary was away: it recovers
			// every line the node wrote without it.
			waitSecondary(t, d, "copy", len(lg.want))
		}
		written := sum(d.scrape(), `weir_source_records_written_total{source="applog"}`)
		if err := d.stop(30 * time.Second); err != nil {
			t.Fatalf("phase %d (%s): stop: %v\n%s", i+1, phase.what, err, tail(d.log.String(), 4000))
		}
		if int(written) != phase.lines {
			t.Fatalf("phase %d (%s): the source wrote %v records for %d new lines (%d in all): it did not find its cursor and read again from the start\n%s",
				i+1, phase.what, written, phase.lines, len(lg.want), tail(d.log.String(), 4000))
		}
		t.Logf("phase %d (%s): %d new lines read once, %d in the table", i+1, phase.what, phase.lines, len(lg.want))
	}
}
