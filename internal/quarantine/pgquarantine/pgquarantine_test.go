package pgquarantine_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/quarantine/pgquarantine"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func table(t testing.TB, dsn string) string { return testenv.PostgresTable(t, dsn, "quar") }

func open(t testing.TB, dsn, name string) *pgquarantine.Writer {
	t.Helper()
	w, err := pgquarantine.Open(context.Background(), pgquarantine.Options{DSN: dsn, Table: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// recs makes n quarantined records from position from; every kind of
// metadata shows up among them.
func recs(from, n int) []lane.Rejected {
	out := make([]lane.Rejected, n)
	for i := range out {
		p := from + i
		var id sink.RecordID
		id[0], id[1], id[15] = byte(p), byte(p>>8), 0x5a
		q := lane.Rejected{Sink: "pg", Pos: uint64(p), Recovery: p%2 == 1,
			Reject: record.Rejection{Code: record.CodeDQ, Stage: record.StageCheck, Component: "orders@3",
				Rule: "positive_amount", Error: fmt.Sprintf("rule positive_amount failed on record %d", p), Attempts: 1,
				FirstSeen: time.Date(2026, 3, 4, 5, 6, 7, p*1000, time.UTC).UnixNano()},
			Record: sink.Record{ID: id, Payload: fmt.Appendf(nil, `{"amount":-%d}`, p), Source: "kafka:orders",
				Received: time.Unix(1_700_000_000, 0)}}
		switch p % 4 {
		case 0:
			q.Record.Key = fmt.Appendf(nil, "k%d", p)
			q.Record.Headers = []sink.Header{{Key: "trace", Value: []byte("abc")}, {Key: "bin", Value: []byte{0xff, 0, byte(p)}}}
			q.Record.EventTime = time.Date(2026, 1, 2, 3, 4, 5, p*1000, time.UTC)
			q.OriginPos = fmt.Sprintf("orders/0@%d", p)
		case 1:
			q.Record.Key = []byte{} // an empty key, not none
		case 2:
			q.Reject = record.Rejection{Code: record.CodeSinkRefused, Stage: record.StageSecondary, Component: "pg",
				Error: "bad \x00 bytes \xff here", Attempts: 3} // no rule, no first-seen
			q.Record.Payload = []byte{0xff, 0xfe, 0}
			q.Record.Source = "sock\x00et"
		}
		out[i] = q
	}
	return out
}

type row struct {
	sink, code, stage, component, rule, errText, source, foundBy string
	payload, key                                                 []byte
	id                                                           [16]byte
	origin                                                       *string
	pos                                                          int64
	headers                                                      []byte
	eventTime, firstSeen                                         *time.Time
	attempts                                                     int32
	quarantinedAt                                                time.Time
}

func readRows(t *testing.T, dsn, name string) []row {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT sink, reason_code, stage, component, rule, error, source, found_by, payload,
		record_key, record_id, origin_pos, raw_position, headers::text, event_time, first_seen, attempts, quarantined_at
		FROM `+pgx.Identifier{name}.Sanitize()+` ORDER BY raw_position, reason_code, rule`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.sink, &x.code, &x.stage, &x.component, &x.rule, &x.errText, &x.source, &x.foundBy, &x.payload,
			&x.key, &x.id, &x.origin, &x.pos, &x.headers, &x.eventTime, &x.firstSeen, &x.attempts, &x.quarantinedAt)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRoundTripEveryColumn(t *testing.T) {
	dsn := testenv.Postgres(t)
	name := table(t, dsn)
	w := open(t, dsn, name)
	in := recs(0, 8)
	if err := w.Reject(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	got := readRows(t, dsn, name)
	if len(got) != len(in) {
		t.Fatalf("%d rows, want %d", len(got), len(in))
	}
	for i, x := range got {
		checkRow(t, x, in[i])
	}
}

func checkRow(t *testing.T, x row, q lane.Rejected) {
	t.Helper()
	rj, r := q.Reject, q.Record
	foundBy := map[bool]string{false: "live", true: "recovery"}[q.Recovery]
	if x.sink != q.Sink || x.code != rj.Code.String() || x.stage != string(rj.Stage) || x.component != rj.Component ||
		x.rule != rj.Rule || x.foundBy != foundBy || x.pos != int64(q.Pos) || x.attempts != int32(rj.Attempts) ||
		x.id != [16]byte(r.ID) || !bytes.Equal(x.payload, r.Payload) || time.Since(x.quarantinedAt) > time.Minute {
		t.Fatalf("row %+v, want %+v", x, q)
	}
	clean := strings.NewReplacer("\x00", "\uFFFD", "\xff", "\uFFFD")
	if x.errText != clean.Replace(rj.Error) || x.source != clean.Replace(r.Source) {
		t.Fatalf("row %d: error %q source %q, want %q and %q with U+FFFD for NUL and bad UTF-8", q.Pos, x.errText, x.source, rj.Error, r.Source)
	}
	switch {
	case r.Key == nil && x.key != nil, r.Key != nil && (x.key == nil || !bytes.Equal(x.key, r.Key)):
		t.Fatalf("row %d: key %q (nil %v), want %q (nil %v)", q.Pos, x.key, x.key == nil, r.Key, r.Key == nil)
	case (q.OriginPos == "") != (x.origin == nil), x.origin != nil && *x.origin != q.OriginPos:
		t.Fatalf("row %d: origin %v, want %q", q.Pos, x.origin, q.OriginPos)
	case r.EventTime.IsZero() != (x.eventTime == nil), x.eventTime != nil && !x.eventTime.Equal(r.EventTime):
		t.Fatalf("row %d: event time %v, want %v", q.Pos, x.eventTime, r.EventTime)
	case (rj.FirstSeen == 0) != (x.firstSeen == nil), x.firstSeen != nil && x.firstSeen.UnixNano() != rj.FirstSeen:
		t.Fatalf("row %d: first seen %v, want %v", q.Pos, x.firstSeen, time.Unix(0, rj.FirstSeen))
	}
	if len(r.Headers) == 0 {
		if x.headers != nil {
			t.Fatalf("row %d: headers %s, want NULL", q.Pos, x.headers)
		}
		return
	}
	want := fmt.Sprintf(`[{"key": "trace", "value": "abc", "value_encoding": "utf8"}, {"key": "bin", "value": "%s", "value_encoding": "base64"}]`,
		base64.StdEncoding.EncodeToString(r.Headers[1].Value))
	if string(x.headers) != want {
		t.Fatalf("row %d: headers %s, want %s", q.Pos, x.headers, want)
	}
}

// A batch written again, a record twice in one batch, and a rehydrating
// recovery add no row; a second rule refusing the same record does.
func TestRewriteAddsNoRow(t *testing.T) {
	dsn := testenv.Postgres(t)
	name := table(t, dsn)
	w := open(t, dsn, name)
	ctx := context.Background()
	in := recs(0, 6)
	for i := range in {
		in[i].Recovery = false
	}
	for range 2 {
		if err := w.Reject(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	again := append(recs(4, 4), recs(4, 4)...) // overlaps, and each record twice
	for i := range again {
		again[i].Recovery = true
	}
	if err := w.Reject(ctx, again); err != nil {
		t.Fatal(err)
	}
	other := recs(0, 1)
	other[0].Reject.Rule = "has_currency"
	if err := w.Reject(ctx, other); err != nil {
		t.Fatal(err)
	}
	got := readRows(t, dsn, name)
	if len(got) != 9 { // positions 0..7, and record 0 under a second rule
		t.Fatalf("%d rows, want 9", len(got))
	}
	// Rows by position, record 0 twice: got[5] is position 4 (first
	// written live), got[7] position 6 (first written by the recovery).
	if got[5].pos != 4 || got[5].foundBy != "live" || got[7].pos != 6 || got[7].foundBy != "recovery" {
		t.Fatalf("the first write of a row must stay: %+v / %+v", got[5], got[7])
	}
	if err := w.Reject(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// A server that stops answering mid-write releases the caller when its
// context ends (or Options.Timeout does), and the writer works again once
// the server answers.
func TestStalledServerReturnsWithTheContext(t *testing.T) {
	dsn := testenv.Postgres(t)
	name := table(t, dsn)
	via, p := testenv.PostgresProxy(t, dsn)
	w, err := pgquarantine.Open(context.Background(), pgquarantine.Options{DSN: via, Table: name, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Reject(context.Background(), recs(0, 4)); err != nil {
		t.Fatal(err)
	}
	p.Stall()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	err = w.Reject(ctx, recs(100, 256))
	cancel()
	if err == nil || time.Since(start) > time.Second {
		t.Fatalf("stalled write: %v after %v, want an error within a second", err, time.Since(start))
	}
	start = time.Now() // no deadline in ctx: Options.Timeout bounds it
	err = w.Reject(context.Background(), recs(200, 4))
	if err == nil || time.Since(start) > 3*time.Second || !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("stalled write without a deadline: %v after %v, want the 2s timeout", err, time.Since(start))
	}
	p.Resume()
	if err := w.Reject(context.Background(), recs(300, 4)); err != nil {
		t.Fatalf("after the server answers again: %v", err)
	}
	// The writes that returned nil are stored. A failed one may be too:
	// its statement can reach the server after the caller gave up (here
	// the proxy forwards what it held on Resume); the primary key makes
	// writing it again harmless.
	have := map[int64]bool{}
	for _, x := range readRows(t, dsn, name) {
		have[x.pos] = true
	}
	for _, p := range []int64{0, 1, 2, 3, 300, 301, 302, 303} {
		if !have[p] {
			t.Fatalf("position %d, written with a nil return, is missing", p)
		}
	}
}

func TestOpenRefuses(t *testing.T) {
	for _, o := range []pgquarantine.Options{
		{},
		{DSN: "postgres://127.0.0.1:1/x", Table: "a.b.c"},
		{DSN: "postgres://127.0.0.1:1/x", Table: "a..b"},
		{DSN: "postgres://127.0.0.1:1/x", Timeout: 200 * time.Millisecond}, // nothing listens
	} {
		if w, err := pgquarantine.Open(context.Background(), o); err == nil {
			w.Close()
			t.Fatalf("%+v accepted", o)
		}
	}
}
