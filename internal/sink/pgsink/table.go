package pgsink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// parseTable splits a table name into its identifier parts: "events" or
// "schema.events". Each part is used verbatim — case is kept, nothing is
// folded — and quoted when the name is put into SQL.
func parseTable(name string) (pgx.Identifier, error) {
	if name == "" {
		return nil, errors.New("pgsink: no table name")
	}
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("pgsink: table %q: want table or schema.table", name)
	}
	for _, p := range parts {
		if p == "" || strings.ContainsRune(p, 0) {
			return nil, fmt.Errorf("pgsink: table %q: empty identifier or NUL byte", name)
		}
		if len(p) > 63 {
			return nil, fmt.Errorf("pgsink: table %q: identifier %q is longer than 63 bytes", name, p)
		}
	}
	return pgx.Identifier(parts), nil
}

// column is one column the sink writes or relies on.
type column struct {
	name, typ string
}

func (s *Sink) columns() []column {
	cols := []column{
		{"weir_record_id", "uuid"},
		{"payload", s.opts.PayloadType},
		{"source", "text"},
		{"durability", "text"},
		{"received_at", "timestamp with time zone"},
		{"committed_at", "timestamp with time zone"},
	}
	if s.metadata() {
		cols = append(cols, metaColumns...)
	}
	if s.opts.Positions {
		cols = append(cols, column{"weir_position", "bigint"})
	}
	return cols
}

func (s *Sink) createSQL() string {
	key := "weir_record_id uuid PRIMARY KEY"
	if s.opts.Positions {
		// Raw is a log in position order: the position is the key, and a
		// replayed record is kept again (readers deduplicate on the id),
		// so no position ever holds nothing.
		key = "weir_position bigint PRIMARY KEY,\n\tweir_record_id uuid NOT NULL"
	}
	meta := ""
	if s.metadata() {
		meta = ",\n\tweir_key bytea,\n\tweir_headers jsonb,\n\tweir_event_time timestamptz"
	}
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	%s,
	payload %s NOT NULL,
	source text NOT NULL,
	durability text NOT NULL,
	received_at timestamptz NOT NULL,
	committed_at timestamptz NOT NULL DEFAULT now()%s
)`, s.table, key, s.opts.PayloadType, meta)
}

// prepareTable creates the table when it is missing (and CreateTable is
// set), then checks that it has every column the sink needs, with the
// right type, a primary key or unique index on weir_record_id alone (on
// weir_position alone for a raw table), and no other column that an
// insert could not fill.
func (s *Sink) prepareTable(ctx context.Context, pool *pgxpool.Pool) error {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.table).Scan(&exists); err != nil {
		return classify("look up table "+s.table, err, false)
	}
	if !exists {
		if !s.opts.CreateTable {
			return fmt.Errorf("pgsink: table %s does not exist and create_table is off; create it or turn create_table on", s.table)
		}
		if _, err := pool.Exec(ctx, s.createSQL()); err != nil {
			return classify("create table "+s.table, err, false)
		}
		s.log.Info("created table", "table", s.table)
	} else if s.metadata() {
		if err := s.addMetaColumns(ctx, pool); err != nil {
			return err
		}
	}
	return s.validateTable(ctx, pool)
}

func (s *Sink) validateTable(ctx context.Context, pool *pgxpool.Pool) error {
	var kind string
	var canInsert bool
	err := pool.QueryRow(ctx, `SELECT c.relkind::text, has_table_privilege(c.oid, 'INSERT')
		FROM pg_class c WHERE c.oid = to_regclass($1)`, s.table).Scan(&kind, &canInsert)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("pgsink: table %s does not exist", s.table)
	}
	if err != nil {
		return classify("inspect table "+s.table, err, false)
	}
	if kind != "r" && kind != "p" {
		return fmt.Errorf("pgsink: %s is not a table (relkind %q)", s.table, kind)
	}
	if !canInsert {
		return fmt.Errorf("pgsink: the database user may not INSERT into %s", s.table)
	}
	rows, err := pool.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod),
			a.attnotnull AND NOT a.atthasdef AND a.attidentity = '' AND a.attgenerated = ''
		FROM pg_attribute a
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, s.table)
	if err != nil {
		return classify("inspect table "+s.table, err, false)
	}
	type col struct {
		typ      string
		required bool
	}
	have := map[string]col{}
	var order []string
	for rows.Next() {
		var name, typ string
		var required bool
		if err := rows.Scan(&name, &typ, &required); err != nil {
			rows.Close()
			return classify("inspect table "+s.table, err, false)
		}
		have[name] = col{typ, required}
		order = append(order, name)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return classify("inspect table "+s.table, err, false)
	}
	var problems []string
	want := map[string]bool{}
	missingMeta := false
	for _, c := range s.columns() {
		want[c.name] = true
		h, ok := have[c.name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("missing column %q (%s)", c.name, c.typ))
			missingMeta = missingMeta || slices.Contains(metaColumns, c)
		case h.typ != c.typ:
			problems = append(problems, fmt.Sprintf("column %q has type %s, want %s", c.name, h.typ, c.typ))
		}
	}
	if missingMeta {
		problems = append(problems, s.metaHint())
	}
	if h, ok := have["committed_at"]; ok && h.required {
		problems = append(problems, `column "committed_at" needs a default (DEFAULT now())`)
	}
	for _, name := range order {
		if !want[name] && have[name].required {
			problems = append(problems, fmt.Sprintf("column %q is NOT NULL without a default, and the sink does not write it", name))
		}
	}
	if len(problems) == 0 && !s.opts.Positions {
		unique, err := s.uniqueOn(ctx, pool, "weir_record_id")
		if err != nil {
			return err
		}
		if !unique {
			problems = append(problems, `column "weir_record_id" is not the primary key (or alone in a unique index); replays could not be deduplicated`)
		}
	}
	if len(problems) == 0 && s.opts.Positions {
		unique, err := s.uniqueOn(ctx, pool, "weir_position")
		if err != nil {
			return err
		}
		if !unique {
			problems = append(problems, `column "weir_position" is not the primary key (or alone in a unique index); raw reads by position need it`)
		}
		if unique, err = s.uniqueOn(ctx, pool, "weir_record_id"); err != nil {
			return err
		}
		if unique {
			problems = append(problems, `column "weir_record_id" is unique, but a raw table keeps a replayed record again at its new position`)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("pgsink: table %s does not fit the sink: %s", s.table, strings.Join(problems, "; "))
	}
	return nil
}

// uniqueOn reports whether a unique index covers the column alone.
func (s *Sink) uniqueOn(ctx context.Context, pool *pgxpool.Pool, col string) (bool, error) {
	var unique bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (
		SELECT 1 FROM pg_index i JOIN pg_attribute a
			ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indnkeyatts = 1
			AND i.indexprs IS NULL AND i.indpred IS NULL AND a.attname = $2)`, s.table, col).Scan(&unique)
	if err != nil {
		return false, classify("inspect table "+s.table, err, false)
	}
	return unique, nil
}
