package systest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/client"
)

// freshnessProbe pushes one Durable record every interval for n records
// into d and measures, from outside weir, how long after its ack each
// became visible in table: the table gains a seen_at column defaulting to
// clock_timestamp() — the moment Postgres wrote the row — once the sink
// has created it, and seen_at is compared with the producer's clock at
// the ack (one machine, one clock).
func freshnessProbe(t *testing.T, d *daemon, conn *pgx.Conn, table string, n int, interval time.Duration) []time.Duration {
	t.Helper()
	ctx := context.Background()
	ident := pgx.Identifier{table}.Sanitize()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sink did not create %s within 30s\n%s", table, tail(d.log.String(), 2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := conn.Exec(ctx, "ALTER TABLE "+ident+" ADD COLUMN seen_at timestamptz NOT NULL DEFAULT clock_timestamp()"); err != nil {
		t.Fatal(err)
	}

	c, err := client.Dial(ctx, d.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	acked := make(map[string]time.Time, n)
	var mu sync.Mutex
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := range n {
		<-tick.C
		p := fmt.Sprintf("fresh-%05d", i)
		if err := c.Push(ctx, []byte(p), client.Durable); err != nil {
			t.Fatalf("push %s: %v", p, err)
		}
		mu.Lock()
		acked[p] = time.Now()
		mu.Unlock()
	}

	seen := map[string]time.Time{}
	for deadline := time.Now().Add(10 * time.Second); len(seen) < n && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		rows, err := conn.Query(ctx, "SELECT convert_from(payload, 'UTF8'), seen_at FROM "+ident)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var p string
			var at time.Time
			if err := rows.Scan(&p, &at); err != nil {
				t.Fatal(err)
			}
			seen[p] = at
		}
		rows.Close()
	}
	var lags []time.Duration
	for p, at := range acked {
		s, ok := seen[p]
		if !ok {
			t.Errorf("%s acknowledged at %s, not in Postgres 10 s after the last push", p, at.Format(time.RFC3339Nano))
			continue
		}
		lags = append(lags, s.Sub(at))
	}
	slices.Sort(lags)
	perCommit, commits := recordsPerCommit(scrape(t, d))
	if len(lags) > 0 {
		t.Logf("%d records, one every %v: visible in Postgres after the ack p50 %v, p99 %v, max %v (negative: the row was written before the ack reached the producer); the drain's %d sink commits carried %.1f records each",
			len(lags), interval, lags[len(lags)/2].Round(time.Microsecond), lags[len(lags)*99/100].Round(time.Microsecond), lags[len(lags)-1].Round(time.Microsecond), commits, perCommit)
	}
	return lags
}

// TestFreshnessPostgres: with segment_max_age = 1h no segment is sealed
// during the run, and yet every acknowledged record is visible in the
// Postgres sink within 2 s — the drain reads the open segment.
func TestFreshnessPostgres(t *testing.T) {
	d, conn, table := pgDaemon(t, "--segment-max-age", "1h")
	lags := freshnessProbe(t, d, conn, table, 150, 20*time.Millisecond)
	if len(lags) == 0 || lags[len(lags)-1] > 2*time.Second {
		t.Fatalf("records not visible within 2 s of their ack")
	}
	if sealed := countSealed(t, d); sealed != 0 {
		t.Fatalf("%d segments sealed during the run: the test did not exercise the open segment", sealed)
	}
}

// TestFreshnessRawFirstSecondary: the same through a raw-first topology —
// a file raw and a Postgres [[secondary]] fed live by the fan-out.
func TestFreshnessRawFirstSecondary(t *testing.T) {
	db := newPGTable(t, "weir_fresh")
	cfg := writeConfig(t, pgSecondaryTOML(db.dsn, db.table, "", ""))
	d := newDaemon(t, "--config", cfg, "--segment-max-age", "1h")
	d.start()
	lags := freshnessProbe(t, d, db.conn, db.table, 150, 20*time.Millisecond)
	if len(lags) == 0 || lags[len(lags)-1] > 2*time.Second {
		t.Fatalf("records not visible in the secondary within 2 s of their ack")
	}
	if sealed := countSealed(t, d); sealed != 0 {
		t.Fatalf("%d segments sealed during the run", sealed)
	}
}

// countSealed counts the segments the daemon sealed so far (its debug log).
func countSealed(t *testing.T, d *daemon) int {
	t.Helper()
	return strings.Count(d.log.String(), `msg="segment sealed"`)
}
