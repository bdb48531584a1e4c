package pgsink

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/sink"
)

// Benchmarks against the real server. Each prints a "BENCH: {json}" line;
// run them with
//
//	go test -run '^$' -bench . -benchtime 1x -count 5 ./internal/sink/pgsink
//
// The baseline is a bare pgx CopyFrom of the same rows, in the same
// batches, into a plain table with the same columns and no index, in the
// same run; ratio = sink rows/s ÷ baseline rows/s. A second baseline
// copies into the same table with the sink's primary key (ratio_pk): the
// unique index on a random 128-bit key, not the insert path, is most of the
// gap to the first.

const (
	benchPayloadBytes = 256
	benchBatch        = 4096
)

func benchBatches(b *testing.B) [][]sink.Record {
	n := 24
	if s := os.Getenv("WEIR_BENCH_BATCHES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	out := make([][]sink.Record, n)
	now := time.Now().Truncate(time.Microsecond)
	payload := make([]byte, benchPayloadBytes)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	tag := time.Now().UnixNano()
	for i := range out {
		recs := make([]sink.Record, benchBatch)
		for j := range recs {
			sum := sha256.Sum256(fmt.Appendf(nil, "%d/%d/%d", tag, i, j))
			recs[j] = sink.Record{ID: sink.RecordID(sum[:16]), Payload: payload, Received: now, Source: "socket"}
		}
		out[i] = recs
	}
	return out
}

func benchLine(fields map[string]any) {
	fields["date"] = time.Now().UTC().Format(time.RFC3339)
	j, _ := json.Marshal(fields)
	fmt.Printf("BENCH: %s\n", j)
}

func rows(batches [][]sink.Record) int {
	n := 0
	for _, b := range batches {
		n += len(b)
	}
	return n
}

// baselineCopy is rows/s of a bare CopyFrom per batch, each in its own
// transaction, into a plain table.
// With pk the table has the sink's primary key (but the copy has no
// conflict handling): that shows what the index alone costs.
func baselineCopy(b *testing.B, e *env, batches [][]sink.Record, pk bool) float64 {
	ctx := context.Background()
	tbl := pgx.Identifier{e.table + "_plain"}
	key := ""
	if pk {
		key = " PRIMARY KEY"
	}
	e.exec(ctx, "CREATE TABLE "+tbl.Sanitize()+` (weir_record_id uuid`+key+`, payload bytea, source text, durability text,
		received_at timestamptz, committed_at timestamptz DEFAULT now())`)
	defer e.exec(ctx, "DROP TABLE "+tbl.Sanitize())
	c := e.conn(ctx)
	defer c.Close(ctx)
	start := time.Now()
	for _, recs := range batches {
		tx, err := c.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		_, err = tx.CopyFrom(ctx, tbl, []string{"weir_record_id", "payload", "source", "durability", "received_at"},
			pgx.CopyFromSlice(len(recs), func(i int) ([]any, error) {
				r := &recs[i]
				return []any{[16]byte(r.ID), r.Payload, r.Source, r.Durability.String(), r.Received}, nil
			}))
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return float64(rows(batches)) / time.Since(start).Seconds()
}

func sinkRate(b *testing.B, e *env, batches [][]sink.Record) float64 {
	ctx := context.Background()
	s := e.open(b, e.dsn, Options{Table: e.table + "_sink"})
	defer e.exec(ctx, "DROP TABLE "+s.Table())
	defer s.Close()
	start := time.Now()
	for _, recs := range batches {
		res, err := s.Commit(ctx, sink.NewBatch(recs))
		if err != nil || len(res.Rejected) > 0 {
			b.Fatalf("commit: %v %v", err, res.Rejected)
		}
	}
	return float64(rows(batches)) / time.Since(start).Seconds()
}

// BenchmarkSink measures the sink against the bare COPY baselines.
func BenchmarkSink(b *testing.B) {
	e := newEnv(b)
	batches := benchBatches(b)
	b.ResetTimer()
	for range b.N {
		base := baselineCopy(b, e, batches, false)
		basePK := baselineCopy(b, e, batches, true)
		got := sinkRate(b, e, batches)
		b.ReportMetric(got, "rows/s")
		benchLine(map[string]any{
			"name": "pgsink", "rows_per_s": got, "baseline_rows_per_s": base, "ratio": got / base,
			"baseline_pk_rows_per_s": basePK, "ratio_pk": got / basePK,
			"batch": benchBatch, "payload_bytes": benchPayloadBytes, "rows": rows(batches),
		})
	}
}
