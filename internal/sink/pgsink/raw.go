package pgsink

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weir-io/weir/sink"
)

// ErrNotRaw is returned by the raw methods of a sink opened without
// Options.Positions.
var ErrNotRaw = errors.New("pgsink: sink is not in raw (positions) mode")

// OffsetsTable is the table, in the raw table's schema, that holds the
// raw end and the offset store of every raw table in that schema.
const OffsetsTable = "weir_offsets"

// Row kinds of the offsets table.
const (
	kindRawEnd   = "raw_end"
	kindCursor   = "cursor"
	kindCoverage = "coverage"
	kindFence    = "fence"
)

var _ sink.Raw = (*Sink)(nil)

// offsetsIdent names the offsets table next to the raw table.
func offsetsIdent(table pgx.Identifier) pgx.Identifier {
	if len(table) == 2 {
		return pgx.Identifier{table[0], OffsetsTable}
	}
	return pgx.Identifier{OffsetsTable}
}

func (s *Sink) offsetsCreateSQL() string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	raw_table  text NOT NULL,
	kind       text NOT NULL,
	name       text NOT NULL,
	position   bigint,
	value      bytea,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (raw_table, kind, name)
)`, s.offsets)
}

// stayRaw opens a table that is primary raw (it has weir_position) as raw
// even when the sink was not asked to: a node with gate = "raw" whose last
// [[secondary]] was removed goes on writing its [sink] as a plain sink,
// and raw must stay whole — every row numbered, the raw end in step — for
// a secondary added back to recover from it. A plain write could not even
// fill the table's weir_position.
func (s *Sink) stayRaw(ctx context.Context, q *pgxpool.Pool) error {
	var raw bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attname = 'weir_position' AND attnum > 0 AND NOT attisdropped)`, s.table).Scan(&raw)
	if err != nil {
		return classify("inspect table "+s.table, err, false)
	}
	if !raw {
		return nil
	}
	if s.opts.AsyncCommit {
		return fmt.Errorf("pgsink: table %s is primary raw (it has weir_position), which is always written durably: it cannot be a non-durable sink", s.table)
	}
	s.opts.Positions = true
	s.buildSQL()
	s.log.Info("table is primary raw (it has weir_position): written as raw, every row numbered")
	return nil
}

// prepareRaw creates the offsets table when missing and makes sure the raw
// end row exists and lies past every position the raw table holds, so no
// position is ever handed out twice — not even after the offsets table was
// dropped or restored from an older backup.
func (s *Sink) prepareRaw(ctx context.Context, q *pgxpool.Pool) error {
	if _, err := q.Exec(ctx, s.offsetsCreateSQL()); err != nil {
		return classify("create table "+s.offsets, err, false)
	}
	var before, after int64
	err := q.QueryRow(ctx, fmt.Sprintf(`WITH hi AS (SELECT COALESCE(max(weir_position) + 1, 0) AS next FROM %s),
		ins AS (INSERT INTO %s (raw_table, kind, name, position)
			SELECT $1, '%s', '', next FROM hi
			ON CONFLICT (raw_table, kind, name) DO UPDATE SET position = GREATEST(%s.position, EXCLUDED.position)
			RETURNING position)
		SELECT COALESCE((SELECT position FROM %s WHERE raw_table = $1 AND kind = '%s' AND name = ''), -1), (SELECT position FROM ins)`,
		s.table, s.offsets, kindRawEnd, s.offsets, s.offsets, kindRawEnd), s.table).Scan(&before, &after)
	if err != nil {
		return classify("prepare the raw end in "+s.offsets, err, false)
	}
	if before >= 0 && after > before {
		s.log.Warn("the raw end in the offsets table was behind the raw table; raised it", "was", before, "now", after)
	}
	return nil
}

