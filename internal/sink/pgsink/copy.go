package pgsink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weir-io/weir/sink"
)

// Insert methods (Options.InsertMethod, insert_method).
const (
	// InsertCopy sends a batch with binary COPY: into a per-session
	// temporary staging table and from there into the table with ON
	// CONFLICT DO NOTHING, or straight into a raw table. The default.
	InsertCopy = "copy"
	// InsertUnnest sends a batch as one INSERT … SELECT FROM unnest(…) of
	// array parameters: no session state, for a pooler in transaction
	// mode.
	InsertUnnest = "unnest"
)

// stagingTable is the temporary table the copy method fills in each
// session. Each Sink has its own connections, so one name serves.
const stagingTable = "weir_stage"

// stagingReady is the pgconn CustomData key that marks a connection whose
// session has its staging table.
const stagingReady = "weir.pgsink.staging"

// buildCopySQL makes the copy method's statements from the columns the
// sink writes and their types.
func (s *Sink) buildCopySQL(cols, types []string) {
	s.copyCols = cols
	if s.opts.Positions {
		// Raw has no ON CONFLICT: the rows go straight into the table.
		s.copyInto = s.ident
		return
	}
	s.copyInto = pgx.Identifier{"pg_temp", stagingTable}
	defs := make([]string, len(cols))
	for i := range cols {
		defs[i] = cols[i] + " " + types[i]
	}
	// Dropped first: a session a pooler hands on may hold another
	// sink's staging table of another shape.
	s.stagingSQL = fmt.Sprintf("DROP TABLE IF EXISTS pg_temp.%s;\nCREATE TEMP TABLE %s (%s) ON COMMIT DELETE ROWS",
		stagingTable, stagingTable, strings.Join(defs, ", "))
	list := strings.Join(cols, ", ")
	s.fromStagingSQL = fmt.Sprintf("INSERT INTO %s (%s)\nSELECT %s FROM pg_temp.%s\nON CONFLICT (weir_record_id) DO NOTHING",
		s.table, list, list, stagingTable)
}

// copying reports whether batches go by COPY.
func (s *Sink) copying() bool { return s.opts.InsertMethod == InsertCopy }

// ensureStaging creates the staging table in conn's session, once per
// connection and outside any transaction, so that an aborted transaction
// cannot take it away. ON COMMIT DELETE ROWS empties it at every commit
// and a rollback discards what was copied, so each transaction finds it
// empty.
func (s *Sink) ensureStaging(ctx context.Context, conn *pgxpool.Conn) error {
	if !s.copying() || s.opts.Positions {
		return nil
	}
	data := conn.Conn().PgConn().CustomData()
	if data[stagingReady] == true {
		return nil
	}
	if _, err := conn.Exec(ctx, s.stagingSQL); err != nil {
		return err
	}
	data[stagingReady] = true
	return nil
}

// classifyInsert classifies an insert's failure. A session that lost its
// staging table (42P01 naming it) is behind a pooler in transaction mode
// or had DISCARD run on it: permanent, with the remedy, and the
// connection is marked to create the table again.
func (s *Sink) classifyInsert(conn *pgxpool.Conn, err error, closed bool) error {
	var pe *pgconn.PgError
	if s.copying() && errors.As(err, &pe) && pe.Code == "42P01" && strings.Contains(pe.Message, stagingTable) {
		delete(conn.Conn().PgConn().CustomData(), stagingReady)
		return sink.Permanent(fmt.Errorf("pgsink: insert: %w (the session lost its temporary staging table: "+
			"behind a pooler in transaction mode, set insert_method = %q)", err, InsertUnnest))
	}
	return classify("insert", err, closed)
}

// insertRows writes recs[idx...] inside tx by the configured method.
func (s *Sink) insertRows(ctx context.Context, tx pgx.Tx, recs []sink.Record, idx []int, pos []int64) error {
	if !s.copying() {
		return s.insertAll(ctx, tx, recs, idx, pos)
	}
	rows := s.rowsOf(recs, idx, pos)
	s.core.Statements.Add(1)
	if _, err := tx.CopyFrom(ctx, s.copyInto, s.copyCols, rows); err != nil {
		return err
	}
	if s.opts.Positions {
		return nil
	}
	s.core.Statements.Add(1)
	_, err := tx.Exec(ctx, s.fromStagingSQL)
	return err
}

// batchRows is a batch's columns, in the order sent: the unnest method's array
// parameters (args) and the copy method's rows (a pgx.CopyFromSource).
type batchRows struct {
	ids      [][16]byte
	payloads [][]byte
	sources  []string
	durs     []string
	recv     []time.Time
	meta     bool
	keys     [][]byte
	headers  [][]byte
	events   []pgtype.Timestamptz
	pos      []int64 // nil unless raw

	next int   // CopyFromSource: 1 + the row Values returns
	row  []any // Values' reused slice
}

// rowsOf builds the columns of recs[idx...] in the order they are sent:
// by id, so that the primary-key index is filled in one ascending pass
// instead of at random places — or, for a raw table, whose key is the
// position, in idx's order, which is position order.
func (s *Sink) rowsOf(recs []sink.Record, idx []int, pos []int64) *batchRows {
	sorted := idx
	if pos == nil {
		sorted = slices.Clone(idx)
		slices.SortFunc(sorted, func(a, b int) int { return bytes.Compare(recs[a].ID[:], recs[b].ID[:]) })
	}
	r := &batchRows{meta: s.metadata()}
	r.ids, r.payloads, r.sources, r.durs, r.recv = columnsOf(recs, sorted)
	if r.meta {
		r.keys, r.headers, r.events = metaColumnsOf(recs, sorted)
	}
	if pos != nil {
		r.pos = make([]int64, len(sorted))
		for k, j := range sorted {
			r.pos[k] = pos[j]
		}
	}
	return r
}

// args are the unnest statement's parameters.
func (r *batchRows) args() []any {
	args := []any{r.ids, r.payloads, r.sources, r.durs, r.recv}
	if r.meta {
		args = append(args, r.keys, r.headers, r.events)
	}
	if r.pos != nil {
		args = append(args, r.pos)
	}
	return args
}

// Next implements pgx.CopyFromSource.
func (r *batchRows) Next() bool {
	if r.next >= len(r.ids) {
		return false
	}
	r.next++
	return true
}

// Values implements pgx.CopyFromSource: the row in the column order of
// args. pgx encodes a row before asking for the next, so the slice is
// reused.
func (r *batchRows) Values() ([]any, error) {
	k := r.next - 1
	r.row = append(r.row[:0], r.ids[k], r.payloads[k], r.sources[k], r.durs[k], r.recv[k])
	if r.meta {
		var key, headers any // untyped nil: NULL
		if r.keys[k] != nil {
			key = r.keys[k]
		}
		if r.headers[k] != nil {
			headers = r.headers[k]
		}
		r.row = append(r.row, key, headers, r.events[k])
	}
	if r.pos != nil {
		r.row = append(r.row, r.pos[k])
	}
	return r.row, nil
}

// Err implements pgx.CopyFromSource.
func (r *batchRows) Err() error { return nil }
