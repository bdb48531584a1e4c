package wab

import "fmt"

// reserve makes sure the preallocated region covers need more bytes and a
// footer. An out-of-space error fails only the batch.
func (s *shard) reserve(need int64) error {
	seg := s.seg
	chunk := s.l.opts.PreallocateBytes
	if chunk <= 0 || seg.off+need+FooterFrameSize <= seg.prealloc {
		return nil
	}
	end := max(seg.off+need+FooterFrameSize, min(seg.prealloc+chunk, s.l.opts.SegmentMaxBytes))
	if err := seg.f.Preallocate(seg.prealloc, end-seg.prealloc); err != nil {
		perr := fmt.Errorf("wab: shard %d: preallocate %s: %w", s.id, seg.path, err)
		if isDiskFull(err) {
			return classify(perr)
		}
		return s.fail(perr)
	}
	seg.prealloc = end
	return nil
}

// preallocAhead extends the reservation once less than half a chunk is
// left, after the batch was acked. Failures are left for reserve to report
// to the batch that actually needs the space.
func (s *shard) preallocAhead() {
	seg := s.seg
	chunk := s.l.opts.PreallocateBytes
	if chunk <= 0 || seg.prealloc-seg.off >= chunk/2 || seg.prealloc >= s.l.opts.SegmentMaxBytes {
		return
	}
	end := min(seg.prealloc+chunk, s.l.opts.SegmentMaxBytes)
	if err := seg.f.Preallocate(seg.prealloc, end-seg.prealloc); err != nil {
		s.l.logger.Debug("preallocate ahead failed", "shard", s.id, "path", seg.path, "err", err)
		return
	}
	seg.prealloc = end
}
