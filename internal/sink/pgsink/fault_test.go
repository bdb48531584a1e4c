package pgsink

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
)

func mkRecords(tag string, n int) []sink.Record {
	recs := make([]sink.Record, n)
	for i := range recs {
		var id sink.RecordID
		copy(id[:], fmt.Sprintf("%-8s%08d", tag, i))
		recs[i] = sink.Record{ID: id, Payload: fmt.Appendf(nil, `{"n":%d}`, i), Source: "socket",
			Received: time.Now().Truncate(time.Microsecond)}
	}
	return recs
}

func (e *env) countDistinct(ctx context.Context) (rows, distinct int) {
	e.t.Helper()
	c := e.conn(ctx)
	defer c.Close(context.Background())
	if err := c.QueryRow(ctx, fmt.Sprintf("SELECT count(*), count(DISTINCT weir_record_id) FROM %s",
		pgx.Identifier{e.table}.Sanitize())).Scan(&rows, &distinct); err != nil {
		e.t.Fatal(err)
	}
	return
}

// TestKillConnectionsUnderLoad terminates the sink's backends every 15 ms
// while batches are committed the way the drain does (a transient error
// retries the same batch), by both insert methods, into a keyed table and
// into a raw table. Afterwards the keyed table must hold every committed
// record exactly once; the raw table every record at least once (a commit
// whose acknowledgement was lost is retried and kept again) at contiguous
// positions up to its end; and no session of the sink may be left idle in
// a transaction.
func TestKillConnectionsUnderLoad(t *testing.T) {
	for _, method := range []string{InsertCopy, InsertUnnest} {
		for _, raw := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/raw=%v", method, raw), func(t *testing.T) {
				e := newEnv(t)
				s := e.open(t, e.dsn, Options{Timeout: 10 * time.Second, InsertMethod: method, Positions: raw})
				const batches, per = 60, 500
				killed, failed := e.commitUnderKills(t, s, batches, per)
				t.Logf("%d backends terminated, transient errors by step: %v", killed, failed)
				if killed == 0 || failed["insert"] == 0 {
					t.Fatalf("the fault never hit an insert (killed %d, transient errors %v)", killed, failed)
				}
				e.checkNoIdleInTransaction(t)
				rows, distinct := e.countDistinct(context.Background())
				if !raw {
					if rows != batches*per || distinct != rows {
						t.Fatalf("table holds %d rows (%d distinct), want exactly %d", rows, distinct, batches*per)
					}
					return
				}
				s.pool.Reset() // the idle connections may have been terminated
				end, err := s.End(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				got := readAll(t, s, 4096)
				for i, p := range got {
					if p.Pos != uint64(i) {
						t.Fatalf("record %d at position %d: positions not contiguous", i, p.Pos)
					}
				}
				t.Logf("raw: %d rows, %d distinct, end %d", rows, distinct, end)
				if distinct != batches*per || rows != len(got) || uint64(rows) != end {
					t.Fatalf("raw holds %d rows (%d distinct, %d read) with end %d, want %d distinct and every position below the end",
						rows, distinct, len(got), end, batches*per)
				}
			})
		}
	}
}

// commitUnderKills commits batches of per records, retrying each on a
// transient error, while another goroutine terminates the sink's backends
// every 15 ms. It returns how many backends were terminated and how many
// commits failed, by the step that failed ("begin", "insert", "commit"…).
func (e *env) commitUnderKills(t *testing.T, s *Sink, batches, per int) (killed int, failed map[string]int) {
	failed = map[string]int{}
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			n, err := e.terminate(ctx)
			if err != nil {
				t.Errorf("terminate: %v", err)
				return
			}
			killed += n
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for i := range batches {
		b := sink.NewBatch(mkRecords(fmt.Sprintf("k%03d", i), per))
		for attempt := 0; ; attempt++ {
			_, err := s.Commit(ctx, b)
			if err == nil {
				break
			}
			if !sink.IsTransient(err) {
				t.Fatalf("batch %d: permanent error %v", i, err)
			}
			step, _, _ := strings.Cut(strings.TrimPrefix(err.Error(), "pgsink: "), ":")
			failed[step]++
			if attempt > 200 {
				t.Fatalf("batch %d: still failing: %v", i, err)
			}
			time.Sleep(time.Millisecond << min(attempt, 6))
		}
	}
	return killed, failed
}

