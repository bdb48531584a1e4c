package pgsink

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/weir-io/weir/sink"
)

// Insert methods (Options.InsertMethod, insert_method).
const (
	// InsertCopy sends a batch with one binary COPY straight into the
	// table, and a batch whose COPY meets a row already stored by
	// unnest; see the package documentation. The default.
	InsertCopy = "copy"
	// InsertUnnest sends every batch as one INSERT … SELECT FROM
	// unnest(…) … ON CONFLICT DO NOTHING of array parameters.
	InsertUnnest = "unnest"
)

// uniqueViolation is the SQLSTATE of a duplicate key.
const uniqueViolation = "23505"

// copying reports whether batches go by COPY.
func (s *Sink) copying() bool { return s.opts.InsertMethod == InsertCopy }

// insertRows writes recs[idx...] inside tx: by COPY straight into the
// table when the copy method is on and no replay is under way (or the
// table is raw, which has no conflict clause), else by unnest.
func (s *Sink) insertRows(ctx context.Context, tx pgx.Tx, recs []sink.Record, idx []int, pos []int64) error {
	if !s.copying() || (s.replaying && !s.opts.Positions) {
		inserted, err := s.insertAll(ctx, tx, recs, idx, pos)
		if err == nil && s.replaying && inserted == int64(len(idx)) {
			// No row of this batch was stored already: the replay is
			// over, and the next batch goes by COPY again.
			s.replaying = false
		}
		return err
	}
	s.core.Statements.Add(1)
	_, err := tx.CopyFrom(ctx, s.ident, s.copyCols, s.rowsOf(recs, idx, pos))
	return err
}

// replayed reports whether err is a COPY into a keyed table that met a row
// already stored (or two rows of one id): the batch must go again by
// unnest, whose ON CONFLICT DO NOTHING skips them — and so must the next
// batches, until one stores every row it sends, since a replay seldom
// ends with one batch.
func (s *Sink) replayed(err error) bool {
	var pe *pgconn.PgError
	if !s.copying() || s.opts.Positions || s.replaying || !errors.As(err, &pe) || pe.Code != uniqueViolation {
		return false
	}
	s.replaying = true
	s.replays.Add(1)
	return true
}

// batchRows is a batch's columns, in the order sent: the unnest
// statement's array parameters (args) and COPY's rows (a
// pgx.CopyFromSource).
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
