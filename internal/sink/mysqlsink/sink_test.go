package mysqlsink

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/sink/recjson"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is one test's table, and a database user of its own so that its
// connections can be found (and killed) in the process list.
type env struct {
	t       testing.TB
	rootDSN string
	dsn     string // as the test's user
	table   string
	user    string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	root := testenv.MySQL(t)
	e := &env{t: t, rootDSN: root, table: testenv.TableName("weir_my"), user: "weir_t_" + testenv.Suffix()}
	cfg, err := mysql.ParseDSN(root)
	if err != nil {
		t.Fatal(err)
	}
	e.exec(fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY 'pw'", e.user))
	e.exec(fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%%'", cfg.DBName, e.user))
	cfg.User, cfg.Passwd = e.user, "pw"
	e.dsn = cfg.FormatDSN()
	t.Cleanup(func() {
		e.exec("DROP TABLE IF EXISTS " + quoteIdent(e.table))
		e.exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", e.user))
	})
	return e
}

func (e *env) db() *sql.DB {
	db, err := sql.Open("mysql", e.rootDSN)
	if err != nil {
		e.t.Fatal(err)
	}
	return db
}

func (e *env) exec(q string, args ...any) {
	e.t.Helper()
	db := e.db()
	defer db.Close()
	if _, err := db.Exec(q, args...); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
}

func (e *env) open(t testing.TB, dsn string, opts Options) *Sink {
	t.Helper()
	opts.DSN = dsn
	if opts.Table == "" {
		opts.Table = e.table
	}
	s, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// kill kills every connection of the test's user.
func (e *env) kill(ctx context.Context) (int, error) {
	db := e.db()
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ?", e.user)
	if err != nil {
		return 0, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	n := 0
	for _, id := range ids {
		if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err == nil {
			n++
		}
	}
	return n, nil
}

func (e *env) readBack(ctx context.Context) ([]sinktest.Stored, error) {
	return e.readBackMeta(ctx, false)
}

// readBackMeta reads the table; with meta, its metadata columns too.
func (e *env) readBackMeta(ctx context.Context, meta bool) ([]sinktest.Stored, error) {
	cfg, _ := mysql.ParseDSN(e.rootDSN)
	cfg.ParseTime, cfg.Loc = true, time.UTC
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	defer db.Close()
	m := "NULL, NULL, NULL"
	if meta {
		m = "weir_key, weir_headers, weir_event_time"
	}
	rows, err := db.QueryContext(ctx, "SELECT weir_record_id, payload, source, durability, received_at, "+m+" FROM "+quoteIdent(e.table))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sinktest.Stored
	for rows.Next() {
		var id []byte
		var dur string
		var st sinktest.Stored
		var headers sql.NullString
		var event sql.NullTime
		if err := rows.Scan(&id, &st.Payload, &st.Source, &dur, &st.Received, &st.Key, &headers, &event); err != nil {
			return nil, err
		}
		if headers.Valid {
			if st.Headers, err = recjson.ParseHeaders([]byte(headers.String)); err != nil {
				return nil, err
			}
		}
		if event.Valid {
			st.EventTime = event.Time
		}
		if len(id) != 16 {
			return nil, fmt.Errorf("id %x", id)
		}
		st.ID = sink.RecordID(id)
		switch dur {
		case "durable":
			st.Durability = sink.Durable
		case "buffered":
			st.Durability = sink.Buffered
		default:
			return nil, fmt.Errorf("durability %q", dur)
		}
		out = append(out, st)
	}
	return out, rows.Err()
}

func TestConformance(t *testing.T) {
	for _, v := range []struct {
		name, pt string
		meta     bool
	}{{PayloadBlob, PayloadBlob, false}, {PayloadJSON, PayloadJSON, false}, {"metadata", PayloadBlob, true}} {
		pt := v.pt
		t.Run(v.name, func(t *testing.T) {
			sinktest.Run(t, func(t *testing.T) *sinktest.Harness {
				e := newEnv(t)
				target, err := testenv.MySQLTarget(e.dsn)
				if err != nil {
					t.Fatal(err)
				}
				proxy := testenv.NewProxy(t, target)
				via, err := testenv.MySQLVia(e.dsn, proxy.Addr())
				if err != nil {
					t.Fatal(err)
				}
				opts := Options{PayloadType: pt, MaxPayloadBytes: 100 << 10, HealthTimeout: time.Second, Timeout: 20 * time.Second, MetadataColumns: v.meta}
				s := e.open(t, via, opts)
				e.exec("ALTER TABLE " + quoteIdent(e.table) + " ADD CONSTRAINT no_poison CHECK (payload <> 'poison' AND payload <> '\"poison\"')")
				poisons := []sink.Record{
					{Payload: bytes.Repeat([]byte("x"), 101<<10)},                                   // oversize (Go)
					{Payload: []byte(`"ok"`), Source: "bad\xffsource"},                              // invalid UTF-8 (Go)
					{Payload: []byte(`"ok"`), Source: strings.Repeat("s", 256)},                     // too long (Go)
					{Payload: []byte(`"ok"`), Received: time.Date(999, 1, 1, 0, 0, 0, 0, time.UTC)}, // DATETIME range (Go)
				}
				if v.meta {
					poisons = append(poisons, sink.Record{Payload: []byte(`"ok"`), EventTime: time.Date(999, 1, 1, 0, 0, 0, 0, time.UTC)}) // DATETIME range (Go)
				}
				if pt == PayloadBlob {
					poisons = append(poisons, sink.Record{Payload: []byte("poison")}) // CHECK (server)
				} else {
					poisons = append(poisons,
						sink.Record{Payload: []byte(`"poison"`)},                                        // CHECK (server)
						sink.Record{Payload: []byte(`{"a":`)},                                           // invalid JSON (Go)
						sink.Record{Payload: []byte(strings.Repeat("[", 40) + strings.Repeat("]", 40))}, // too deep for the server
					)
				}
				h := &sinktest.Harness{
					Sink:           s,
					BinaryPayloads: pt == PayloadBlob,
					Metadata:       v.meta,
					ReadBack:       func(ctx context.Context) ([]sinktest.Stored, error) { return e.readBackMeta(ctx, v.meta) },
					Poison: func(k int) (sink.Record, bool) {
						if k >= len(poisons) {
							return sink.Record{}, false
						}
						return poisons[k], true
					},
					Break: func(ctx context.Context) error { _, err := e.kill(ctx); return err },
					Outage: func(ctx context.Context) (func(), error) {
						proxy.Cut()
						return func() {
							if err := proxy.Restore(); err != nil {
								t.Errorf("restore proxy: %v", err)
							}
						}, nil
					},
					Reopen: func(t *testing.T) sink.Sink { return e.open(t, via, opts) },
				}
				// A crash: the server ends the sink's connections right
				// after a Commit returned.
				h.Crash = testenv.KillCrash(e.kill, h.ReadBack, h.Reopen)
				return h
			})
		})
	}
}

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

// TestKillConnectionsUnderLoad kills the sink's connections again and
// again while batches are committed with the drain's retry rule; the table
// must end up with every record exactly once.
func TestKillConnectionsUnderLoad(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.open(t, e.dsn, Options{Timeout: 10 * time.Second})
	const batches, per = 60, 500
	stop := make(chan struct{})
	var wg sync.WaitGroup
	killed := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			n, err := e.kill(ctx)
			if err != nil {
				t.Errorf("kill: %v", err)
				return
			}
			killed += n
		}
	}()
	transient := 0
	for i := range batches {
		b := sink.NewBatch(mkRecords(fmt.Sprintf("k%03d", i), per))
		for attempt := 0; ; attempt++ {
			_, err := s.Commit(ctx, b)
			if err == nil {
				break
			}
			if !sink.IsTransient(err) {
				close(stop)
				wg.Wait()
				t.Fatalf("batch %d: permanent error %v", i, err)
			}
			transient++
			if attempt > 200 {
				t.Fatalf("batch %d: still failing: %v", i, err)
			}
			time.Sleep(time.Millisecond << min(attempt, 6))
		}
	}
	close(stop)
	wg.Wait()
	db := e.db()
	defer db.Close()
	var rows, distinct int
	if err := db.QueryRow("SELECT COUNT(*), COUNT(DISTINCT weir_record_id) FROM "+quoteIdent(e.table)).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d connections killed, %d transient errors, %d rows", killed, transient, rows)
	if rows != batches*per || distinct != rows {
		t.Fatalf("table holds %d rows (%d distinct), want exactly %d", rows, distinct, batches*per)
	}
	if killed == 0 || transient == 0 {
		t.Fatalf("the fault never hit (killed %d, transient %d)", killed, transient)
	}
}

// TestOneStatementOneCommit checks "N records → 1 INSERT → 1 commit", and
// that a small max_allowed_packet splits the statement, not the commit.
func TestOneStatementOneCommit(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.open(t, e.dsn, Options{})
	if _, err := s.Commit(ctx, sink.NewBatch(mkRecords("one", 4096))); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.LastRecords != 4096 || st.LastStatements != 1 || st.Commits != 1 {
		t.Fatalf("stats %+v, want 4096 records → 1 INSERT → 1 commit", st)
	}
	// A statement limit of 64 KiB forces several INSERTs in one commit.
	s.maxStmt = 64 << 10
	recs := mkRecords("two", 1000)
	for i := range recs {
		recs[i].Payload = []byte(fmt.Sprintf("%q", hex.EncodeToString(bytes.Repeat([]byte{byte(i)}, 100))))
	}
	if _, err := s.Commit(ctx, sink.NewBatch(recs)); err != nil {
		t.Fatal(err)
	}
	st = s.Stats()
	if st.LastStatements < 2 || st.Commits != 2 {
		t.Fatalf("stats %+v, want several INSERTs in one commit", st)
	}
	t.Logf("1000 records of ~200 bytes under a 64 KiB limit: %d INSERTs, 1 commit", st.LastStatements)
}

func TestValidateExistingTable(t *testing.T) {
	cases := []struct{ name, ddl, want string }{
		{"missing column", "(weir_record_id BINARY(16) PRIMARY KEY, payload LONGBLOB NOT NULL, durability VARCHAR(16) NOT NULL, received_at DATETIME(6) NOT NULL, committed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))", `missing column "source"`},
		{"mistyped column", "(weir_record_id VARBINARY(16) PRIMARY KEY, payload LONGBLOB NOT NULL, source VARCHAR(255), durability VARCHAR(16), received_at DATETIME(6), committed_at DATETIME(6) DEFAULT CURRENT_TIMESTAMP(6))", `column "weir_record_id" has type varbinary(16), want BINARY(16)`},
		{"not innodb", "(weir_record_id BINARY(16) PRIMARY KEY, payload LONGBLOB NOT NULL, source VARCHAR(255), durability VARCHAR(16), received_at DATETIME(6), committed_at DATETIME(6) DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=MyISAM", `needs InnoDB`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.exec("CREATE TABLE " + quoteIdent(e.table) + " " + tc.ddl)
			_, err := New(context.Background(), Options{DSN: e.dsn, Table: e.table})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want %q", err, tc.want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	for n, transient := range map[uint16]bool{1213: true, 1205: true, 2006: true, 2013: true, 1927: true, 1045: false, 1146: false, 1142: false} {
		if got := sink.IsTransient(classify("x", &mysql.MySQLError{Number: n})); got != transient {
			t.Errorf("%d: transient %v, want %v", n, got, transient)
		}
	}
	if !sink.IsTransient(classify("x", mysql.ErrInvalidConn)) {
		t.Error("ErrInvalidConn not transient")
	}
	if !isDataError(&mysql.MySQLError{Number: 4025}) || isDataError(&mysql.MySQLError{Number: 1213}) {
		t.Error("isDataError")
	}
}