// checkNoIdleInTransaction fails when a session of the sink stays idle in
// a transaction: one that a failed commit left open.
func (e *env) checkNoIdleInTransaction(t *testing.T) {
	t.Helper()
	c := e.conn(context.Background())
	defer c.Close(context.Background())
	var n int
	for range 20 { // a session may be between two statements right now
		if err := c.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state LIKE 'idle in transaction%'`, e.appName).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%d sessions of the sink idle in a transaction", n)
}

func TestValidateExistingTable(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name, ddl, want string
		jsonb           bool
	}{
		{"missing column", `(weir_record_id uuid PRIMARY KEY, payload bytea NOT NULL, durability text NOT NULL,
			received_at timestamptz NOT NULL, committed_at timestamptz NOT NULL DEFAULT now())`, `missing column "source" (text)`, false},
		{"mistyped column", `(weir_record_id uuid PRIMARY KEY, payload text NOT NULL, source text, durability text,
			received_at timestamptz, committed_at timestamptz DEFAULT now())`, `column "payload" has type text, want bytea`, false},
		{"wrong payload type", `(weir_record_id uuid PRIMARY KEY, payload bytea NOT NULL, source text, durability text,
			received_at timestamptz, committed_at timestamptz DEFAULT now())`, `column "payload" has type bytea, want jsonb`, true},
		{"no primary key", `(weir_record_id uuid, payload bytea, source text, durability text,
			received_at timestamptz, committed_at timestamptz DEFAULT now())`, `not the primary key`, false},
		{"extra required column", `(weir_record_id uuid PRIMARY KEY, payload bytea, source text, durability text,
			received_at timestamptz, committed_at timestamptz DEFAULT now(), tenant int NOT NULL)`, `column "tenant" is NOT NULL without a default`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.exec(ctx, "CREATE TABLE "+pgx.Identifier{e.table}.Sanitize()+" "+tc.ddl)
			pt := PayloadBytea
			if tc.jsonb {
				pt = PayloadJSONB
			}
			_, err := New(ctx, Options{DSN: e.dsn, Table: e.table, PayloadType: pt, CreateTable: true})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want an error containing %q", err, tc.want)
			}
		})
	}
	t.Run("absent without create_table", func(t *testing.T) {
		e := newEnv(t)
		_, err := New(ctx, Options{DSN: e.dsn, Table: e.table})
		if err == nil || !strings.Contains(err.Error(), "does not exist and create_table is off") {
			t.Fatalf("New: %v", err)
		}
	})
}

// TestSchemaQualifiedQuotedName writes to a schema-qualified table whose
// names need quoting.
func TestSchemaQualifiedQuotedName(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	schema := "Weir Schema " + testenv.Suffix()
	e.exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	t.Cleanup(func() { e.exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE") })
	table := `Events "x"`
	s := e.open(t, e.dsn, Options{Table: schema + "." + table})
	if _, err := s.Commit(ctx, sink.NewBatch(mkRecords("q", 10))); err != nil {
		t.Fatal(err)
	}
	c := e.conn(ctx)
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, table}.Sanitize()).Scan(&n); err != nil || n != 10 {
		t.Fatalf("count: %d, %v", n, err)
	}
	if _, err := New(ctx, Options{DSN: e.dsn, Table: "a.b.c"}); err == nil {
		t.Fatal("three-part name accepted")
	}
}

// TestBisectionIsBounded puts server-only poison into a large batch and
// checks the number of probes, and that a batch of nothing but poison
// still costs at most MaxProbes + n statements.
func TestBisectionIsBounded(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.open(t, e.dsn, Options{PayloadType: PayloadJSONB, MaxProbes: 64})
	recs := mkRecords("b", 4096)
	bad := map[int]bool{7: true, 2000: true, 4095: true}
	for i := range bad {
		recs[i].Payload = []byte(`"\u0000"`)
	}
	before := s.Stats()
	res, err := s.Commit(ctx, sink.NewBatch(recs))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rejected) != len(bad) {
		t.Fatalf("rejected %v", res.Rejected)
	}
	for _, rj := range res.Rejected {
		if !bad[rj.Index] || !strings.Contains(rj.Reason, "22P05") {
			t.Fatalf("rejection %+v", rj)
		}
	}
	probes := s.Stats().Probes - before.Probes
	t.Logf("3 bad rows in 4096: %d probes", probes)
	if probes > 2*3*13 {
		t.Fatalf("%d probes for 3 bad rows", probes)
	}
	if rows, _ := e.countDistinct(ctx); rows != 4096-3 {
		t.Fatalf("%d rows", rows)
	}

	all := mkRecords("p", 200)
	for i := range all {
		all[i].Payload = []byte(`"\u0000"`)
	}
	before = s.Stats()
	res, err = s.Commit(ctx, sink.NewBatch(all))
	if err != nil || len(res.Rejected) != 200 {
		t.Fatalf("%v, %d rejected", err, len(res.Rejected))
	}
	if p := s.Stats().Probes - before.Probes; p > 64+200 {
		t.Fatalf("%d probes for 200 bad rows, bound %d", p, 64+200)
	}
}

func TestClassify(t *testing.T) {
	for code, transient := range map[string]bool{
		"40001": true, "40P01": true, "57P01": true, "53100": true, "53300": true, "08006": true,
		"42P01": false, "28P01": false, "42501": false, "3D000": false, "57P04": false, "XX000": false,
	} {
		err := classify("x", &pgconn.PgError{Code: code}, false)
		if sink.IsTransient(err) != transient {
			t.Errorf("%s: transient = %v, want %v", code, !transient, transient)
		}
	}
	if !sink.IsTransient(classify("x", context.DeadlineExceeded, false)) {
		t.Error("deadline not transient")
	}
	if !sink.IsTransient(classify("x", fmt.Errorf("boom"), true)) {
		t.Error("error on a closed connection not transient")
	}
	if !isDataError(&pgconn.PgError{Code: "22P05"}) || isDataError(&pgconn.PgError{Code: "42P01"}) {
		t.Error("isDataError")
	}
}

func TestAuthFailureIsPermanent(t *testing.T) {
	e := newEnv(t)
	cfg, err := pgconn.ParseConfig(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	dsn := fmt.Sprintf("host=%s port=%d dbname=%s user=weir_no_such_user sslmode=disable", cfg.Host, cfg.Port, cfg.Database)
	_, err = New(context.Background(), Options{DSN: dsn, Table: e.table, CreateTable: true, Timeout: 5 * time.Second})
	if err == nil || sink.IsTransient(err) {
		t.Fatalf("New with an unknown role: %v (transient=%v), want permanent", err, sink.IsTransient(err))
	}
}
