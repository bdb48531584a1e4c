package pgsink

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weir-io/weir/internal/sink/recjson"
	"github.com/weir-io/weir/sink"
)

// metaColumns are the columns of a record's key, headers and event time.
var metaColumns = []column{
	{"weir_key", "bytea"},
	{"weir_headers", "jsonb"},
	{"weir_event_time", "timestamp with time zone"},
}

// metaBytes bounds what a record's key and headers add to a statement.
func metaBytes(r *sink.Record) int {
	n := len(r.Key) + 16
	for _, h := range r.Headers {
		n += 2*(len(h.Key)+len(h.Value)) + 64
	}
	return n
}

// metaColumnsOf builds the key, headers and event time arrays for
// recs[idx...]: NULL where a record has none. The headers' JSON
// (recjson.AppendHeaders) of every row shares one buffer.
func metaColumnsOf(recs []sink.Record, idx []int) (keys, headers [][]byte, events []pgtype.Timestamptz) {
	keys = make([][]byte, len(idx))
	headers = make([][]byte, len(idx))
	events = make([]pgtype.Timestamptz, len(idx))
	var buf []byte
	for k, j := range idx {
		r := &recs[j]
		keys[k] = r.Key
		if r.Key != nil && len(r.Key) == 0 {
			keys[k] = []byte{} // an empty key, not NULL
		}
		if len(r.Headers) > 0 {
			start := len(buf)
			buf = recjson.AppendHeaders(buf, r.Headers)
			headers[k] = buf[start:len(buf):len(buf)]
		}
		if !r.EventTime.IsZero() {
			events[k] = pgtype.Timestamptz{Time: r.EventTime, Valid: true}
		}
	}
	return keys, headers, events
}

// addMetaColumns adds the metadata columns an existing table lacks, when
// CreateTable is on: ALTER TABLE … ADD COLUMN IF NOT EXISTS, nullable, so
// existing rows and writers are untouched and nothing is rewritten. With
// CreateTable off it adds nothing and validateTable refuses the table,
// saying what to run (metaHint).
func (s *Sink) addMetaColumns(ctx context.Context, pool *pgxpool.Pool) error {
	if !s.opts.CreateTable {
		return nil
	}
	names := make([]string, len(metaColumns))
	for i, c := range metaColumns {
		names[i] = c.name
	}
	var have []string
	err := pool.QueryRow(ctx, `SELECT COALESCE(array_agg(attname::text), '{}') FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND attname = ANY($2)`,
		s.table, names).Scan(&have)
	if err != nil {
		return classify("inspect table "+s.table, err, false)
	}
	var adds []string
	for _, c := range metaColumns {
		if !slices.Contains(have, c.name) {
			adds = append(adds, fmt.Sprintf("ADD COLUMN IF NOT EXISTS %s %s", c.name, c.typ))
		}
	}
	if len(adds) == 0 {
		return nil
	}
	alter := fmt.Sprintf("ALTER TABLE %s %s", s.table, strings.Join(adds, ", "))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, alter); err != nil {
		return classify("add the metadata columns to "+s.table, err, false)
	}
	s.log.Info("added the key, headers and event time columns", "table", s.table, "columns", len(adds))
	return nil
}

// metaHint is what validateTable adds when metadata columns are missing.
func (s *Sink) metaHint() string {
	why := "metadata_columns is on"
	if s.opts.Positions {
		why = "a raw table keeps them for recovery"
	}
	adds := make([]string, len(metaColumns))
	for i, c := range metaColumns {
		adds[i] = fmt.Sprintf("ADD COLUMN IF NOT EXISTS %s %s", c.name, c.typ)
	}
	return fmt.Sprintf("the key, headers and event time columns are needed (%s): turn create_table on to have them added, or run %q",
		why, fmt.Sprintf("ALTER TABLE %s %s", s.table, strings.Join(adds, ", ")))
}

// rawMeta decodes what a raw row's metadata columns hold into r.
func rawMeta(r *sink.Record, key, headers []byte, event pgtype.Timestamptz) error {
	r.Key = key
	if len(headers) > 0 {
		hs, err := recjson.ParseHeaders(headers)
		if err != nil {
			return err
		}
		r.Headers = hs
	}
	if event.Valid {
		r.EventTime = event.Time
	}
	return nil
}
