package systest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-io/weir/internal/sink/pgsink"
	"github.com/weir-io/weir/internal/source/kafkasrc"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
)

// BenchmarkKafkaToPostgres: N 256-byte records on a 3-partition kfake
// topic, read by the real daemon into raw with a Postgres secondary
// reached through a proxy. It reports the source → raw rate, the end-to-end
// rate into Postgres and the lag between them; then, with the proxy cut,
// the raw rate while the secondary is down and, after the restore, the
// rate at which the secondary recovers the backlog. The baselines, measured
// in the same run after the daemon stopped, are bare COPYs of as many rows
// into a plain table and into tables keyed like the secondary's (see
// bareCopyRates); e2e_vs_copy_pk is the headline ratio. It also reports
// the CPU the daemon, Postgres (all its processes), this process (kfake,
// the proxy, the polling) and the whole machine spent per second of the
// live phase.
//
// Environment: WEIR_BENCH_RECORDS (N, default 100000);
// WEIR_BENCH_MAX_POLL (the source's max_poll_records, default the
// product's); WEIR_BENCH_PROFILE=dir runs the daemon with debug_pprof and
// writes a CPU profile of the live phase's first
// WEIR_BENCH_PROFILE_SECONDS (default 5), after WEIR_BENCH_PROFILE_DELAY
// (default 0s), there; WEIR_BENCH_TRACE=1 prints
// a line per poll with the records written by the source, committed to
// raw and acknowledged by the secondary, and raw's commit and the buffer's
// fdatasync counts and times.
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
	via, proxy := testenv.PostgresProxy(b, dsn)
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
	profDir := os.Getenv("WEIR_BENCH_PROFILE")
	if profDir != "" {
		rawTOML = "debug_pprof = true\n" + rawTOML
	}
	src := kafkaSourceTOML("orders", group, topic, c.ListenAddrs())
	// The source polls as many records as the product's default
	// (kafkasrc.DefaultMaxPollRecords) unless WEIR_BENCH_MAX_POLL says
	// otherwise, not the 200 of the kill tests.
	mp := os.Getenv("WEIR_BENCH_MAX_POLL")
	if mp == "" {
		mp = strconv.Itoa(kafkasrc.DefaultMaxPollRecords)
	}
	if !strings.Contains(src, "max_poll_records = 200\n") {
		b.Fatalf("kafkaSourceTOML no longer sets max_poll_records = 200; adjust the benchmark:\n%s", src)
	}
	src = strings.Replace(src, "max_poll_records = 200\n", "max_poll_records = "+mp+"\n", 1)
	cfg := writeConfigTB(b, rawTOML+src+pgSecondaryTOML(via, table, "", `timeout = "2s"`))
	d := newDaemon(b, "--config", cfg, "--log-level", "warn")

	var maxBacklog float64
	var firstWritten time.Time // when a scrape first saw a record written by the source
	var traceStart time.Time
	trace := func(m map[string]float64) {
		if os.Getenv("WEIR_BENCH_TRACE") == "" {
			return
		}
		if traceStart.IsZero() {
			traceStart = time.Now()
		}
		fmt.Printf("TRACE %6.3fs wab %7.0f raw %7.0f sec %7.0f (recovered %7.0f, dropped %7.0f) rawcommits %5.0f rawsum %6.3f syncs %5.0f syncsum %6.3f\n",
			time.Since(traceStart).Seconds(), written(m), sum(m, "weir_sink_commit_records_total"),
			sum(m, "weir_secondary_delivered_records_total"), recoveredRecords(m), sum(m, "weir_secondary_dropped_records_total"),
			sum(m, "weir_sink_commit_duration_seconds_count"), sum(m, "weir_sink_commit_duration_seconds_sum"),
			sum(m, "weir_fdatasync_duration_seconds_count"), sum(m, "weir_fdatasync_duration_seconds_sum"))
	}
	waitRaw := func(want int, deadline time.Time) {
		for {
			m := d.scrape()
			maxBacklog = max(maxBacklog, sum(m, "weir_recovery_backlog"))
			trace(m)
			if firstWritten.IsZero() && written(m) > 0 {
				firstWritten = time.Now()
			}
			if written(m) >= float64(want) {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("raw holds %.0f of %d records after %v\n%s", written(m), want, wait, tail(d.log.String(), 4000))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// waitTable waits until the secondary has acknowledged want records
	// (its delivered counter, which counts a record once its commit
	// returned), then checks that the table holds them. Counting the
	// table's rows on every poll would add a sequential scan of it to the
	// load on Postgres each time.
	waitTable := func(want int, deadline time.Time) {
		for {
			m := d.scrape()
			trace(m)
			maxBacklog = max(maxBacklog, sum(m, "weir_recovery_backlog"))
			if sum(m, "weir_secondary_delivered_records_total") >= float64(want) {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("the secondary acknowledged %.0f of %d records after %v\n%s",
					sum(m, "weir_secondary_delivered_records_total"), want, wait, tail(d.log.String(), 4000))
			}
			time.Sleep(20 * time.Millisecond)
		}
		for {
			var rows int
			err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&rows)
			if err == nil && rows >= want {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("table holds %d of %d rows after %v (%v)\n%s", rows, want, wait, err, tail(d.log.String(), 4000))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Live: the backlog already on the topic, into raw and Postgres.
	b.StartTimer()
	start := time.Now()
	d.start()
	// CPU is counted from the daemon's readiness (its startup is not
	// the pipeline's work) to the end of the live phase.
	ready := time.Now()
	cpu0 := cpuNow(d.cmd.Process.Pid)
	var prof <-chan error
	if profDir != "" {
		prof = d.profile(profDir, raw)
	}
	waitRaw(n, start.Add(wait))
	rawDone := time.Since(start)
	waitTable(n, start.Add(wait))
	tableDone := time.Since(start)
	b.StopTimer()
	cpu := cpuNow(d.cmd.Process.Pid).since(cpu0)
	cpuWindow := time.Since(ready).Seconds()
	if prof != nil {
		if err := <-prof; err != nil {
			b.Errorf("profile: %v", err)
		}
	}

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
	waitTable(2*n, restored.Add(wait))
	recoveryDur := time.Since(restored)
	if err := d.stop(30 * time.Second); err != nil {
		b.Errorf("stop: %v", err)
	}

	// The same-run baselines: a bare COPY of as many rows of the same size
	// into a plain table and into one keyed like the secondary's,
	// straight to the server (no proxy).
	base := bareCopyRates(b, table+"_copy", n)
	copyRate, keyedRate := base.plain, base.keyed

	ingest := float64(n) / rawDone.Seconds()
	e2e := float64(n) / tableDone.Seconds()
	live := float64(n) / liveDur.Seconds()
	recovery := float64(n) / recoveryDur.Seconds()
	lag := (tableDone - rawDone).Seconds()
	startup := firstWritten.Sub(start).Seconds()
	name := "e2e/kafka_raw_postgres"
	if raw != "file" {
		name = "e2e/kafka_" + raw + "raw_postgres"
	}
	benchLine(b, map[string]any{"name": name, "raw": raw, "records": n, "record_bytes": benchRecordBytes,
		"partitions": 3, "ingest_records_per_s": ingest, "records_per_s": e2e, "lag_s": lag,
		"first_record_s": startup, "e2e_from_first_record_records_per_s": float64(n) / (tableDone.Seconds() - startup),
		"live_records_per_s": live, "recovery_records_per_s": recovery, "recovery_s": recoveryDur.Seconds(),
		"max_recovery_backlog": maxBacklog, "rows_at_restore": cutRows,
		"pg_copy_baseline_records_per_s": copyRate, "e2e_vs_copy": e2e / copyRate, "recovery_vs_copy": recovery / copyRate,
		"pg_copy_pk_baseline_records_per_s": keyedRate, "e2e_vs_copy_pk": e2e / keyedRate, "recovery_vs_copy_pk": recovery / keyedRate,
		"pg_copy_pk_random_baseline_records_per_s": base.keyedRandom, "e2e_vs_copy_pk_random": e2e / base.keyedRandom,
		"live_daemon_cores": cpu.daemon / cpuWindow, "live_postgres_cores": cpu.postgres / cpuWindow,
		"live_bench_cores": cpu.bench / cpuWindow, "live_machine_busy_cores": cpu.machine / cpuWindow,
		"ready_s": ready.Sub(start).Seconds()})
	b.ReportMetric(ingest, "ingest-records/s")
	b.ReportMetric(e2e, "e2e-records/s")
	b.ReportMetric(lag, "lag-s")
	b.ReportMetric(live, "cut-live-records/s")
	b.ReportMetric(recovery, "recovery-records/s")
	b.ReportMetric(copyRate, "copy-baseline-records/s")
	b.ReportMetric(keyedRate, "copy-pk-baseline-records/s")
	b.ReportMetric(e2e/keyedRate, "e2e/copy-pk")
}

// copyRates are the same-run baselines of bareCopyRates, rows/s.
type copyRates struct {
	// plain: no index; keyed: the secondary's primary key, time-ordered
	// ids (record.TimeOrdered), as weir's record ids are; keyedRandom: the
	// same key with ids that are 16 bytes of a hash, as weir's record ids
	// were before.
	plain, keyed, keyedRandom float64
}

// bareCopyRates is rows/s of a bare pgx CopyFrom of n rows of
// benchRecordBytes, 4096 rows per transaction, in the order generated,
// into fresh tables with the secondary's columns (dropped afterwards). The
// writers take turns batch by batch (testenv.Race), on a connection each,
// so that the load of the shared machine falls on all of them alike.
func bareCopyRates(b *testing.B, table string, n int) copyRates {
	ctx := context.Background()
	payload := make([]byte, benchRecordBytes)
	for k := range payload {
		payload[k] = 'a' + byte(k%26)
	}
	now := time.Now().Truncate(time.Microsecond)
	const per = 4096
	var ordered, random [][]sink.Record
	for i := 0; i < n; i += per {
		recs := make([]sink.Record, min(per, n-i))
		rnd := make([]sink.Record, len(recs))
		for j := range recs {
			var h [8]byte
			binary.BigEndian.PutUint64(h[:], uint64(i+j))
			sum := sha256.Sum256(h[:])
			recs[j] = sink.Record{ID: testenv.BenchID(testenv.IDsTimeOrdered, now, i+j, sum[:]),
				Payload: payload, Received: now, Source: "kafka:orders"}
			rnd[j] = recs[j]
			rnd[j].ID = testenv.BenchID(testenv.IDsRandom, now, i+j, sum[:])
		}
		ordered = append(ordered, recs)
		random = append(random, rnd)
	}
	cols := []string{"weir_record_id", "payload", "source", "durability", "received_at"}
	writer := func(name, pk string, src [][]sink.Record) testenv.Writer {
		tbl := pgx.Identifier{table + "_" + name}
		conn, err := pgx.Connect(ctx, testenv.Postgres(b))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE "+tbl.Sanitize()+" (weir_record_id uuid"+pk+
			", payload bytea NOT NULL, source text NOT NULL, durability text NOT NULL,"+
			" received_at timestamptz NOT NULL, committed_at timestamptz NOT NULL DEFAULT now())"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			conn.Exec(ctx, "DROP TABLE "+tbl.Sanitize())
			conn.Close(ctx)
		})
		k := 0 // Race hands every writer the same batches in order
		return testenv.Writer{Name: name, Write: func(ctx context.Context, _ []sink.Record) error {
			recs := src[k]
			k++
			tx, err := conn.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = tx.CopyFrom(ctx, tbl, cols, pgx.CopyFromSlice(len(recs), func(i int) ([]any, error) {
				r := &recs[i]
				return []any{[16]byte(r.ID), r.Payload, r.Source, r.Durability.String(), r.Received}, nil
			}))
			if err != nil {
				return err
			}
			return tx.Commit(ctx)
		}}
	}
	r := testenv.Race(b, ordered, writer("plain", "", ordered), writer("pk", " PRIMARY KEY", ordered),
		writer("pkrandom", " PRIMARY KEY", random))
	return copyRates{plain: r["plain"], keyed: r["pk"], keyedRandom: r["pkrandom"]}
}

func writeConfigTB(b *testing.B, body string) string {
	b.Helper()
	p := b.TempDir() + "/weir.toml"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		b.Fatal(err)
	}
	return p
}

// recoveredRecords is the records the secondaries took from raw by recovery
// rather than from their live queues.
func recoveredRecords(m map[string]float64) float64 {
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, "weir_secondary_delivered_records_total{") && strings.Contains(k, `path="recovery"`) {
			n += v
		}
	}
	return n
}
