package sink

import (
	"context"
	"errors"
	"fmt"
)

// Positioned is a record with its position in a raw sink's total order.
type Positioned struct {
	Pos    uint64
	Record Record
}

// RawReader reads a raw sink's records back by position. It is all the
// recovery of a lagging sink needs from raw.
type RawReader interface {
	// ReadFrom returns up to max records whose positions are at least from
	// and below End, in position order. Positions that hold nothing (see
	// Raw) are skipped, so the first record returned may sit past from and
	// consecutive records may skip positions; a caller that has seen every
	// record up to p has seen every position up to p. An empty result
	// means nothing is stored at or past from (from >= End).
	//
	// maxBytes > 0 also bounds what the result holds in memory, counted
	// as the sum of Positioned.MemSize: the read stops before the record
	// that would take the sum past maxBytes, and does not go on looking
	// past it. The first record (at or past from) is returned whatever
	// its size, so that a caller always makes progress; a caller that
	// reserved maxBytes must deal with a first record larger than that
	// (flow control's oversize rule, docs/flow_control.md). maxBytes <= 0
	// bounds nothing but max. While it reads, a reader should hold no
	// more than the records it returns and the one record it refused.
	// ReadLimit does the counting; sinktest.ReadBound checks a reader.
	ReadFrom(ctx context.Context, from uint64, max int, maxBytes int64) ([]Positioned, error)
	// End is one past the highest position acknowledged so far: every
	// position below it belongs to an acknowledged batch or holds nothing.
	End(ctx context.Context) (uint64, error)
}

// Raw is a primary-raw sink: the pipeline's system of record. Besides being
// a Sink it numbers what it keeps.
//
// # Positions
//
// Every record a Raw sink commits gets a position in one total order:
// uint64, contiguous and increasing. A batch whose CommitRaw returns
// (res, first, nil) holds positions [first, first+res.Committed(n)),
// assigned to its committed records in batch order; rejected records get
// none. Positions are durable when CommitRaw returns: from then on the
// records at those positions never change, and ReadFrom returns them after
// any crash or restart.
//
// A batch that was not acknowledged (CommitRaw returned an error, or the
// process crashed before it returned) owns nothing: its positions may be
// given to the next batch, or may survive holding some of its records (a
// crash after the write but before the return). Either way no caller ever
// saw them, so nothing may depend on them. A position can also end up
// holding nothing at all — a tail lost after a failure, a later file
// started past it — and readers skip it.
//
// Commit on a Raw sink behaves as CommitRaw without the position.
type Raw interface {
	Sink
	RawReader
	// CommitRaw is Commit, also returning the first position of the
	// committed records (meaningful when at least one was committed).
	CommitRaw(ctx context.Context, b Batch) (res CommitResult, first uint64, err error)
	// Replayable reports whether ReadFrom can serve every position below
	// End: true for a sink that may hold the primary-raw role.
	Replayable() bool
}

// ErrPositionGone is returned (wrapped) by ReadFrom when from is below the
// oldest position the sink still keeps (retention removed it).
var ErrPositionGone = errors.New("sink: position no longer kept by raw")

// PositionsGone is implemented by a ReadFrom error that names the span of
// positions raw no longer keeps, [from, to), starting at or before the
// position asked for. A reader that knows the span should return one (with
// ErrPositionGone in its chain), so that a caller recovering a lagging
// sink steps over what is gone — counting it as unrecoverable — instead of
// asking for it forever.
type PositionsGone interface {
	error
	GonePositions() (from, to uint64)
}

// GoneError is a PositionsGone for [From, To); it wraps ErrPositionGone.
type GoneError struct {
	From, To uint64
	Why      string // what removed them, for the log
}

func (e *GoneError) Error() string {
	return fmt.Sprintf("positions [%d, %d): %s: %v", e.From, e.To, e.Why, ErrPositionGone)
}

// Unwrap returns ErrPositionGone.
func (e *GoneError) Unwrap() error { return ErrPositionGone }

// GonePositions implements PositionsGone.
func (e *GoneError) GonePositions() (from, to uint64) { return e.From, e.To }

// ReadLimit counts the records a ReadFrom takes against its max and
// maxBytes (see RawReader.ReadFrom), for the readers that implement it:
// ask Take for each record before keeping it, and stop reading once Done.
type ReadLimit struct {
	max      int
	maxBytes int64
	n        int
	bytes    int64
	stopped  bool // a record was refused: the read ends before it
}

// NewReadLimit is the limit of a ReadFrom(ctx, from, max, maxBytes).
func NewReadLimit(max int, maxBytes int64) ReadLimit {
	return ReadLimit{max: max, maxBytes: maxBytes}
}

// Take counts p and reports whether the read may return it. false means
// p would take the read past maxBytes: the read ends before p (Done is
// then true). The first record is always taken while max > 0.
func (l *ReadLimit) Take(p *Positioned) bool {
	if l.Done() {
		return false
	}
	size := p.MemSize()
	if l.maxBytes > 0 && l.n > 0 && l.bytes+size > l.maxBytes {
		l.stopped = true
		return false
	}
	l.n++
	l.bytes += size
	return true
}

// Done reports whether the read has all it may return: max records, or a
// record refused for maxBytes, or maxBytes reached.
func (l *ReadLimit) Done() bool {
	return l.n >= l.max || l.stopped || (l.maxBytes > 0 && l.n > 0 && l.bytes >= l.maxBytes)
}

// Left is what the read may still take: records, and bytes (-1 when
// maxBytes bounds nothing). Both are 0 once Done.
func (l *ReadLimit) Left() (records int, bytes int64) {
	switch {
	case l.Done():
		return 0, 0
	case l.maxBytes <= 0:
		return l.max - l.n, -1
	}
	return l.max - l.n, l.maxBytes - l.bytes
}
