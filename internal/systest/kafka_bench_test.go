package systest

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-io/weir/internal/sink/pgsink"
	"github.com/weir-io/weir/internal/testenv"
)

// BenchmarkKafkaToPostgres: N 256-byte records on a 3-partition kfake
// topic, read by the real daemon into raw with a Postgres secondary
// reached through a proxy. It reports the source → raw rate, the end-to-end
// rate into Postgres and the lag between them; then, with the proxy cut,
// the raw rate while the secondary is down and, after the restore, the
// rate at which the secondary recovers the backlog.
func BenchmarkKafkaToPostgres(b *testing.B) {
	records := 100_000
	if s := os.Getenv("WEIR_BENCH_RECORDS"); s != "" {
		fmt.Sscan(s, &records)
	}
	const wait = 5 * time.Minute
	for _, raw := range []string{"file", "postgres"} {
		b.Run("raw="+raw, func(b *testing.B) {
			for range b.N {
				kafkaPostgresOnce(b, records, wait, raw)
			}
		})
	}
}

// kafkaPostgresOnce runs the benchmark once with primary raw of the given
// sink type: "file" (NDJSON in data_dir/out) or "postgres" (a raw table
// in the same database as the secondary).
func kafkaPostgresOnce(b *testing.B, n int, wait time.Duration, raw string) {
	b.StopTimer()
	const topic, group = "bench", "weir-bench"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()

	dsn := testenv.Postgres(b)
	target, err := testenv.PostgresTarget(dsn)
	if err != nil {
		b.Fatal(err)
	}
	proxy := testenv.NewProxy(b, target)
	via, err := testenv.PostgresVia(dsn, proxy.Addr())
	if err != nil {
		b.Fatal(err)
	}
	table := testenv.TableName("weir_bench")
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize())
		conn.Close(context.Background())
	}()

	produceN := func(prefix string) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		const batch = 1000
		for i := 0; i < n; i += batch {
			recs := make([]*kgo.Record, 0, batch)
			for j := i; j < min(i+batch, n); j++ {
				v := make([]byte, benchRecordBytes)
				for k := range v {
					v[k] = 'a' + byte(k%26)
				}
				copy(v, fmt.Sprintf("%s-%09d|", prefix, j))
				recs = append(recs, &kgo.Record{Value: v})
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				b.Fatalf("produce: %v", err)
			}
		}
	}
	produceN("live")

	rawTOML := ""
	if raw == "postgres" {
		rawTable := table + "_raw"
		rawTOML = fmt.Sprintf("[sink]\ntype = \"postgres\"\n[sink.postgres]\ndsn = %q\ntable = %q\n", dsn, rawTable)
		defer func() {
			name := pgx.Identifier{rawTable}.Sanitize()
			conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+name)
			conn.Exec(context.Background(), "DELETE FROM "+pgsink.OffsetsTable+" WHERE raw_table = $1", name)
		}()
	}
	cfg := writeConfigTB(b, rawTOML+kafkaSourceTOML("orders", group, topic, c.ListenAddrs())+pgSecondaryTOML(via, table, "", `timeout = "2s"`))
	d := newDaemon(b, "--config", cfg, "--log-level", "warn")

	var maxBacklog float64
	waitRaw := func(want int, deadline time.Time) {
		for {
			m := d.scrape()
			maxBacklog = max(maxBacklog, sum(m, "weir_recovery_backlog"))
			if written(m) >= float64(want) {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("raw holds %.0f of %d records after %v\n%s", written(m), want, wait, tail(d.log.String(), 4000))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitTable := func(want int, deadline time.Time) {
		for {
			var rows int
			err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&rows)
			if err == nil && rows >= want {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("table holds %d of %d rows after %v (%v)\n%s", rows, want, wait, err, tail(d.log.String(), 4000))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// Live: the backlog already on the topic, into raw and Postgres.
	b.StartTimer()
	start := time.Now()
	d.start()
	waitRaw(n, start.Add(wait))
	rawDone := time.Since(start)
	waitTable(n, start.Add(wait))
	tableDone := time.Since(start)
	b.StopTimer()

	// Recovery: the secondary is cut off while another N arrive.
	// The rate is timed from the first produce of the second N, so it
	// includes producing them (the daemon reads while they arrive).
	proxy.Cut()
	cutStart := time.Now()
	produceN("cut")
	waitRaw(2*n, cutStart.Add(wait))
	liveDur := time.Since(cutStart)
	var cutRows int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&cutRows); err != nil {
		b.Fatal(err)
	}
	if cutRows >= 2*n {
		b.Fatalf("table already holds %d rows with the proxy cut: nothing left to recover", cutRows)
	}
	if err := proxy.Restore(); err != nil {
		b.Fatal(err)
	}
	restored := time.Now()
	deadline := restored.Add(wait)
	for {
		var rows int
		err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&rows)
		if err == nil && rows >= 2*n {
			break
		}
		maxBacklog = max(maxBacklog, sum(d.scrape(), "weir_recovery_backlog"))
		if time.Now().After(deadline) {
			b.Fatalf("table holds %d of %d rows %v after the restore (%v)\n%s", rows, 2*n, wait, err, tail(d.log.String(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	recoveryDur := time.Since(restored)
	if err := d.stop(30 * time.Second); err != nil {
		b.Errorf("stop: %v", err)
	}

	// The same-run baseline: a bare COPY of as many rows of the same size
	// into a plain table, straight to the server (no proxy).
	copyRate := bareCopyRate(b, conn, table+"_copy", n)

	ingest := float64(n) / rawDone.Seconds()
	e2e := float64(n) / tableDone.Seconds()
	live := float64(n) / liveDur.Seconds()
	recovery := float64(n) / recoveryDur.Seconds()
	lag := (tableDone - rawDone).Seconds()
	name := "e2e/kafka_raw_postgres"
	if raw != "file" {
		name = "e2e/kafka_" + raw + "raw_postgres"
	}
	benchLine(b, map[string]any{"name": name, "raw": raw, "records": n, "record_bytes": benchRecordBytes,
		"partitions": 3, "ingest_records_per_s": ingest, "records_per_s": e2e, "lag_s": lag,
		"live_records_per_s": live, "recovery_records_per_s": recovery, "recovery_s": recoveryDur.Seconds(),
		"max_recovery_backlog": maxBacklog, "rows_at_restore": cutRows,
		"pg_copy_baseline_records_per_s": copyRate, "e2e_vs_copy": e2e / copyRate, "recovery_vs_copy": recovery / copyRate})
	b.ReportMetric(ingest, "ingest-records/s")
	b.ReportMetric(e2e, "e2e-records/s")
	b.ReportMetric(lag, "lag-s")
	b.ReportMetric(live, "cut-live-records/s")
	b.ReportMetric(recovery, "recovery-records/s")
	b.ReportMetric(copyRate, "copy-baseline-records/s")
}

// bareCopyRate is rows/s of a bare pgx CopyFrom of n rows of
// benchRecordBytes (id, payload, source, received_at), 4096 rows per
// transaction, into a fresh plain table that is dropped afterwards.
func bareCopyRate(b *testing.B, conn *pgx.Conn, table string, n int) float64 {
	ctx := context.Background()
	tbl := pgx.Identifier{table}
	if _, err := conn.Exec(ctx, "CREATE TABLE "+tbl.Sanitize()+
		" (weir_record_id uuid, payload bytea, source text, received_at timestamptz)"); err != nil {
		b.Fatal(err)
	}
	defer conn.Exec(ctx, "DROP TABLE "+tbl.Sanitize())
	payload := make([]byte, benchRecordBytes)
	for k := range payload {
		payload[k] = 'a' + byte(k%26)
	}
	now := time.Now()
	const batch = 4096
	start := time.Now()
	for i := 0; i < n; i += batch {
		m := min(batch, n-i)
		tx, err := conn.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		_, err = tx.CopyFrom(ctx, tbl, []string{"weir_record_id", "payload", "source", "received_at"},
			pgx.CopyFromSlice(m, func(j int) ([]any, error) {
				var id [16]byte
				binary.BigEndian.PutUint64(id[:], uint64(i+j))
				return []any{id, payload, "kafka:orders", now}, nil
			}))
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

func writeConfigTB(b *testing.B, body string) string {
	b.Helper()
	p := b.TempDir() + "/weir.toml"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		b.Fatal(err)
	}
	return p
}
