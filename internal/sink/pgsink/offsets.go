package pgsink

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/pgopen"
	"github.com/weir-io/weir/source"
)

// OffsetStore opens the offset store of a raw table: rows of the offsets
// table beside it, keyed by the raw table's name, in the same database
// and read and written through the sink's connections.
//
//	raw_table  kind        name         position        value
//	"events"   'raw_end'   ''           next position   —
//	"events"   'cursor'    source name  —               the cursor
//	"events"   'coverage'  sink name    —               the SpanSet encoding
//	"events"   'fence'     window key   fencing token   —
//
// The raw end commits in the same transaction as the rows it numbers, so
// it is exact; the store only reads it. Coverage and cursors follow a
// secondary's ack and the gate's, which are never raw's transaction, so
// each Flush or Save is its own transaction: it takes a transaction-scoped
// advisory lock on the raw table's name, reads the rows, merges and writes
// them back, so an ingest node and a recovery node sharing the raw table
// never erase each other's progress.
func (s *Sink) OffsetStore(ctx context.Context) (*engine.OffsetStore, error) {
	if !s.opts.Positions {
		return nil, ErrNotRaw
	}
	return engine.NewOffsetStore(ctx, &pgOffsets{s: s})
}

type pgOffsets struct{ s *Sink }

func (o *pgOffsets) Where() string {
	return fmt.Sprintf("postgres %s (raw_table = %s)", o.s.offsets, o.s.table)
}

// queryer is a pool or a transaction.
type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (o *pgOffsets) read(ctx context.Context, q queryer) (*engine.OffsetState, error) {
	rows, err := q.Query(ctx, fmt.Sprintf(`SELECT kind, name, position, value FROM %s WHERE raw_table = $1`, o.s.offsets), o.s.table)
	if err != nil {
		return nil, classify("read the offset store", err, false)
	}
	defer rows.Close()
	st := &engine.OffsetState{Cursors: map[string]source.Cursor{}, Coverage: map[string]*engine.SpanSet{},
		Fences: map[string]uint64{}}
	for rows.Next() {
		var (
			kind, name string
			pos        *int64
			value      []byte
		)
		if err := rows.Scan(&kind, &name, &pos, &value); err != nil {
			return nil, classify("read the offset store", err, false)
		}
		switch kind {
		case kindRawEnd:
			if pos != nil {
				st.RawEnd = uint64(*pos)
			}
		case kindCursor:
			st.Cursors[name] = slices.Clone(source.Cursor(value))
		case kindCoverage:
			var set engine.SpanSet
			if err := set.UnmarshalBinary(value); err != nil {
				return nil, fmt.Errorf("%w: %s, coverage of %q: %w", engine.ErrCorruptOffsets, o.Where(), name, err)
			}
			st.Coverage[name] = &set
		case kindFence:
			if pos != nil {
				st.Fences[name] = uint64(*pos)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, classify("read the offset store", err, false)
	}
	return st, nil
}

func (o *pgOffsets) Read(ctx context.Context) (*engine.OffsetState, error) {
	ctx, cancel := context.WithTimeout(ctx, o.s.opts.Timeout)
	defer cancel()
	return o.read(ctx, o.s.pool)
}

func (o *pgOffsets) Update(ctx context.Context, merge func(*engine.OffsetState) (*engine.OffsetState, error)) error {
	ctx, cancel := context.WithTimeout(ctx, o.s.opts.Timeout)
	defer cancel()
	tx, err := o.s.pool.Begin(ctx)
	if err != nil {
		return classify("offset store: begin", err, false)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "weir_offsets:"+o.s.table); err != nil {
		return classify("offset store: lock", err, false)
	}
	st, err := o.read(ctx, tx)
	if err != nil {
		return err
	}
	next, err := merge(st)
	if err != nil {
		return err
	}
	if err := o.deleteCursors(ctx, tx, st, next); err != nil {
		return err
	}
	if err := o.writeValues(ctx, tx, next); err != nil {
		return err
	}
	if err := o.writeFences(ctx, tx, st, next); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return classify("offset store: commit", err, false)
	}
	return nil
}

// writeValues upserts the cursor and coverage rows of next in the
// update's transaction.
func (o *pgOffsets) writeValues(ctx context.Context, tx pgx.Tx, next *engine.OffsetState) error {
	var kinds, names []string
	var values [][]byte
	for name, c := range next.Cursors {
		kinds, names, values = append(kinds, kindCursor), append(names, name), append(values, []byte(c))
	}
	for name, c := range next.Coverage {
		b, _ := c.AppendBinary(nil)
		kinds, names, values = append(kinds, kindCoverage), append(names, name), append(values, b)
	}
	if len(kinds) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (raw_table, kind, name, value)
		SELECT $1, * FROM unnest($2::text[], $3::text[], $4::bytea[])
		ON CONFLICT (raw_table, kind, name) DO UPDATE SET value = EXCLUDED.value, updated_at = now()`, o.s.offsets),
		o.s.table, kinds, names, values)
	if err != nil {
		return classify("offset store: write", err, false)
	}
	return nil
}

// writeFences upserts, in the update's transaction, the fence rows of
// next whose token is above the persisted one; a token never goes down.
func (o *pgOffsets) writeFences(ctx context.Context, tx pgx.Tx, persisted, next *engine.OffsetState) error {
	var names []string
	var tokens []int64
	for w, tok := range next.Fences {
		if tok <= persisted.Fences[w] {
			continue
		}
		if tok > math.MaxInt64 {
			return fmt.Errorf("pgsink: offset store: fencing token %d of window %q does not fit a bigint", tok, w)
		}
		names, tokens = append(names, w), append(tokens, int64(tok))
	}
	if len(names) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (raw_table, kind, name, position)
		SELECT $1, '%s', * FROM unnest($2::text[], $3::bigint[])
		ON CONFLICT (raw_table, kind, name) DO UPDATE SET position = GREATEST(%s.position, EXCLUDED.position), updated_at = now()`,
		o.s.offsets, kindFence, o.s.offsets), o.s.table, names, tokens)
	if err != nil {
		return classify("offset store: write fences", err, false)
	}
	return nil
}

