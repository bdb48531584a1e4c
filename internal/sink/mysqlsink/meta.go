package mysqlsink

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/weir-io/weir/internal/sink/recjson"
	"github.com/weir-io/weir/sink"
)

// metaColumns are the columns of a record's key, headers and event time,
// with their definitions.
var metaColumns = []struct{ name, def string }{
	{"weir_key", "LONGBLOB NULL"},
	{"weir_headers", "JSON NULL"},
	{"weir_event_time", "DATETIME(6) NULL"},
}

// metaBytes bounds what a record's key, headers and event time add to an
// interpolated statement (every byte may be escaped to two; base64 adds a
// third).
func metaBytes(r *sink.Record) int {
	n := 2*len(r.Key) + 64
	for _, h := range r.Headers {
		n += 3*(len(h.Key)+len(h.Value)) + 64
	}
	return n
}

// appendMetaArgs appends r's key, headers (JSON) and event time: NULL
// where it has none.
func appendMetaArgs(args []any, r *sink.Record) []any {
	var key, headers, event any
	if r.Key != nil {
		key = r.Key
	}
	if len(r.Headers) > 0 {
		headers = string(recjson.AppendHeaders(nil, r.Headers))
	}
	if !r.EventTime.IsZero() {
		event = r.EventTime.UTC()
	}
	return append(args, key, headers, event)
}

// addMetaColumns adds the metadata columns the table lacks (have lists
// the columns it has), nullable, so that rows and writers from before are
// untouched.
func (s *Sink) addMetaColumns(ctx context.Context, have map[string]bool) error {
	var adds []string
	for _, c := range metaColumns {
		if !have[c.name] {
			adds = append(adds, "ADD COLUMN "+quoteIdent(c.name)+" "+c.def)
		}
	}
	if len(adds) == 0 {
		return nil
	}
	if _, err := s.db.ExecContext(ctx, "ALTER TABLE "+s.table+" "+strings.Join(adds, ", ")); err != nil {
		return classify("add the key, headers and event time columns to "+s.table, err)
	}
	s.log.Info("added the key, headers and event time columns", "table", s.table, "columns", len(adds))
	return nil
}

// columnNames lists the table's columns.
func (s *Sink) columnNames(ctx context.Context, schema sql.NullString, tblName string) (map[string]bool, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT COLUMN_NAME FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?`, schema, tblName)
	if err != nil {
		return nil, classify("inspect table "+s.table, err)
	}
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, classify("inspect table "+s.table, err)
		}
		have[name] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysqlsink: inspect table %s: %w", s.table, err)
	}
	return have, nil
}
