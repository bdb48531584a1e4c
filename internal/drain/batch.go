package drain

import (
	"context"
	"errors"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/wab"
)

// segReader reads a segment's records and can put the last one back: a
// record read past what its sub-batch's reservation covers waits, still in
// the reader's buffer, to open the next sub-batch. Nothing else reads the
// reader meanwhile, so the record's bytes stay valid.
type segReader struct {
	r       *wab.Reader
	rec     wab.Record // the last record read (aliases r's buffer)
	back    bool       // rec was put back
	prevEnd int64      // r.Offset() before rec was read
}

func (s *segReader) next() (wab.Record, error) {
	if s.back {
		s.back = false
		return s.rec, nil
	}
	s.prevEnd = s.r.Offset()
	rec, err := s.r.Next()
	s.rec = rec
	return rec, err
}

// unread puts the last record back.
func (s *segReader) unread() { s.back = true }

// offset is the segment offset just past the last record taken: where the
// next sub-batch starts, for the progress sidecar.
func (s *segReader) offset() int64 {
	if s.back {
		return s.prevEnd
	}
	return s.r.Offset()
}

// subBatch is one sub-batch read from a segment, with its share of the
// memory budget.
type subBatch struct {
	recs []wab.Record
	rv   reservation
	// overErr is set, and recs empty, when the next record alone is
	// larger than the budget can grant: over is that record (aliasing the
	// reader's buffer) and overErr says why (wrapping flow.ErrOversize).
	over    wab.Record
	overErr error
}

// readBatch reads up to limit records, copying them out of the reader's
// buffer once adm has reserved them. It returns the records read and the
// error that stopped it early (io.EOF at the end of the segment; ctx's
// error if it ended while waiting for the budget), if any. A sub-batch ends
// early, without an error, at a record its reservation cannot cover now;
// that record opens the next one.
func readBatch(ctx context.Context, sr *segReader, limit int, adm *admission) (b subBatch, err error) {
	b.recs = make([]wab.Record, 0, limit)
	defer func() { adm.trim(&b.rv, len(b.recs)) }()
	cp := copier{size: adm.chunkBytes()}
	for len(b.recs) < limit {
		rec, err := sr.next()
		if err != nil {
			return b, err
		}
		need := adm.need(rec, &cp)
		if len(b.recs) == 0 {
			b.rv, err = adm.start(ctx, need, limit)
			if errors.Is(err, flow.ErrOversize) {
				b.over, b.overErr = rec, err
				return b, nil
			}
			if err != nil {
				sr.unread()
				return b, err
			}
		} else if !adm.take(&b.rv, need) {
			sr.unread()
			return b, nil
		}
		b.recs = append(b.recs, cp.copy(rec))
	}
	return b, nil
}

// copier copies records out of the reader's buffer into shared chunks of
// size bytes (a record larger than a quarter of that gets an allocation of
// its own): one allocation per chunk, not one for each record's payload
// and another for its metadata. The records of a sub-batch are dropped
// together, so a chunk is not held for long by any of them. What each
// copy allocates (cost) is reserved with the record.
type copier struct {
	size  int // of a chunk; 0 means batchChunkBytes
	chunk []byte
}

// batchChunkBytes is the largest size of a copier's chunks: whole pages
// of the runtime, and four times the largest record carved from one —
// larger records are large objects of their own (see cost).
const batchChunkBytes = 128 << 10

// runtimePage is the Go runtime's page: an allocation larger than
// largeObject takes whole pages; a smaller one takes its size class, at
// most an eighth more than asked.
const (
	runtimePage = 8 << 10
	largeObject = 32 << 10
)

func (c *copier) chunkSize() int {
	if c.size <= 0 {
		return batchChunkBytes
	}
	return c.size
}

// cost is what copying rec allocates: its own room as the runtime
// allocates it (a 33 KiB record takes 40 KiB); for a record carved from a
// chunk (shared), a new chunk when it does not fit what is left of the
// current one, else nothing — its bytes are the chunk's.
func (c *copier) cost(rec wab.Record) (alloc int64, shared bool) {
	switch need := len(rec.Meta) + len(rec.Payload); {
	case need > c.chunkSize()/4:
		return allocated(need), false
	case cap(c.chunk)-len(c.chunk) < need:
		return int64(c.chunkSize()), true
	}
	return 0, true
}

// allocated is what an allocation of n bytes occupies: whole pages for a
// large object, else at most its size class (an eighth more, and 16 bytes
// for the smallest classes).
func allocated(n int) int64 {
	if n > largeObject {
		return int64((n + runtimePage - 1) &^ (runtimePage - 1))
	}
	return int64(n + n/8 + 16)
}

func (c *copier) copy(rec wab.Record) wab.Record {
	switch need := len(rec.Meta) + len(rec.Payload); {
	case need > c.chunkSize()/4:
		// A large record gets its own room: carved from a fresh chunk it
		// would leave most of one unused — up to nearly twice its size
		// held for records of half a chunk and more.
		own := make([]byte, 0, need)
		meta, own := carve(own, rec.Meta)
		payload, _ := carve(own, rec.Payload)
		return wab.Record{Durability: rec.Durability, Received: rec.Received, Meta: meta, Payload: payload}
	case cap(c.chunk)-len(c.chunk) < need:
		c.chunk = make([]byte, 0, c.chunkSize()) // at most a quarter of it left unused
	}
	var meta, payload []byte
	meta, c.chunk = carve(c.chunk, rec.Meta)
	payload, c.chunk = carve(c.chunk, rec.Payload)
	return wab.Record{
		Durability: rec.Durability,
		Received:   rec.Received,
		Meta:       meta,
		Payload:    payload,
	}
}

// carve copies b into chunk, which has room for it, and returns the copy
// (nil for an empty b, capped at its length) and the rest of chunk.
func carve(chunk, b []byte) (cp, rest []byte) {
	if len(b) == 0 {
		return nil, chunk
	}
	n := len(chunk)
	chunk = append(chunk, b...)
	return chunk[n:len(chunk):len(chunk)], chunk
}
