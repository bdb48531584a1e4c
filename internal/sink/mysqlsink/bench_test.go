package mysqlsink

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
)

// Benchmarks against the real server. Each iteration measures, on the
// same rows and interleaved batch by batch (testenv.Race), for random ids
// and for time-ordered (UUIDv7 layout) ids:
//
//   - a bare multi-row INSERT per batch (driver-interpolated, one COMMIT
//     each) into a table with the sink's columns and primary key
//     (insert_pk), and into the same table without a primary key, which
//     InnoDB appends to in its hidden row id order (insert_plain);
//   - LOAD DATA LOCAL INFILE of each batch, one COMMIT each, into the
//     keyed table (load_pk);
//   - the sink.
//
// Each prints a "BENCH: {json}" line with the rates and the ratios of its
// run; run them with
//
//	go test -run '^$' -bench . -benchtime 1x -count 5 ./internal/sink/mysqlsink
//
// and take the medians (go run ./internal/tools/benchreport -in FILE).

const (
	benchPayloadBytes = 256
	benchBatch        = 4096
	benchBatches      = 24
)

// benchTable creates a table with the sink's columns, with or without its
// primary key, dropped when the benchmark ends.
func benchTable(b *testing.B, e *env, name string, pk bool) string {
	key := ""
	if pk {
		key = " PRIMARY KEY"
	}
	tbl := quoteIdent(e.table + "_" + name)
	e.exec("CREATE TABLE " + tbl + ` (weir_record_id BINARY(16)` + key + `, payload LONGBLOB NOT NULL,
		source VARCHAR(255) NOT NULL, durability VARCHAR(16) NOT NULL, received_at DATETIME(6) NOT NULL,
		committed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB`)
	b.Cleanup(func() { e.exec("DROP TABLE " + tbl) })
	return tbl
}

// benchDB is a root connection pool with interpolated parameters, closed
// when the benchmark ends.
func benchDB(b *testing.B, e *env) *sql.DB {
	cfg, err := mysql.ParseDSN(e.rootDSN)
	if err != nil {
		b.Fatal(err)
	}
	cfg.InterpolateParams = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

// inTx runs q in a transaction of its own and commits it.
func inTx(ctx context.Context, db *sql.DB, q string, args ...any) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return err
	}
	return tx.Commit()
}

// bareInsert is a bare multi-row INSERT per batch.
func bareInsert(b *testing.B, e *env, name string, pk bool) testenv.Writer {
	tbl := benchTable(b, e, name, pk)
	db := benchDB(b, e)
	q := "INSERT INTO " + tbl + " (weir_record_id, payload, source, durability, received_at) VALUES " +
		strings.TrimSuffix(strings.Repeat("(?,?,?,?,?),", benchBatch), ",")
	args := make([]any, 0, 5*benchBatch)
	return testenv.Writer{Name: name, Write: func(ctx context.Context, recs []sink.Record) error {
		args = args[:0]
		for k := range recs {
			r := &recs[k]
			args = append(args, r.ID[:], r.Payload, r.Source, r.Durability.String(), r.Received.UTC())
		}
		return inTx(ctx, db, q, args...)
	}}
}

// loadData is LOAD DATA LOCAL INFILE of each batch, in LOAD DATA's
// default text format (tab-separated, backslash escapes).
func loadData(b *testing.B, e *env, name string) testenv.Writer {
	tbl := benchTable(b, e, name, true)
	db := benchDB(b, e)
	var buf bytes.Buffer
	handler := "weir_bench_" + e.table + "_" + name
	mysql.RegisterReaderHandler(handler, func() io.Reader { return bytes.NewReader(buf.Bytes()) })
	b.Cleanup(func() { mysql.DeregisterReaderHandler(handler) })
	q := "LOAD DATA LOCAL INFILE 'Reader::" + handler + "' INTO TABLE " + tbl +
		" (weir_record_id, payload, source, durability, received_at)"
	return testenv.Writer{Name: name, Write: func(ctx context.Context, recs []sink.Record) error {
		buf.Reset()
		for k := range recs {
			r := &recs[k]
			escapeField(&buf, r.ID[:])
			buf.WriteByte('\t')
			escapeField(&buf, r.Payload)
			buf.WriteByte('\t')
			escapeField(&buf, []byte(r.Source))
			buf.WriteByte('\t')
			buf.WriteString(r.Durability.String())
			buf.WriteByte('\t')
			buf.WriteString(r.Received.UTC().Format("2006-01-02 15:04:05.000000"))
			buf.WriteByte('\n')
		}
		return inTx(ctx, db, q)
	}}
}

// escapeField writes p as a field of LOAD DATA's default format.
func escapeField(buf *bytes.Buffer, p []byte) {
	for _, c := range p {
		switch c {
		case '\\':
			buf.WriteString(`\\`)
		case '\t':
			buf.WriteString(`\t`)
		case '\n':
			buf.WriteString(`\n`)
		case 0:
			buf.WriteString(`\0`)
		default:
			buf.WriteByte(c)
		}
	}
}

// sinkWriter is the sink on a new table.
func sinkWriter(b *testing.B, e *env, name string) testenv.Writer {
	s := e.open(b, e.dsn, Options{Table: e.table + "_" + name})
	b.Cleanup(func() { e.exec("DROP TABLE " + quoteIdent(e.table+"_"+name)) })
	return testenv.SinkWriter(name, s)
}

// BenchmarkSink measures the sink with random and with time-ordered ids
// against the bare baselines.
func BenchmarkSink(b *testing.B) {
	e := newEnv(b)
	testenv.EachIDLayout(b, benchBatches, benchBatch, benchPayloadBytes, func(ids, p string, batches [][]sink.Record) {
		r := testenv.Race(b, batches, bareInsert(b, e, p+"plain", false), bareInsert(b, e, p+"pk", true),
			loadData(b, e, p+"load"), sinkWriter(b, e, p+"sink"))
		plain, pk, load, got := r[p+"plain"], r[p+"pk"], r[p+"load"], r[p+"sink"]
		b.ReportMetric(got, "rows/s")
		testenv.BenchLine(map[string]any{
			"name": "mysqlsink/ids=" + ids, "rows": testenv.Rows(batches), "batch": benchBatch, "payload_bytes": benchPayloadBytes,
			"insert_plain_rows_per_s": plain, "insert_pk_rows_per_s": pk, "load_pk_rows_per_s": load,
			"sink_rows_per_s": got, "sink_ratio_insert_pk": got / pk, "sink_ratio_insert_plain": got / plain,
			"sink_ratio_load_pk": got / load,
		})
	})
}