// allocate reserves n positions in tx, returning the first. The raw end
// row stays locked until tx ends, so raw commits are serialised and the
// positions and the rows that hold them commit (or vanish) together.
func (s *Sink) allocate(ctx context.Context, tx pgx.Tx, n int) (uint64, error) {
	var first int64
	err := tx.QueryRow(ctx, fmt.Sprintf(`UPDATE %s SET position = position + $2, updated_at = now()
		WHERE raw_table = $1 AND kind = '%s' AND name = '' RETURNING position - $2`, s.offsets, kindRawEnd),
		s.table, int64(n)).Scan(&first)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("pgsink: the raw end row of %s is missing from %s (deleted while running?)", s.table, s.offsets)
	}
	return uint64(first), err
}

// CommitRaw implements sink.Raw: the batch's rows and the raw end that
// numbers them commit in one transaction. A replayed record is kept again
// at its new position.
func (s *Sink) CommitRaw(ctx context.Context, b sink.Batch) (sink.CommitResult, uint64, error) {
	if !s.opts.Positions {
		return sink.CommitResult{}, 0, sink.Permanent(ErrNotRaw)
	}
	s.rawMu.Lock()
	defer s.rawMu.Unlock()
	s.rawFirst = 0
	res, err := s.core.Commit(ctx, b)
	return res, s.rawFirst, err
}

// Replayable implements sink.Raw: true in raw mode.
func (s *Sink) Replayable() bool { return s.opts.Positions }

// End implements sink.RawReader: the raw end, which commits with the rows.
func (s *Sink) End(ctx context.Context) (uint64, error) {
	if !s.opts.Positions {
		return 0, ErrNotRaw
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	var end int64
	err := s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT position FROM %s WHERE raw_table = $1 AND kind = '%s' AND name = ''`,
		s.offsets, kindRawEnd), s.table).Scan(&end)
	if err != nil {
		return 0, classify("read the raw end", err, false)
	}
	return uint64(end), nil
}

// rowOverhead is what a record read back holds before its bytes: the
// MemSize of an empty one. The read's byte bound counts it per row.
var rowOverhead = (&sink.Positioned{}).MemSize()

// ReadFrom implements sink.RawReader. It streams the rows and stops at
// the first one past maxBytes; the server itself sends no row past a
// lower bound of that count (readSQL), so a window of large records does
// not carry the rest of its max over the network.
func (s *Sink) ReadFrom(ctx context.Context, from uint64, max int, maxBytes int64) ([]sink.Positioned, error) {
	if !s.opts.Positions {
		return nil, ErrNotRaw
	}
	if max <= 0 {
		return nil, nil
	}
	serverBytes := maxBytes
	if serverBytes <= 0 {
		serverBytes = math.MaxInt64
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rows, err := s.pool.Query(ctx, s.readSQL, int64(from), max, serverBytes, rowOverhead)
	if err != nil {
		return nil, classify("read raw", err, false)
	}
	defer rows.Close()
	lim := sink.NewReadLimit(max, maxBytes)
	out := make([]sink.Positioned, 0, min(max, 4096))
	for !lim.Done() && rows.Next() {
		var (
			pos          int64
			id           [16]byte
			payload      []byte
			src, dur     string
			receivedAt   time.Time
			key, headers []byte
			event        pgtype.Timestamptz
		)
		if err := rows.Scan(&pos, &id, &payload, &src, &dur, &receivedAt, &key, &headers, &event); err != nil {
			return nil, classify("read raw", err, false)
		}
		d := sink.Durable
		if dur == sink.Buffered.String() {
			d = sink.Buffered
		}
		r := sink.Record{ID: sink.RecordID(id), Payload: payload, Source: src, Durability: d, Received: receivedAt}
		if err := rawMeta(&r, key, headers, event); err != nil {
			return nil, sink.Permanent(fmt.Errorf("pgsink: raw position %d: %w", pos, err))
		}
		p := sink.Positioned{Pos: uint64(pos), Record: r}
		if !lim.Take(&p) {
			break
		}
		out = append(out, p)
	}
	rows.Close() // what the server sent past the bound is discarded
	if err := rows.Err(); err != nil {
		return nil, classify("read raw", err, false)
	}
	return out, nil
}
