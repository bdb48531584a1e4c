package pgsink

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
)

// Benchmarks against the real server. Each iteration measures, in the same
// run and on the same rows, for random ids and for time-ordered (UUIDv7
// layout) ids:
//
//   - a bare pgx CopyFrom per batch, each in its own transaction, into a
//     plain table with the sink's columns and no index (copy_plain);
//   - the same into the table with the sink's primary key (copy_pk);
//   - the sink with each insert method (sink_copy, sink_unnest);
//
// and once, the sink on a raw table (positions) with each method, against
// a bare CopyFrom of the same rows and positions into a table with the raw
// table's primary key (raw_copy_pk). Each prints a "BENCH: {json}" line
// with the rates and the ratios of the same run; run them with
//
//	go test -run '^$' -bench . -benchtime 1x -count 5 ./internal/sink/pgsink
//
// and take the medians (go run ./internal/tools/benchreport -in FILE).

const (
	benchPayloadBytes = 256
	benchBatch        = 4096
	benchBatches      = 24
)

func benchLine(fields map[string]any) {
	fields["date"] = time.Now().UTC().Format(time.RFC3339)
	j, _ := json.Marshal(fields)
	fmt.Printf("BENCH: %s\n", j)
}

func rowCount(batches [][]sink.Record) int {
	n := 0
	for _, b := range batches {
		n += len(b)
	}
	return n
}

// Baseline tables: the sink's columns, and a key as the sink's tables
// have.
const (
	keyNone     = ""
	keyRecordID = "weir_record_id"
	keyPosition = "weir_position"
)

// writer is one contestant of a benchmark: it writes one batch.
type writer struct {
	name  string
	write func(ctx context.Context, recs []sink.Record) error
	spent time.Duration
}

// bareCopy is a bare CopyFrom per batch, each in its own transaction, into
// a new table keyed on key (keyNone: no index). With keyPosition each row
// also gets its position, counted from 0.
func bareCopy(b *testing.B, e *env, name, key string) *writer {
	ctx := context.Background()
	tbl := pgx.Identifier{e.table + "_" + name}
	cols := []string{"weir_record_id", "payload", "source", "durability", "received_at"}
	ddl := `weir_record_id uuid, payload bytea, source text, durability text, received_at timestamptz,
		committed_at timestamptz DEFAULT now()`
	switch key {
	case keyRecordID:
		ddl = `weir_record_id uuid PRIMARY KEY, payload bytea, source text, durability text, received_at timestamptz,
		committed_at timestamptz DEFAULT now()`
	case keyPosition:
		ddl += ", weir_position bigint PRIMARY KEY"
		cols = append(cols, "weir_position")
	}
	e.exec(ctx, "CREATE TABLE "+tbl.Sanitize()+" ("+ddl+")")
	c := e.conn(ctx)
	b.Cleanup(func() {
		c.Close(ctx)
		e.exec(ctx, "DROP TABLE "+tbl.Sanitize())
	})
	pos := int64(0)
	return &writer{name: name, write: func(ctx context.Context, recs []sink.Record) error {
		tx, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.CopyFrom(ctx, tbl, cols, pgx.CopyFromSlice(len(recs), func(i int) ([]any, error) {
			r := &recs[i]
			row := []any{[16]byte(r.ID), r.Payload, r.Source, r.Durability.String(), r.Received}
			if key == keyPosition {
				row = append(row, pos)
				pos++
			}
			return row, nil
		}))
		if err != nil {
			return err
		}
		return tx.Commit(ctx)
	}}
}

// sinkWriter is the sink with opts, on a new table.
func sinkWriter(b *testing.B, e *env, name string, opts Options) *writer {
	ctx := context.Background()
	opts.Table = e.table + "_" + name
	s := e.open(b, e.dsn, opts)
	b.Cleanup(func() {
		s.Close()
		e.exec(ctx, "DROP TABLE "+s.Table())
		if opts.Positions {
			e.exec(ctx, "DELETE FROM "+OffsetsTable+" WHERE raw_table = $1", s.Table())
		}
	})
	return &writer{name: name, write: func(ctx context.Context, recs []sink.Record) error {
		res, err := s.Commit(ctx, sink.NewBatch(recs))
		if err == nil && len(res.Rejected) > 0 {
			err = fmt.Errorf("rejected %v", res.Rejected)
		}
		return err
	}}
}

