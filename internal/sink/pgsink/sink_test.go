package pgsink

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

// pgxpool wakes its health checker half a second after dropping a broken
// connection, from a goroutine that ends by itself even after Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"))
}

// env is one test's table on the real server.
type env struct {
	t       testing.TB
	dsn     string // direct to the server
	table   string // unquoted name
	appName string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{t: t, dsn: testenv.Postgres(t), table: testenv.TableName("weir_pg"), appName: "weir-test-" + testenv.Suffix()}
	t.Cleanup(func() {
		name := pgx.Identifier{e.table}.Sanitize()
		e.exec(context.Background(), "DROP TABLE IF EXISTS "+name)
		e.exec(context.Background(), `DO $$ BEGIN
			IF to_regclass('`+OffsetsTable+`') IS NOT NULL THEN
				DELETE FROM `+OffsetsTable+` WHERE raw_table = '`+name+`';
			END IF; END $$`)
	})
	return e
}

// conn opens a fresh connection straight to the server.
func (e *env) conn(ctx context.Context) *pgx.Conn {
	e.t.Helper()
	c, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		e.t.Fatalf("connect: %v", err)
	}
	return c
}

func (e *env) exec(ctx context.Context, sql string, args ...any) {
	e.t.Helper()
	c := e.conn(ctx)
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *env) open(t testing.TB, dsn string, opts Options) *Sink {
	t.Helper()
	opts.DSN = dsn
	if opts.Table == "" {
		opts.Table = e.table
	}
	opts.CreateTable = true
	opts.ApplicationName = e.appName
	s, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// terminate kills the sink's connections from the server side.
func (e *env) terminate(ctx context.Context) (int, error) {
	c, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return 0, err
	}
	defer c.Close(context.Background())
	var n int
	err = c.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid()`, e.appName).Scan(&n)
	return n, err
}

func (e *env) readBack(ctx context.Context, jsonb, meta bool) ([]sinktest.Stored, error) {
	c, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return nil, err
	}
	defer c.Close(context.Background())
	p := "payload"
	if jsonb {
		p = "convert_to(payload::text, 'UTF8')"
	}
	m := "NULL::bytea, NULL::jsonb, NULL::timestamptz"
	if meta {
		m = "weir_key, weir_headers, weir_event_time"
	}
	rows, err := c.Query(ctx, fmt.Sprintf(`SELECT weir_record_id, %s, source, durability, received_at, %s FROM %s`,
		p, m, pgx.Identifier{e.table}.Sanitize()))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sinktest.Stored
	for rows.Next() {
		var id pgtype.UUID
		var st sinktest.Stored
		var dur string
		var headers []byte
		var event pgtype.Timestamptz
		if err := rows.Scan(&id, &st.Payload, &st.Source, &dur, &st.Received, &st.Key, &headers, &event); err != nil {
			return nil, err
		}
		var r sink.Record
		if err := rawMeta(&r, st.Key, headers, event); err != nil {
			return nil, err
		}
		st.Headers, st.EventTime = r.Headers, r.EventTime
		st.ID = id.Bytes
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

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

func TestConformance(t *testing.T) {
	type variant struct {
		name, pt, method string
		raw, meta        bool
	}
	var variants []variant
	for _, m := range []string{InsertCopy, InsertUnnest} {
		variants = append(variants, variant{m + "/" + PayloadBytea, PayloadBytea, m, false, false},
			variant{m + "/" + PayloadJSONB, PayloadJSONB, m, false, false},
			variant{m + "/metadata", PayloadJSONB, m, false, true}, variant{m + "/raw", PayloadBytea, m, true, true})
	}
	for _, v := range variants {
		pt := v.pt
		t.Run(v.name, func(t *testing.T) {
			sinktest.Run(t, func(t *testing.T) *sinktest.Harness {
				e := newEnv(t)
				target, err := testenv.PostgresTarget(e.dsn)
				if err != nil {
					t.Fatal(err)
				}
				proxy := testenv.NewProxy(t, target)
				via, err := testenv.PostgresVia(e.dsn, proxy.Addr())
				if err != nil {
					t.Fatal(err)
				}
				opts := Options{PayloadType: pt, MaxPayloadBytes: 100 << 10, HealthTimeout: time.Second, Timeout: 20 * time.Second,
					Positions: v.raw, MetadataColumns: v.meta && !v.raw, InsertMethod: v.method}
				s := e.open(t, via, opts)
				// A constraint only the server knows about, to exercise
				// bisection.
				poisonLit := `'\x706f69736f6e'::bytea`
				if pt == PayloadJSONB {
					poisonLit = `'"poison"'::jsonb`
				}
				e.exec(context.Background(), fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT no_poison CHECK (payload <> %s)",
					pgx.Identifier{e.table}.Sanitize(), poisonLit))
				poisons := []sink.Record{
					{Payload: bytes.Repeat([]byte("x"), 101<<10)},      // oversize (Go)
					{Payload: []byte(`"ok"`), Source: "bad\xffsource"}, // invalid UTF-8 text (Go)
					{Payload: []byte(`"ok"`), Source: "nul\x00source"}, // NUL in text (Go)
				}
				if pt == PayloadBytea {
					poisons = append(poisons, sink.Record{Payload: []byte("poison")}) // CHECK (server)
				} else {
					poisons = append(poisons,
						sink.Record{Payload: []byte(`"poison"`)},         // CHECK (server)
						sink.Record{Payload: []byte(`{"a":`)},            // invalid JSON (Go)
						sink.Record{Payload: []byte("\"\xff\"")},         // invalid UTF-8 in JSON (Go)
						sink.Record{Payload: []byte(`{"a":"x\u0000y"}`)}, // NUL escape jsonb refuses (server)
						sink.Record{Payload: []byte(`[1e1000000]`)},      // numeric overflow (server)
					)
				}
				h := &sinktest.Harness{
					Sink:            s,
					BinaryPayloads:  pt == PayloadBytea,
					KeepsDuplicates: v.raw,
					Metadata:        v.meta,
					ReadBack: func(ctx context.Context) ([]sinktest.Stored, error) {
						return e.readBack(ctx, pt == PayloadJSONB, v.meta)
					},
					Poison: func(k int) (sink.Record, bool) {
						if k >= len(poisons) {
							return sink.Record{}, false
						}
						return poisons[k], true
					},
					Break: func(ctx context.Context) error {
						_, err := e.terminate(ctx)
						return err
					},
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
				h.Crash = testenv.KillCrash(e.terminate, h.ReadBack, h.Reopen)
				if pt == PayloadJSONB {
					h.EqualPayload = jsonEqual
				}
				return h
			})
		})
	}
}
