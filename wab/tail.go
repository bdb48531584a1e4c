package wab

// The open segment's readable tail: what the flusher tells the drain it
// may read before the segment is sealed (doc.go, "Reading the open
// segment").

import (
	"fmt"

	"github.com/weir-io/weir/internal/vfs"
)

// Tail is the part of a shard's open segment that a reader may deliver:
// its first Records records, which end at byte offset End. A record is in
// the tail once its tier's promise holds and every record before it is in
// the tail too: a Buffered record once written, a Durable one once
// fdatasynced. Bytes before End never change while the segment is open;
// the segment is sealed (renamed to Path+".sealed") with those bytes in
// place.
type Tail struct {
	Shard   int
	Seq     uint64
	Path    string // the open segment's path (.wab)
	Records uint64
	End     int64
}

// Tail returns shard's readable tail, and false when the shard has no
// open segment holding a readable record (none yet, or just sealed: the
// sealed segment is then in Sealed's listing).
func (l *Log) Tail(shard int) (Tail, bool) {
	if shard < 0 || shard >= len(l.shards) {
		return Tail{}, false
	}
	t := l.shards[shard].tail.Load()
	if t == nil {
		return Tail{}, false
	}
	return *t, true
}

// TailNotify receives a value (coalesced) whenever a shard's tail grows.
func (l *Log) TailNotify() <-chan struct{} { return l.tailNotify }

// publishTail makes the first records of seg, ending at end, readable.
func (s *shard) publishTail(seg *segment, records uint64, end int64) {
	if records == 0 {
		return
	}
	if t := s.tail.Load(); t != nil && t.Seq == seg.hdr.Seq && t.Records >= records {
		return
	}
	s.tail.Store(&Tail{Shard: s.id, Seq: seg.hdr.Seq, Path: seg.path, Records: records, End: end})
	select {
	case s.l.tailNotify <- struct{}{}:
	default:
	}
}

// OpenTail opens the open segment t names for reading its readable tail:
// the reader sees the file as ending at t.End (an open segment's records
// simply stop there; nothing after End is read). It fails with an error
// satisfying errors.Is(err, fs.ErrNotExist) once the segment has been
// sealed (renamed): read it from Sealed's listing then.
func OpenTail(fsys vfs.FS, t Tail) (*Reader, error) {
	r, err := OpenSegment(fsys, t.Path)
	if err != nil {
		return nil, err
	}
	if r.size < t.End {
		r.Close()
		return nil, &CorruptionError{Path: t.Path, Offset: r.size, Reason: fmt.Sprintf("open segment is %d bytes, its readable tail ends at %d", r.size, t.End)}
	}
	r.size = t.End
	return r, nil
}