// deleteCursors deletes the cursor rows of persisted that next no longer
// holds (a cursor the store removed: OffsetStore.RemoveCursor), in the
// update's transaction.
func (o *pgOffsets) deleteCursors(ctx context.Context, tx pgx.Tx, persisted, next *engine.OffsetState) error {
	var gone []string
	for name := range persisted.Cursors {
		if _, ok := next.Cursors[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE raw_table = $1 AND kind = '%s' AND name = ANY($2::text[])`, o.s.offsets, kindCursor),
		o.s.table, gone)
	if err != nil {
		return classify("offset store: delete cursors", err, false)
	}
	return nil
}

// OpenCursorStore opens the offset store of the table opts names on its
// own: the rows keyed by it in the offsets table (created when missing),
// through a pool of one connection, without opening or checking the table
// itself. A node with gate = "raw" and no [[secondary]] writes the table
// as a plain sink, yet its sources' cursors live here as they do with
// secondaries, so adding or removing one never strands a cursor. The
// pool stays open for the life of the process (the store has no Close).
func OpenCursorStore(ctx context.Context, opts Options) (*engine.OffsetStore, error) {
	store, _, err := openCursorStore(ctx, opts)
	return store, err
}

// openCursorStore is OpenCursorStore, also returning the pool (for tests
// to close).
func openCursorStore(ctx context.Context, opts Options) (*engine.OffsetStore, *pgopen.Pool, error) {
	opts.Positions, opts.AsyncCommit = true, false // the store is durable, like raw
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, nil, err
	}
	ident, err := parseTable(opts.Table)
	if err != nil {
		return nil, nil, err
	}
	s := &Sink{opts: opts, ident: ident, table: ident.Sanitize(), offsets: offsetsIdent(ident).Sanitize()}
	cfg, err := opts.poolConfig()
	if err != nil {
		return nil, nil, err
	}
	cfg.MaxConns = 1
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if s.pool, err = pgopen.NewPool(ctx, cfg); err != nil {
		return nil, nil, classify("connect", err, false)
	}
	if _, err := s.pool.Exec(ctx, s.offsetsCreateSQL()); err != nil {
		s.pool.Close()
		return nil, nil, classify("create table "+s.offsets, err, false)
	}
	store, err := engine.NewOffsetStore(ctx, &pgOffsets{s: s})
	if err != nil {
		s.pool.Close()
		return nil, nil, err
	}
	return store, s.pool, nil
}
