package pgsink

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
)

// Benchmarks against the real server. Each iteration measures, on the
// same rows and interleaved batch by batch (testenv.Race), for random ids
// and for time-ordered (UUIDv7 layout) ids:
//
//   - a bare pgx CopyFrom per batch, each in its own transaction, into a
//     plain table with the sink's columns and no index (copy_plain);
//   - the same into a table with the sink's primary key (copy_pk);
//   - the sink with each insert method (sink_copy, sink_unnest);
//   - the two sinks again on the same batches, every row of which they
//     hold already: a replay (replay_copy, replay_unnest);
//
// and, once, the sink on a raw table with each method against a bare
// CopyFrom of the same rows and positions into a table keyed on the
// position. Each prints a "BENCH: {json}" line with the rates and the
// ratios of its run; run them with
//
//	go test -run '^$' -bench . -benchtime 1x -count 5 ./internal/sink/pgsink
//
// and take the medians (go run ./internal/tools/benchreport -in FILE).

const (
	benchPayloadBytes = 256
	benchBatch        = 4096
	benchBatches      = 24
)

// Keys of the baseline tables.
const (
	keyNone     = ""
	keyRecordID = "weir_record_id"
	keyPosition = "weir_position"
)

// bareCopy is a bare CopyFrom per batch, each in its own transaction, into
// a new table with the sink's columns, keyed on key (keyNone: no index).
// With keyPosition each row also gets its position, counted from 0.
func bareCopy(b *testing.B, e *env, name, key string) testenv.Writer {
	ctx := context.Background()
	tbl := pgx.Identifier{e.table + "_" + name}
	cols := []string{"weir_record_id", "payload", "source", "durability", "received_at"}
	pk := map[string]string{keyRecordID: " PRIMARY KEY"}[key]
	ddl := `weir_record_id uuid` + pk + `, payload bytea, source text, durability text, received_at timestamptz,
		committed_at timestamptz DEFAULT now()`
	if key == keyPosition {
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
	return testenv.Writer{Name: name, Write: func(ctx context.Context, recs []sink.Record) error {
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
func sinkWriter(b *testing.B, e *env, name string, opts Options) testenv.Writer {
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
	return testenv.SinkWriter(name, s)
}

// BenchmarkSink measures the sink by both insert methods, with random and
// with time-ordered ids, against the bare COPY baselines, and the sink on a
// raw table.
func BenchmarkSink(b *testing.B) {
	e := newEnv(b)
	testenv.EachIDLayout(b, benchBatches, benchBatch, benchPayloadBytes, func(ids, p string, batches [][]sink.Record) {
		cp := sinkWriter(b, e, p+"copy", Options{InsertMethod: InsertCopy})
		un := sinkWriter(b, e, p+"unnest", Options{InsertMethod: InsertUnnest})
		r := testenv.Race(b, batches, bareCopy(b, e, p+"plain", keyNone), bareCopy(b, e, p+"pk", keyRecordID), cp, un)
		replay := testenv.Race(b, batches, cp, un)
		plain, pk, c, u := r[p+"plain"], r[p+"pk"], r[p+"copy"], r[p+"unnest"]
		b.ReportMetric(c, "rows/s")
		testenv.BenchLine(map[string]any{
			"name": "pgsink/ids=" + ids, "rows": testenv.Rows(batches), "batch": benchBatch, "payload_bytes": benchPayloadBytes,
			"copy_plain_rows_per_s": plain, "copy_pk_rows_per_s": pk,
			"sink_copy_rows_per_s": c, "sink_unnest_rows_per_s": u,
			"sink_copy_ratio_pk": c / pk, "sink_unnest_ratio_pk": u / pk,
			"sink_copy_ratio_plain": c / plain, "sink_unnest_ratio_plain": u / plain,
			"replay_copy_rows_per_s": replay[p+"copy"], "replay_unnest_rows_per_s": replay[p+"unnest"],
		})
		if ids == testenv.IDsTimeOrdered {
			benchRaw(b, e, p+"raw", batches)
		}
	})
}

// benchRaw measures the sink on a raw table by both methods against a bare
// COPY keyed on the position.
func benchRaw(b *testing.B, e *env, p string, batches [][]sink.Record) {
	r := testenv.Race(b, batches, bareCopy(b, e, p+"base", keyPosition),
		sinkWriter(b, e, p+"copy", Options{InsertMethod: InsertCopy, Positions: true}),
		sinkWriter(b, e, p+"unnest", Options{InsertMethod: InsertUnnest, Positions: true}))
	base, c, u := r[p+"base"], r[p+"copy"], r[p+"unnest"]
	testenv.BenchLine(map[string]any{
		"name": "pgsink/raw", "rows": testenv.Rows(batches), "batch": benchBatch, "payload_bytes": benchPayloadBytes,
		"copy_pk_rows_per_s": base, "sink_copy_rows_per_s": c, "sink_unnest_rows_per_s": u,
		"sink_copy_ratio_pk": c / base, "sink_unnest_ratio_pk": u / base,
	})
}
