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
	_, err := tx.Conn().PgConn().CopyFrom(ctx, newCopyReader(s.rowsOf(recs, idx, pos), s.opts.PayloadType == PayloadJSONB), s.copySQL)
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
// statement's array parameters (args) and COPY's rows (copyReader).
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
