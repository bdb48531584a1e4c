package mysqlsink

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

func (s *Sink) createSQL() string {
	payload := "LONGBLOB"
	if s.opts.PayloadType == PayloadJSON {
		payload = "JSON"
	}
	meta := ""
	if s.opts.MetadataColumns {
		for _, c := range metaColumns {
			meta += ",\n\t" + c.name + " " + c.def
		}
	}
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	weir_record_id BINARY(16) NOT NULL PRIMARY KEY,
	payload %s NOT NULL,
	source VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	durability VARCHAR(16) NOT NULL,
	received_at DATETIME(6) NOT NULL,
	committed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)%s
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`, s.table, payload, meta)
}

// prepareTable creates the table if it is missing, then checks it.
func (s *Sink) prepareTable(ctx context.Context, dbName, tblName string) error {
	if _, err := s.db.ExecContext(ctx, s.createSQL()); err != nil {
		return classify("create table "+s.table, err)
	}
	schema := sql.NullString{String: dbName, Valid: dbName != ""}
	var engine sql.NullString
	err := s.db.QueryRowContext(ctx, `SELECT ENGINE FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?`, schema, tblName).Scan(&engine)
	if err == sql.ErrNoRows {
		return fmt.Errorf("mysqlsink: table %s does not exist", s.table)
	}
	if err != nil {
		return classify("inspect table "+s.table, err)
	}
	if !strings.EqualFold(engine.String, "InnoDB") {
		return fmt.Errorf("mysqlsink: table %s uses engine %q; the sink needs InnoDB (transactions)", s.table, engine.String)
	}
	if s.opts.MetadataColumns {
		have, err := s.columnNames(ctx, schema, tblName)
		if err != nil {
			return err
		}
		if err := s.addMetaColumns(ctx, have); err != nil {
			return err
		}
	}
	return s.checkColumns(ctx, schema, tblName)
}

// checkColumns checks the table's columns and primary key.
func (s *Sink) checkColumns(ctx context.Context, schema sql.NullString, tblName string) error {
	rows, err := s.db.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE,
			IS_NULLABLE = 'NO' AND COLUMN_DEFAULT IS NULL AND EXTRA NOT LIKE '%auto_increment%' AND EXTRA NOT LIKE '%GENERATED%'
		FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, schema, tblName)
	if err != nil {
		return classify("inspect table "+s.table, err)
	}
	type col struct {
		dataType, colType string
		required          bool
	}
	have := map[string]col{}
	var order []string
	for rows.Next() {
		var name string
		var c col
		if err := rows.Scan(&name, &c.dataType, &c.colType, &c.required); err != nil {
			rows.Close()
			return classify("inspect table "+s.table, err)
		}
		c.dataType, c.colType = strings.ToLower(c.dataType), strings.ToLower(c.colType)
		have[name] = c
		order = append(order, name)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return classify("inspect table "+s.table, err)
	}
	payloadOK := func(c col) bool { return c.dataType == "longblob" }
	payloadWant := "LONGBLOB"
	if s.opts.PayloadType == PayloadJSON {
		// MariaDB's JSON is LONGTEXT with a JSON_VALID check.
		payloadOK = func(c col) bool { return c.dataType == "json" || c.dataType == "longtext" }
		payloadWant = "JSON"
	}
	want := []struct {
		name, typ string
		ok        func(col) bool
	}{
		{"weir_record_id", "BINARY(16)", func(c col) bool { return c.colType == "binary(16)" }},
		{"payload", payloadWant, payloadOK},
		{"source", "VARCHAR(255)", func(c col) bool { return c.colType == "varchar(255)" }},
		{"durability", "VARCHAR(16)", func(c col) bool { return c.dataType == "varchar" }},
		{"received_at", "DATETIME(6)", func(c col) bool { return c.colType == "datetime(6)" }},
		{"committed_at", "DATETIME(6)", func(c col) bool { return c.colType == "datetime(6)" }},
	}
	if s.opts.MetadataColumns {
		want = append(want, []struct {
			name, typ string
			ok        func(col) bool
		}{
			{"weir_key", "LONGBLOB", func(c col) bool { return c.dataType == "longblob" }},
			// MariaDB's JSON is LONGTEXT with a JSON_VALID check.
			{"weir_headers", "JSON", func(c col) bool { return c.dataType == "json" || c.dataType == "longtext" }},
			{"weir_event_time", "DATETIME(6)", func(c col) bool { return c.colType == "datetime(6)" }},
		}...)
	}
	known := map[string]bool{}
	var problems []string
	for _, w := range want {
		known[w.name] = true
		c, ok := have[w.name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("missing column %q (%s)", w.name, w.typ))
		case !w.ok(c):
			problems = append(problems, fmt.Sprintf("column %q has type %s, want %s", w.name, c.colType, w.typ))
		}
	}
	if c, ok := have["committed_at"]; ok && c.required {
		problems = append(problems, `column "committed_at" needs a default (DEFAULT CURRENT_TIMESTAMP(6))`)
	}
	for _, name := range order {
		if !known[name] && have[name].required {
			problems = append(problems, fmt.Sprintf("column %q is NOT NULL without a default, and the sink does not write it", name))
		}
	}
	if len(problems) == 0 {
		var n int
		err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM (
			SELECT INDEX_NAME FROM information_schema.STATISTICS
			WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND NON_UNIQUE = 0
			GROUP BY INDEX_NAME HAVING COUNT(*) = 1 AND MAX(COLUMN_NAME) = 'weir_record_id') k`, schema, tblName).Scan(&n)
		if err != nil {
			return classify("inspect table "+s.table, err)
		}
		if n == 0 {
			problems = append(problems, `column "weir_record_id" is not the primary key (or alone in a unique index); replays could not be deduplicated`)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("mysqlsink: table %s does not fit the sink: %s", s.table, strings.Join(problems, "; "))
	}
	return nil
}
