package pgquarantine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/pgopen"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// BenchmarkQuarantine compares the Writer's one-statement unnest INSERT
// with the alternative it was chosen over: COPY into a per-session
// temporary table, then INSERT … SELECT … ON CONFLICT DO NOTHING, in one
// transaction. Fresh record ids every batch (no conflicts).
//
//	go test ./internal/quarantine/pgquarantine -run '^$' -bench BenchmarkQuarantine -benchtime 3s -count 2
func BenchmarkQuarantine(b *testing.B) {
	dsn := testenv.Postgres(b)
	for _, batch := range []int{16, 256} {
		b.Run(fmt.Sprintf("unnest/batch=%d", batch), func(b *testing.B) {
			name := benchTable(b, dsn)
			w, err := Open(context.Background(), Options{DSN: dsn, Table: name})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			runBench(b, batch, w.Reject)
		})
		b.Run(fmt.Sprintf("copy-staging/batch=%d", batch), func(b *testing.B) {
			name := benchTable(b, dsn)
			w, err := Open(context.Background(), Options{DSN: dsn, Table: name})
			if err != nil {
				b.Fatal(err)
			}
			w.Close() // made the table
			s := openStaging(b, dsn, name)
			defer s.pool.Close()
			runBench(b, batch, s.quarantine)
		})
	}
}

func runBench(b *testing.B, batch int, write func(context.Context, []lane.Rejected) error) {
	payload := []byte(`{"order_id":"` + strings.Repeat("x", 24) + `","amount":-12.5,"currency":"EUR","lines":[` +
		strings.Repeat(`{"sku":"abc-123","qty":2},`, 8) + `{"sku":"z","qty":1}]}`)
	recs := make([]lane.Rejected, batch)
	var n uint64
	b.SetBytes(int64(batch * len(payload)))
	for b.Loop() {
		for i := range recs {
			n++
			var id sink.RecordID
			id[0], id[1], id[2], id[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
			recs[i] = lane.Rejected{Sink: "pg", Pos: n,
				Reject: record.Rejection{Code: record.CodeDQ, Stage: record.StageCheck, Component: "orders@3",
					Rule: "positive_amount", Error: "rule positive_amount: record.amount > 0 is false", Attempts: 1,
					FirstSeen: time.Now().UnixNano()},
				Record: sink.Record{ID: id, Payload: payload, Source: "kafka:orders", Key: []byte("order-1"),
					Headers: []sink.Header{{Key: "trace", Value: []byte("0af7651916cd43dd8448eb211c80319c")}}}}
		}
		if err := write(context.Background(), recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
}

func benchTable(b *testing.B, dsn string) string { return testenv.PostgresTable(b, dsn, "quar_bench") }

// staging is the COPY-into-a-temporary-table alternative.
type staging struct {
	pool  *pgxpool.Pool
	table string
	cols  []string
}

func openStaging(b *testing.B, dsn, name string) *staging {
	table := pgx.Identifier{name}.Sanitize()
	cfg, err := pgopen.Config(dsn, maxConns, DefaultTimeout)
	if err != nil {
		b.Fatal(err)
	}
	after := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if err := after(ctx, c); err != nil {
			return err
		}
		_, err := c.Exec(ctx, "CREATE TEMP TABLE q_stage (LIKE "+table+" INCLUDING DEFAULTS) ON COMMIT DELETE ROWS")
		return err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	s := &staging{pool: pool, table: table}
	for _, c := range columns {
		s.cols = append(s.cols, c.name)
	}
	return s
}

func (s *staging) quarantine(ctx context.Context, recs []lane.Rejected) error {
	cols := arrays(recs)
	rows := pgx.CopyFromFunc(func() func() ([]any, error) {
		i := 0
		return func() ([]any, error) {
			if i == len(recs) {
				return nil, nil
			}
			row := make([]any, len(cols))
			for c, col := range cols {
				row[c] = elem(col, i)
			}
			i++
			return row, nil
		}
	}())
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"q_stage"}, s.cols, rows); err != nil {
			return err
		}
		list := strings.Join(s.cols, ", ")
		_, err := tx.Exec(ctx, "INSERT INTO "+s.table+" ("+list+") SELECT "+list+
			" FROM q_stage ON CONFLICT (sink, record_id, reason_code, rule) DO NOTHING")
		return err
	})
}

// elem is element i of one of arrays' column slices.
func elem(col any, i int) any {
	switch c := col.(type) {
	case []string:
		return c[i]
	case [][]byte:
		return c[i]
	case [][16]byte:
		return c[i]
	case []int64:
		return c[i]
	case []int32:
		return c[i]
	case []pgtype.Text:
		return c[i]
	case []pgtype.Timestamptz:
		return c[i]
	}
	panic(fmt.Sprintf("column of type %T", col))
}