// race writes every batch with every writer, interleaved batch by batch
// (the order rotating), so that the load of a shared machine falls on all
// of them alike, and returns each writer's rows/s by name.
func race(b *testing.B, batches [][]sink.Record, ws ...*writer) map[string]float64 {
	ctx := context.Background()
	for i, recs := range batches {
		for k := range ws {
			w := ws[(i+k)%len(ws)]
			start := time.Now()
			if err := w.write(ctx, recs); err != nil {
				b.Fatalf("%s: %v", w.name, err)
			}
			w.spent += time.Since(start)
		}
	}
	rates := map[string]float64{}
	for _, w := range ws {
		rates[w.name] = float64(rowCount(batches)) / w.spent.Seconds()
	}
	return rates
}

// BenchmarkSink measures the sink by both insert methods, with random and
// with time-ordered ids, against the bare COPY baselines, and the sink on a
// raw table.
func BenchmarkSink(b *testing.B) {
	e := newEnv(b)
	ids := []string{testenv.IDsRandom, testenv.IDsTimeOrdered}
	for n := range b.N {
		for _, k := range ids {
			batches := testenv.BenchBatches(k, benchBatches, benchBatch, benchPayloadBytes)
			p := fmt.Sprintf("%s%d_", k, n) // tables live until the benchmark ends
			r := race(b, batches, bareCopy(b, e, p+"plain", keyNone), bareCopy(b, e, p+"pk", keyRecordID),
				sinkWriter(b, e, p+"copy", Options{InsertMethod: InsertCopy}),
				sinkWriter(b, e, p+"unnest", Options{InsertMethod: InsertUnnest}))
			for _, w := range []string{"plain", "pk", "copy", "unnest"} {
				r[w] = r[p+w]
			}
			b.ReportMetric(r["copy"], "rows/s")
			benchLine(map[string]any{
				"name": "pgsink/ids=" + k, "rows": rowCount(batches), "batch": benchBatch, "payload_bytes": benchPayloadBytes,
				"copy_plain_rows_per_s": r["plain"], "copy_pk_rows_per_s": r["pk"],
				"sink_copy_rows_per_s": r["copy"], "sink_unnest_rows_per_s": r["unnest"],
				"sink_copy_ratio_pk": r["copy"] / r["pk"], "sink_unnest_ratio_pk": r["unnest"] / r["pk"],
				"sink_copy_ratio_plain": r["copy"] / r["plain"], "sink_unnest_ratio_plain": r["unnest"] / r["plain"],
			})
		}
		batches := testenv.BenchBatches(testenv.IDsTimeOrdered, benchBatches, benchBatch, benchPayloadBytes)
		p := fmt.Sprintf("raw%d_", n)
		r := race(b, batches, bareCopy(b, e, p+"base", keyPosition),
			sinkWriter(b, e, p+"copy", Options{InsertMethod: InsertCopy, Positions: true}),
			sinkWriter(b, e, p+"unnest", Options{InsertMethod: InsertUnnest, Positions: true}))
		for _, w := range []string{"base", "copy", "unnest"} {
			r["raw"+w] = r[p+w]
		}
		benchLine(map[string]any{
			"name": "pgsink/raw", "rows": rowCount(batches), "batch": benchBatch, "payload_bytes": benchPayloadBytes,
			"copy_pk_rows_per_s": r["rawbase"], "sink_copy_rows_per_s": r["rawcopy"], "sink_unnest_rows_per_s": r["rawunnest"],
			"sink_copy_ratio_pk": r["rawcopy"] / r["rawbase"], "sink_unnest_ratio_pk": r["rawunnest"] / r["rawbase"],
		})
	}
}
