package wab

import (
	"fmt"

	"github.com/weir-io/weir/internal/vfs"
)

// Preallocation. A segment reserves disk space ahead of its write offset in
// chunks of Options.PreallocateBytes (fallocate with KEEP_SIZE), so that
// fdatasync is cheaper and running out of space shows up before a batch is
// written rather than in the middle of it.
//
// When the disk cannot hold a full chunk, the reservation falls back
// instead of failing: the chunk is halved down to PreallocFloor, and below
// that only what each batch needs is reserved. A batch fails with
// ErrDiskFull only when even its own bytes cannot be reserved. The first
// fallback is logged at warn and the return to full chunks at info (not
// per batch); the shard keeps the reduced chunk until a new segment gets a
// full one again. A PreallocObserver sees every change.

// PreallocFloor is the smallest chunk a reservation falls back to before
// it reserves only what each batch needs.
const PreallocFloor int64 = 1 << 20

// PreallocObserver is an optional extension of Observer: an Observer that
// also implements it is told whenever a shard's preallocation chunk
// changes.
type PreallocObserver interface {
	// Preallocation reports a shard's new chunk: want is
	// Options.PreallocateBytes, chunk what the shard now reserves ahead
	// (less after a fallback; 0 when it reserves only what each batch
	// needs; want again once a full chunk could be reserved).
	Preallocation(shard int, want, chunk int64)
}

// preallocate reserves [off, off+want) in f, a file of eof bytes whose
// reservation ends at off (none past its end when off <= eof). When the
// disk cannot hold that much it tries half as much, and so on down to
// PreallocFloor, and then just [off, off+need); a need of 0 then reserves
// nothing and succeeds. A reservation that runs out of space may release
// every one before it past eof (vfs.File.Preallocate), so the fallbacks
// reserve from min(off, eof) again, and when none succeeds the old
// reservation, up to off, is made again (it was just freed, so it fits
// unless another writer took the space meanwhile). It returns where the
// reservation now ends, after an error too. Errors other than running
// out of space are returned at once; running out of space only when even
// need could not be reserved.
func (s *shard) preallocate(f vfs.File, path string, eof, off, want, need int64) (int64, error) {
	from, size := off, want
	for {
		err := f.Preallocate(from, off+size-from)
		if err == nil {
			s.noteChunk(path, want, size)
			return off + size, nil
		}
		if !isDiskFull(err) {
			return from, err
		}
		from = min(off, eof)
		switch next := size / 2; {
		case size <= need:
			return restoreReservation(f, from, off), err
		case next >= PreallocFloor && next > need:
			size = next
		case need == 0:
			s.noteChunk(path, want, 0)
			return restoreReservation(f, from, off), nil
		default:
			size = need
		}
	}
}

// restoreReservation reserves [from, off) of f again after a failed
// reservation released it (the room for a footer among it), returning
// where the reservation now ends: from when even that no longer fits.
func restoreReservation(f vfs.File, from, off int64) int64 {
	if from >= off || f.Preallocate(from, off-from) != nil {
		return from
	}
	return off
}

// noteChunk records the outcome of a reservation that wanted want bytes and
// got got, logging and reporting a change of the shard's chunk.
func (s *shard) noteChunk(path string, want, got int64) {
	full := s.l.opts.PreallocateBytes
	var chunk int64
	switch {
	case got >= want:
		if s.chunk == full || want < min(full, s.l.opts.SegmentMaxBytes) {
			return // nothing learnt: a full chunk was not asked for
		}
		chunk = full
		s.l.logger.Info("disk space is back: segments are preallocated in full chunks again",
			"shard", s.id, "path", path, "preallocate_bytes", full)
	case got >= PreallocFloor:
		chunk = got
	default:
		chunk = 0
	}
	if chunk == s.chunk {
		return
	}
	if s.chunk == full {
		s.l.logger.Warn("disk nearly full: reserving less than segment_preallocate_bytes ahead of writes",
			"shard", s.id, "path", path, "preallocate_bytes", full, "wanted", want, "reserved", got,
			"chunk", chunk)
	}
	s.chunk = chunk
	if o, ok := s.l.obs.(PreallocObserver); ok {
		o.Preallocation(s.id, full, chunk)
	}
}

// reserve makes sure the reserved region covers need more bytes and a
// footer. Running out of space fails only the batch (ErrDiskFull).
func (s *shard) reserve(need int64) error {
	seg := s.seg
	if s.l.opts.PreallocateBytes <= 0 || seg.off+need+FooterFrameSize <= seg.prealloc {
		return nil
	}
	minEnd := seg.off + need + FooterFrameSize
	end := max(minEnd, min(seg.prealloc+s.chunk, s.l.opts.SegmentMaxBytes))
	got, err := s.preallocate(seg.f, seg.path, seg.off, seg.prealloc, end-seg.prealloc, minEnd-seg.prealloc)
	if err != nil {
		perr := fmt.Errorf("wab: shard %d: preallocate %s: %w", s.id, seg.path, err)
		if isDiskFull(err) {
			seg.prealloc = got
			return classify(perr)
		}
		return s.fail(perr)
	}
	seg.prealloc = got
	return nil
}

// preallocAhead extends the reservation once less than half a chunk is
// left, after the batch was acked. Failures are left for reserve to report
// to the batch that actually needs the space.
func (s *shard) preallocAhead() {
	seg := s.seg
	chunk := s.chunk
	if s.l.opts.PreallocateBytes <= 0 || chunk <= 0 || seg.prealloc-seg.off >= chunk/2 || seg.prealloc >= s.l.opts.SegmentMaxBytes {
		return
	}
	end := min(seg.prealloc+chunk, s.l.opts.SegmentMaxBytes)
	got, err := s.preallocate(seg.f, seg.path, seg.off, seg.prealloc, end-seg.prealloc, 0)
	seg.prealloc = got
	if err != nil {
		s.l.logger.Debug("preallocate ahead failed", "shard", s.id, "path", seg.path, "err", err)
	}
}
