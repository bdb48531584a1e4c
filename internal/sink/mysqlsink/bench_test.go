package mysqlsink

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/weir-io/weir/sink"
)

// Benchmarks against the real server; each prints a "BENCH: {json}" line.
//
//	go test -run '^$' -bench . -benchtime 1x -count 5 ./internal/sink/mysqlsink
//
// The baseline is a bare multi-row INSERT per batch (driver-interpolated,
// one COMMIT each) of the same rows into a table with the same primary
// key, in the same run; ratio = sink rows/s ÷ baseline rows/s.

func BenchmarkSink(b *testing.B) {
	n := 24
	if s := os.Getenv("WEIR_BENCH_BATCHES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	const per, payloadBytes = 4096, 256
	payload := []byte(strings.Repeat("abcdefghijklmnop", payloadBytes/16))
	now := time.Now().Truncate(time.Microsecond)
	batches := make([][]sink.Record, n)
	for i := range batches {
		recs := make([]sink.Record, per)
		for j := range recs {
			sum := sha256.Sum256(fmt.Appendf(nil, "%d/%d/%d", now.UnixNano(), i, j))
			recs[j] = sink.Record{ID: sink.RecordID(sum[:16]), Payload: payload, Received: now, Source: "socket"}
		}
		batches[i] = recs
	}
	e := newEnv(b)
	ctx := context.Background()
	for range b.N {
		// Baseline.
		base := e.table + "_base"
		e.exec("CREATE TABLE " + quoteIdent(base) + ` (weir_record_id BINARY(16) PRIMARY KEY, payload LONGBLOB NOT NULL,
			source VARCHAR(255) NOT NULL, durability VARCHAR(16) NOT NULL, received_at DATETIME(6) NOT NULL,
			committed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB`)
		cfg, _ := mysql.ParseDSN(e.rootDSN)
		cfg.InterpolateParams = true
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			b.Fatal(err)
		}
		q := "INSERT INTO " + quoteIdent(base) + " (weir_record_id, payload, source, durability, received_at) VALUES " +
			strings.TrimSuffix(strings.Repeat("(?,?,?,?,?),", per), ",")
		start := time.Now()
		for _, recs := range batches {
			args := make([]any, 0, 5*per)
			for k := range recs {
				r := &recs[k]
				args = append(args, r.ID[:], r.Payload, r.Source, r.Durability.String(), r.Received)
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		baseRate := float64(n*per) / time.Since(start).Seconds()
		db.Close()
		e.exec("DROP TABLE " + quoteIdent(base))

		s := e.open(b, e.dsn, Options{Table: e.table + "_sink"})
		start = time.Now()
		for _, recs := range batches {
			if res, err := s.Commit(ctx, sink.NewBatch(recs)); err != nil || len(res.Rejected) > 0 {
				b.Fatalf("commit: %v %v", err, res.Rejected)
			}
		}
		got := float64(n*per) / time.Since(start).Seconds()
		st := s.Stats()
		s.Close()
		e.exec("DROP TABLE " + quoteIdent(e.table+"_sink"))
		b.ReportMetric(got, "rows/s")
		fields := map[string]any{
			"name": "mysqlsink", "rows_per_s": got, "baseline_rows_per_s": baseRate, "ratio": got / baseRate,
			"batch": per, "payload_bytes": payloadBytes, "rows": n * per,
			"statements_per_batch": float64(st.Statements) / float64(st.Batches), "commits_per_batch": float64(st.Commits) / float64(st.Batches),
			"date": time.Now().UTC().Format(time.RFC3339),
		}
		j, _ := json.Marshal(fields)
		fmt.Printf("BENCH: %s\n", j)
	}
}
