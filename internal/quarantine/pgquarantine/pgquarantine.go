package pgquarantine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/pgopen"
	"github.com/weir-io/weir/internal/sink/recjson"
)

// Defaults of Options.
const (
	DefaultTable   = "weir_quarantine"
	DefaultTimeout = 30 * time.Second
)

// maxConns bounds the pool: the lanes of a few secondaries may share one
// Writer.
const maxConns = 4

// Options configure Open. Zero fields take their defaults.
type Options struct {
	// DSN is a libpq connection string or URL. Required.
	DSN string
	// Table is the table, "table" or "schema.table" (DefaultTable).
	Table string
	// Timeout bounds connecting and creating the table, and each
	// Quarantine call on top of its context (DefaultTimeout).
	Timeout time.Duration
}

// Writer inserts quarantined records into the table. It is safe for
// concurrent use and implements lane.Lane.
type Writer struct {
	pool      *pgopen.Pool
	table     string // quoted
	timeout   time.Duration
	insertSQL string
}

var _ lane.Lane = (*Writer)(nil)

// columns are the columns Quarantine writes, with their types.
var columns = []struct{ name, typ string }{
	{"sink", "text"}, {"reason_code", "text"}, {"stage", "text"}, {"component", "text"},
	{"rule", "text"}, {"error", "text"}, {"payload", "bytea"}, {"record_id", "uuid"},
	{"source", "text"}, {"origin_pos", "text"}, {"raw_position", "bigint"}, {"record_key", "bytea"},
	{"headers", "jsonb"}, {"event_time", "timestamptz"}, {"first_seen", "timestamptz"},
	{"attempts", "int"}, {"found_by", "text"},
}

// nullable are the columns that may be NULL.
var nullable = map[string]bool{"origin_pos": true, "record_key": true, "headers": true, "event_time": true, "first_seen": true}

// resolve fills o's defaults and parses its table name.
func (o *Options) resolve() (pgx.Identifier, error) {
	if o.DSN == "" {
		return nil, errors.New("pgquarantine: no DSN")
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	ident, err := pgopen.ParseTable(o.Table)
	if err != nil {
		return nil, fmt.Errorf("pgquarantine: %w", err)
	}
	return ident, nil
}

// Open connects and creates the table when it is missing.
func Open(ctx context.Context, o Options) (*Writer, error) {
	ident, err := o.resolve()
	if err != nil {
		return nil, err
	}
	w := &Writer{table: ident.Sanitize(), timeout: o.Timeout}
	names := make([]string, len(columns))
	arrays := make([]string, len(columns))
	defs := make([]string, len(columns))
	for i, c := range columns {
		names[i] = c.name
		arrays[i] = fmt.Sprintf("$%d::%s[]", i+1, c.typ)
		defs[i] = c.name + " " + c.typ
		if !nullable[c.name] {
			defs[i] += " NOT NULL"
		}
	}
	w.insertSQL = fmt.Sprintf("INSERT INTO %s (%s)\nSELECT * FROM unnest(%s)\nON CONFLICT (sink, record_id, reason_code, rule) DO NOTHING",
		w.table, strings.Join(names, ", "), strings.Join(arrays, ", "))
	w.pool, err = pgopen.Open(ctx, o.DSN, maxConns, o.Timeout, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	%s,
	quarantined_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (sink, record_id, reason_code, rule)
)`, w.table, strings.Join(defs, ",\n\t")))
	if err != nil {
		return nil, fmt.Errorf("pgquarantine: table %s: %w", w.table, err)
	}
	return w, nil
}

// Table is the quoted table name.
func (w *Writer) Table() string { return w.table }

// Reject implements lane.Lane: one INSERT of every record of
// recs, skipping those already in the table. It returns once the rows are
// committed, or when ctx (or Options.Timeout) ends.
func (w *Writer) Reject(ctx context.Context, recs []lane.Rejected) error {
	if len(recs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	if _, err := w.pool.Exec(ctx, w.insertSQL, arrays(recs)...); err != nil {
		return fmt.Errorf("pgquarantine: insert %d records into %s: %w", len(recs), w.table, err)
	}
	return nil
}

// arrays are the INSERT's parameters: one array per column.
func arrays(recs []lane.Rejected) []any {
	n := len(recs)
	var (
		sinks, codes, stages, comps = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		rules, errs, sources, found = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		payloads, keys, headers     = make([][]byte, n), make([][]byte, n), make([][]byte, n)
		ids                         = make([][16]byte, n)
		origins                     = make([]pgtype.Text, n)
		positions                   = make([]int64, n)
		events, firsts              = make([]pgtype.Timestamptz, n), make([]pgtype.Timestamptz, n)
		attempts                    = make([]int32, n)
	)
	for i := range recs {
		q, r, rj := &recs[i], &recs[i].Record, &recs[i].Reject
		sinks[i], codes[i], stages[i], comps[i] = text(q.Sink), rj.Code.String(), text(string(rj.Stage)), text(rj.Component)
		rules[i], errs[i], sources[i] = text(rj.Rule), text(rj.Error), text(r.Source)
		found[i] = "live"
		if q.Recovery {
			found[i] = "recovery"
		}
		payloads[i] = r.Payload
		if payloads[i] == nil {
			payloads[i] = []byte{} // NOT NULL: an empty payload
		}
		ids[i] = r.ID
		origins[i] = pgtype.Text{String: text(q.OriginPos), Valid: q.OriginPos != ""}
		positions[i] = int64(q.Pos)
		keys[i] = r.Key // nil: NULL; an empty key stays ''
		if len(r.Headers) > 0 {
			headers[i] = recjson.AppendHeaders(nil, r.Headers)
		}
		events[i] = pgtype.Timestamptz{Time: r.EventTime, Valid: !r.EventTime.IsZero()}
		if rj.FirstSeen != 0 {
			firsts[i] = pgtype.Timestamptz{Time: time.Unix(0, rj.FirstSeen), Valid: true}
		}
		attempts[i] = int32(rj.Attempts)
	}
	return []any{sinks, codes, stages, comps, rules, errs, payloads, ids, sources, origins, positions,
		keys, headers, events, firsts, attempts, found}
}

// text makes s fit a text column: invalid UTF-8 and NUL bytes become
// U+FFFD.
func text(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// Close closes the connections; against a server that stopped answering
// it gives up on a polite close after pgopen.CloseGrace.
func (w *Writer) Close() error {
	w.pool.Close()
	return nil
}
