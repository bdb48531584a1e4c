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
	addSeenAt(t, d, conn, table)

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

	seen := seenAt(t, conn, table, "", n, 10*time.Second)
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

// BenchmarkFreshnessAtLoad: freshness into a Postgres sink, from outside
// weir, at 10 %, 50 % and 90 % of the node's measured capacity (the
// harness's configuration: segment_max_age 200 ms). Capacity is the end-to-end
// rate of 16 Durable producers pushing 256-byte records as fast as they
// can until every row is in the table; each load is then held for 3 s by
// paced producers, and every record's seen_at (clock_timestamp() when
// Postgres wrote the row) is compared with its ack.
//
//	go test -run '^$' -bench FreshnessAtLoad -benchtime 1x -count 3 ./internal/systest
func BenchmarkFreshnessAtLoad(b *testing.B) {
	b.Run("sink=postgres", func(b *testing.B) {
		for range b.N {
			d, conn, table := pgDaemon(b, "--log-level", "warn")
			freshnessAtLoad(b, d, conn, table)
		}
	})
	b.Run("raw=file,secondary=postgres", func(b *testing.B) {
		for range b.N {
			db := newPGTable(b, "weir_freshb")
			d := newDaemon(b, "--config", writeConfig(b, pgSecondaryTOML(db.dsn, db.table, "", "")), "--log-level", "warn")
			d.start()
			freshnessAtLoad(b, d, db.conn, db.table)
		}
	})
}

func freshnessAtLoad(b *testing.B, d *daemon, conn *pgx.Conn, table string) {
	defer d.stop(30 * time.Second)
	ctx := context.Background()
	ident := pgx.Identifier{table}.Sanitize()
	addSeenAt(b, d, conn, table)
	rows := func() int {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+ident).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}

	// Capacity: flat out, until every row is in.
	const producers, capRecords = 16, 100_000
	start := time.Now()
	pushFrom(b, d, producers, 16, "cap", func(i int) bool { return i < capRecords/producers }, 0, nil)
	for rows() < capRecords {
		if time.Since(start) > 2*time.Minute {
			b.Fatalf("capacity run: %d of %d rows after 2 minutes", rows(), capRecords)
		}
		time.Sleep(20 * time.Millisecond)
	}
	capacity := float64(capRecords) / time.Since(start).Seconds()
	b.ReportMetric(capacity, "capacity-records/s")

	for _, pct := range []int{10, 50, 90} {
		rate := capacity * float64(pct) / 100
		acks := map[string]time.Time{}
		var mu sync.Mutex
		phase := fmt.Sprintf("p%02d", pct)
		const batch = 8
		interval := time.Duration(float64(time.Second) * producers * batch / rate)
		until := time.Now().Add(3 * time.Second)
		t0 := time.Now()
		pushFrom(b, d, producers, batch, phase, func(int) bool { return time.Now().Before(until) }, interval, func(names []string) {
			at := time.Now()
			mu.Lock()
			for _, n := range names {
				acks[n] = at
			}
			mu.Unlock()
		})
		achieved := float64(len(acks)) / time.Since(t0).Seconds()
		seen := seenAt(b, conn, table, phase+"-", len(acks), 30*time.Second)
		var lags []time.Duration
		for n, at := range acks {
			if s, ok := seen[n]; ok {
				lags = append(lags, s.Sub(at))
			}
		}
		if len(lags) < len(acks) {
			b.Fatalf("%d%% of capacity: %d of %d acked records in Postgres 30 s after the load", pct, len(lags), len(acks))
		}
		slices.Sort(lags)
		p50, p99 := lags[len(lags)/2], lags[len(lags)*99/100]
		b.ReportMetric(achieved, phase+"-records/s")
		b.ReportMetric(float64(p50.Microseconds())/1000, phase+"-p50-ms")
		b.ReportMetric(float64(p99.Microseconds())/1000, phase+"-p99-ms")
		benchLine(b, map[string]any{"name": "freshness/" + b.Name() + "_" + phase, "capacity_records_per_s": capacity,
			"records_per_s": achieved, "p50_ms": float64(p50.Microseconds()) / 1000, "p99_ms": float64(p99.Microseconds()) / 1000})
	}
}

// addSeenAt waits for the sink to create table, then gives it a seen_at
// column defaulting to clock_timestamp(): when Postgres wrote each row.
func addSeenAt(tb testing.TB, d *daemon, conn *pgx.Conn, table string) {
	tb.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var made bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&made); err != nil {
			tb.Fatal(err)
		}
		if made {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the sink did not create %s within 30s\n%s", table, tail(d.log.String(), 2000))
		}
	}
	if _, err := conn.Exec(ctx, "ALTER TABLE "+pgx.Identifier{table}.Sanitize()+" ADD COLUMN seen_at timestamptz NOT NULL DEFAULT clock_timestamp()"); err != nil {
		tb.Fatal(err)
	}
}

// seenAt reads, by payload (trailing spaces trimmed), when each row whose
// payload starts with prefix was written, until n are there or wait
// passes.
func seenAt(tb testing.TB, conn *pgx.Conn, table, prefix string, n int, wait time.Duration) map[string]time.Time {
	tb.Helper()
	q := "SELECT rtrim(convert_from(payload, 'UTF8')), seen_at FROM " + pgx.Identifier{table}.Sanitize() + " WHERE substring(payload from 1 for $2) = $1"
	seen := map[string]time.Time{}
	for deadline := time.Now().Add(wait); len(seen) < n && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		rows, err := conn.Query(context.Background(), q, []byte(prefix), len(prefix))
		if err != nil {
			tb.Fatal(err)
		}
		for rows.Next() {
			var p string
			var at time.Time
			if err := rows.Scan(&p, &at); err != nil {
				tb.Fatal(err)
			}
			seen[p] = at
		}
		rows.Close()
	}
	return seen
}

// pushFrom runs producers Durable producers against d, each pushing
// batches of perBatch 256-byte records named "<name>-<producer>-<index>"
// (padded with spaces) while more(index) holds, one batch each every
// (0: as fast as the window allows); acked, when not nil, is told the names of
// each acknowledged batch. It returns once every producer has closed
// (its requests answered).
func pushFrom(b *testing.B, d *daemon, producers, perBatch int, name string, more func(i int) bool, every time.Duration, acked func(names []string)) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Dial(ctx, d.socket, client.WithWindow(64))
			if err != nil {
				b.Error(err)
				return
			}
			defer c.Close(ctx)
			var pace <-chan time.Time
			if every > 0 {
				tick := time.NewTicker(every)
				defer tick.Stop()
				pace = tick.C
			}
			for i := 0; more(i); i += perBatch {
				recs := make([][]byte, perBatch)
				names := make([]string, perBatch)
				for j := range recs {
					names[j] = fmt.Sprintf("%s-%02d-%07d", name, p, i+j)
					recs[j] = fmt.Appendf(nil, "%-256s", names[j])
				}
				if err := c.PushAsync(ctx, recs, client.Durable, func(err error) {
					if err == nil && acked != nil {
						acked(names)
					}
				}); err != nil {
					b.Error(err)
					return
				}
				if pace != nil {
					<-pace
				}
			}
		}()
	}
	wg.Wait()
}
