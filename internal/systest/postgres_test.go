package systest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/testenv"
)

// pgDaemon starts the real daemon delivering into a fresh Postgres table.
func pgDaemon(tb testing.TB, extra ...string) (*daemon, *pgx.Conn, string) {
	tb.Helper()
	dsn := testenv.Postgres(tb)
	table := testenv.TableName("weir_sys")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+table)
		conn.Close(context.Background())
	})
	args := append([]string{"--sink-type", "postgres", "--sink-postgres-dsn", dsn, "--sink-postgres-table", table}, extra...)
	d := newDaemon(tb, args...)
	d.start()
	return d, conn, table
}

func pgCount(tb testing.TB, conn *pgx.Conn, table string) (rows, distinct int) {
	tb.Helper()
	err := conn.QueryRow(context.Background(),
		fmt.Sprintf("SELECT count(*), count(DISTINCT payload) FROM %s", table)).Scan(&rows, &distinct)
	if err != nil {
		tb.Fatal(err)
	}
	return rows, distinct
}

// TestPostgresEndToEnd: records pushed to the real daemon land in Postgres
// once each — also across a kill -9 in the middle of the load, after which
// replays must be absorbed by weir_record_id.
func TestPostgresEndToEnd(t *testing.T) {
	d, conn, table := pgDaemon(t, "--shards", "2", "--segment-max-age", "100ms")
	l := newLedger()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for p := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			produce(ctx, t, d.socket, fmt.Sprintf("pg%d", p), 0, 1+p%4, client.Durable, l, 300*time.Millisecond,
				client.WithBackoff(5*time.Millisecond, 20*time.Millisecond))
		}()
	}
	time.Sleep(800 * time.Millisecond)
	d.kill()
	cancel()
	wg.Wait()
	acked := l.snapshot()
	if len(acked) == 0 {
		t.Fatal("nothing acked")
	}
	d.start()
	deadline := time.Now().Add(60 * time.Second)
	for {
		rows, distinct := pgCount(t, conn, table)
		if rows != distinct {
			t.Fatalf("%d rows but %d distinct payloads: a replay was not absorbed", rows, distinct)
		}
		if rows >= len(acked) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acked records in Postgres after 60s", rows, len(acked))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Every acked payload is there.
	var missing int
	rows, err := conn.Query(context.Background(), fmt.Sprintf("SELECT convert_from(payload, 'UTF8') FROM %s", table))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		have[p] = true
	}
	rows.Close()
	for p := range acked {
		if !have[p] {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d acked records missing from Postgres", missing)
	}
	t.Logf("%d acked records, all in Postgres exactly once across a kill -9", len(acked))
}

// BenchmarkEndToEndPostgres: 64 Durable producers push into the daemon
// while it drains into Postgres; reports the ingest rate, the end-to-end
// rate (until the last row is in the table) and the drain lag after the
// last ack.
func BenchmarkEndToEndPostgres(b *testing.B) {
	records := 200_000
	for range b.N {
		d, conn, table := pgDaemon(b, "--log-level", "warn")
		l := newLedger()
		var wg sync.WaitGroup
		start := time.Now()
		per := records / 64
		for p := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				produce(context.Background(), b, d.socket, fmt.Sprintf("e2e%02d", p), per, 1, client.Durable, l, 30*time.Second,
					client.WithWindow(256))
			}()
		}
		wg.Wait()
		acked := time.Since(start)
		n := l.ackedCount()
		for {
			rows, _ := pgCount(b, conn, table)
			if rows >= n {
				break
			}
			if time.Since(start) > 5*time.Minute {
				b.Fatalf("only %d of %d rows after 5 minutes", rows, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
		total := time.Since(start)
		d.stop(30 * time.Second)
		benchLine(b, map[string]any{"name": "e2e/postgres_durable_p64", "records_per_s": float64(n) / total.Seconds(),
			"ingest_records_per_s": float64(n) / acked.Seconds(), "drain_lag_s": (total - acked).Seconds(), "records": n})
		b.ReportMetric(float64(n)/total.Seconds(), "e2e-records/s")
		b.ReportMetric((total - acked).Seconds(), "lag-s")
	}
}
