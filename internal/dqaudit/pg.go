package dqaudit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/internal/pgopen"
)

// pgTimeout bounds connecting and creating the table.
const pgTimeout = 30 * time.Second

const pgColumns = `kind, stream, sink, contract, window_from, window_to, outcomes, codes, rules,
	sample_rejected_ids, lo, hi, mode, records`

// PGWriter inserts entries into a PostgreSQL table (see the package doc).
type PGWriter struct {
	pool      *pgopen.Pool
	table     string // quoted
	insertSQL string
}

var _ Writer = (*PGWriter)(nil)

// OpenPostgres connects to dsn and creates table ("" is DefaultTable;
// "schema.table" allowed) and its index when missing.
func OpenPostgres(ctx context.Context, dsn, table string) (*PGWriter, error) {
	ident, err := parseTable(table)
	if err != nil {
		return nil, err
	}
	w := &PGWriter{table: ident.Sanitize()}
	w.insertSQL = fmt.Sprintf(`INSERT INTO %s (%s)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`, w.table, pgColumns)
	index := pgx.Identifier{ident[len(ident)-1] + "_window_to"}.Sanitize()
	w.pool, err = pgopen.Open(ctx, dsn, 2, pgTimeout,
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	kind text NOT NULL,
	stream text,
	sink text NOT NULL,
	contract text,
	window_from timestamptz NOT NULL,
	window_to timestamptz NOT NULL,
	outcomes jsonb,
	codes jsonb,
	rules jsonb,
	sample_rejected_ids text[],
	lo bigint,
	hi bigint,
	mode text,
	records jsonb,
	written_at timestamptz NOT NULL DEFAULT now()
)`, w.table),
		// A table of an older version lacks the records column.
		fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS records jsonb`, w.table),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (window_to)`, index, w.table))
	if err != nil {
		return nil, fmt.Errorf("dqaudit: postgres table %s: %w", w.table, err)
	}
	return w, nil
}

func parseTable(table string) (pgx.Identifier, error) {
	if table == "" {
		table = DefaultTable
	}
	ident, err := pgopen.ParseTable(table)
	if err != nil {
		return nil, fmt.Errorf("dqaudit: %w", err)
	}
	return ident, nil
}

// Table is the quoted table name.
func (w *PGWriter) Table() string { return w.table }

// Write inserts entries in one transaction: a pipelined batch of one
// INSERT each.
func (w *PGWriter) Write(ctx context.Context, entries []Entry) error {
	if len(entries) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for i := range entries {
		args, err := rowArgs(&entries[i])
		if err != nil {
			return err
		}
		b.Queue(w.insertSQL, args...)
	}
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("dqaudit: insert into %s: %w", w.table, err)
	}
	return nil
}

// rowArgs are the INSERT's parameters for e: NULL where e has nothing.
func rowArgs(e *Entry) ([]any, error) {
	var maps [3]any
	for i, m := range []map[string]int64{outcomeKeys(e.Outcomes), e.Codes, e.Rules} {
		if len(m) == 0 {
			continue
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("dqaudit: encode entry: %w", err)
		}
		maps[i] = string(b)
	}
	var sample, records any
	if len(e.Sample) > 0 {
		sample = e.Sample
	}
	if len(e.Records) > 0 {
		b, err := json.Marshal(e.Records)
		if err != nil {
			return nil, fmt.Errorf("dqaudit: encode entry: %w", err)
		}
		records = string(b)
	}
	var lo, hi, mode any
	if e.Kind == KindRecovery || e.Mode != "" {
		lo, hi, mode = int64(e.Lo), int64(e.Hi), e.Mode
	}
	return []any{e.Kind, nullable(e.Stream), e.Sink, nullable(e.Contract), e.From, e.To,
		maps[0], maps[1], maps[2], sample, lo, hi, mode, records}, nil
}

func outcomeKeys(m map[Outcome]int64) map[string]int64 {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[string(k)] = v
	}
	return out
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Close closes the connections; against a server that stopped answering
// it gives up on a polite close after pgopen.CloseGrace.
func (w *PGWriter) Close() error {
	w.pool.Close()
	return nil
}

// ReadPostgres reads the entries of table whose window ended after since
// (the zero time: every entry), oldest window first.
func ReadPostgres(ctx context.Context, dsn, table string, since time.Time) ([]Entry, error) {
	ident, err := parseTable(table)
	if err != nil {
		return nil, err
	}
	cfg, err := pgopen.Config(dsn, 1, pgTimeout)
	if err != nil {
		return nil, fmt.Errorf("dqaudit: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return nil, fmt.Errorf("dqaudit: connect: %w", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT %s FROM %s WHERE window_to > $1
ORDER BY window_from, written_at, kind, sink, stream, contract`, pgColumns, ident.Sanitize()), since)
	if err != nil {
		return nil, fmt.Errorf("dqaudit: read %s: %w", ident.Sanitize(), err)
	}
	out, err := pgx.CollectRows(rows, scanEntry)
	if err != nil {
		return nil, fmt.Errorf("dqaudit: read %s: %w", ident.Sanitize(), err)
	}
	return out, nil
}

func scanEntry(row pgx.CollectableRow) (Entry, error) {
	var e Entry
	var stream, contract, mode *string
	var outcomes, codes, rules, records []byte
	var lo, hi *int64
	err := row.Scan(&e.Kind, &stream, &e.Sink, &contract, &e.From, &e.To, &outcomes, &codes, &rules,
		&e.Sample, &lo, &hi, &mode, &records)
	if err != nil {
		return e, err
	}
	e.Stream, e.Contract, e.Mode = deref(stream), deref(contract), deref(mode)
	if lo != nil && hi != nil {
		e.Lo, e.Hi = uint64(*lo), uint64(*hi)
	}
	e.From, e.To = e.From.UTC(), e.To.UTC()
	for _, m := range []struct {
		raw []byte
		dst any
	}{{outcomes, &e.Outcomes}, {codes, &e.Codes}, {rules, &e.Rules}, {records, &e.Records}} {
		if m.raw == nil {
			continue
		}
		if err := json.Unmarshal(m.raw, m.dst); err != nil {
			return e, fmt.Errorf("decode counts: %w", err)
		}
	}
	return e, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
