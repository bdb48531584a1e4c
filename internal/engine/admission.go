package engine

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/sink"
)

// The fan-out's side of flow control (docs/topology.md, "Memory and
// backpressure"): live batches and recovery windows hold their size from
// the node's memory budget, batches follow the pacer, and every commit to
// a secondary is reported to it.

// liveBatch is one batch of records raw committed, offered to the
// secondaries. The one batch is queued to every secondary that takes it,
// so what it holds in memory is reserved once, without waiting, and
// released when the last holder lets go of it: the offerer once every
// secondary has been offered it, each secondary once it has committed the
// batch or dropped it.
type liveBatch struct {
	first  uint64
	recs   []sink.Positioned
	bytes  int64         // what the batch holds in memory
	refs   atomic.Int32  // holders
	budget *flow.Budget  // the bytes are reserved from it; nil when not
	held   *atomic.Int64 // the fan-out's total held, when reserved
}

// positionedBytes is what recs hold in memory.
func positionedBytes(recs []sink.Positioned) int64 {
	var n int64
	for i := range recs {
		n += recs[i].MemSize()
	}
	return n
}

// newLiveBatch makes a batch held by its offerer.
func newLiveBatch(first uint64, recs []sink.Positioned) *liveBatch {
	lb := &liveBatch{first: first, recs: recs, bytes: positionedBytes(recs)}
	lb.refs.Store(1)
	return lb
}

func (lb *liveBatch) hold() { lb.refs.Add(1) }

// done lets go of the batch; the last holder releases its bytes.
func (lb *liveBatch) done() {
	if lb.refs.Add(-1) == 0 && lb.budget != nil {
		lb.held.Add(-lb.bytes)
		lb.budget.Release(lb.bytes)
	}
}

// liveShare bounds what live batches hold, together, to 1/liveShare of
// what the budget can grant: a secondary that is down keeps its queue
// full, and what it holds must neither starve the stages in front of raw
// nor read as pressure that throttles live ingest (the coupling raw-first
// exists to break).
const liveShare = 4

// offer reserves the batch's bytes and offers it to every secondary, then
// lets go of it. The live path never waits for the budget: a batch it
// cannot grant at once (or ever: larger than what is grantable), or that
// would take live batches past their share, is dropped to recovery for
// every secondary, as if their queues were full.
func (f *Fanout) offer(lb *liveBatch) {
	defer lb.done()
	if b := f.opts.Budget; b != nil {
		if !f.reserveLive(b, lb) {
			for _, s := range f.secs {
				s.drop(len(lb.recs))
			}
			return
		}
	}
	for _, s := range f.secs {
		s.offer(lb)
	}
}

// reserveLive reserves lb's bytes within the live batches' share.
func (f *Fanout) reserveLive(b *flow.Budget, lb *liveBatch) bool {
	if f.held.Load()+lb.bytes > b.Stats().Grantable/liveShare {
		return false
	}
	if ok, _ := b.TryAcquire(lb.bytes); !ok {
		return false
	}
	f.held.Add(lb.bytes)
	lb.budget, lb.held = b, &f.held
	return true
}

// discardQueue lets go of the batches left in the queue once the worker
// has stopped: recovery delivers them at the next start.
func (s *secondary) discardQueue() {
	for {
		select {
		case lb := <-s.queue:
			s.unqueue(lb)
		default:
			return
		}
	}
}

// QueueFills returns, by secondary name, the fill (0–1) of each live
// queue: the fuller of its batches against QueueBatches and its bytes
// against QueueBytes. Flow control watches them (Controller.AddQueue).
func (f *Fanout) QueueFills() map[string]func() float64 {
	out := make(map[string]func() float64, len(f.secs))
	for _, s := range f.secs {
		out[s.name] = s.queueFill
	}
	return out
}

func (s *secondary) queueFill() float64 {
	batches := float64(len(s.queue)) / float64(cap(s.queue))
	bytes := float64(s.qbytes.Load()) / float64(s.cfg.QueueBytes)
	return min(1, max(batches, bytes))
}

// chunkSize is the size of the next batch committed to the secondary, of
// n records to deliver: the sink's MaxBatchSize scaled by the pacer
// (asked at every batch).
func (s *secondary) chunkSize(n int) int {
	m := s.snk.MaxBatchSize()
	if m <= 0 {
		m = n
	}
	return s.f.scale(m)
}

// scale is n scaled by the pacer, at least 1.
func (f *Fanout) scale(n int) int {
	if f.opts.Pacer != nil {
		n = f.opts.Pacer.Scale(n)
	}
	return max(n, 1)
}

// wrote tells the pacer how a commit to a secondary went; one cut short
// by the end of ctx says nothing about the sink.
func (f *Fanout) wrote(ctx context.Context, err error) {
	switch p := f.opts.Pacer; {
	case p == nil || ctx.Err() != nil:
	case err == nil:
		p.WriteSucceeded()
	default:
		p.WriteFailed()
	}
}

// windowShare bounds a recovery window's reservation to 1/windowShare of
// what the budget can grant: a window asking for all of it would wait
// until every other holder had let go, and hold back every reservation
// queued behind it meanwhile.
const windowShare = 4

// reserveWindow reserves, before a recovery window of up to want records
// is read from raw, what the window may hold: the recent bytes per record
// × want, no more than a windowShare of what the budget can grant — but
// one record's worth at least, when records are larger than that. It
// returns the bytes held and the window's byte bound, the smaller of held
// and the windowShare: raw is read with it as sink.RawReader.ReadFrom's
// maxBytes, so the reservation bounds what is read whatever the estimate
// (a cold start's record_size_estimate may be far below the records raw
// holds), and only a window's first record may take it past the
// windowShare. Without a budget both are 0: no byte bound. It waits for
// the grant in a select beside the live queue (awaitGrant) and gives up
// when ctx ends.
func (s *secondary) reserveWindow(ctx context.Context, want int) (held, bound int64, err error) {
	b := s.f.opts.Budget
	if b == nil {
		return 0, 0, nil
	}
	per, g := s.perRecord, b.Stats().Grantable
	share := max(g/windowShare, 1)
	held = max(min(int64(want)*per, share), min(per, g))
	t, err := b.Reserve(held)
	if err != nil {
		return 0, 0, err // the budget shrank since it was asked: next time
	}
	if err := s.awaitGrant(ctx, t); err != nil {
		return 0, 0, err
	}
	return held, min(held, share), nil
}

// awaitGrant waits for t's grant in a select beside the live queue,
// delivering live batches meanwhile — they release what they hold, which
// may be what t waits for (the select rule, docs/flow_control.md). When
// ctx ends it cancels t: nothing is held then.
func (s *secondary) awaitGrant(ctx context.Context, t *flow.Ticket) error {
	for {
		select {
		case <-t.C:
			return nil
		case lb := <-s.queue:
			s.deliverLive(ctx, lb)
		case <-ctx.Done():
			t.Cancel()
			return ctx.Err()
		}
	}
}

// fitWindow makes held, the reservation of a window, what recs — the
// window as read with bound as its byte bound — hold in memory, and
// returns the records the window keeps. The records past the bound are
// cut off (a reader stops before them; these are left for the next
// window), the surplus is given back, and the size per record is learnt
// for the next window's reservation.
//
// The first record is kept whatever its size. One larger than held is
// admitted as the budget admits a record larger than a share (the
// drain's sub-batch does the same): held is given back and the record's
// whole size reserved, waiting beside the live queue; a record larger
// than the budget can grant at all is refused, with an error wrapping
// flow.ErrOversize, for the caller to quarantine with code oversize.
func (s *secondary) fitWindow(ctx context.Context, held *int64, bound int64, recs []sink.Positioned) ([]sink.Positioned, error) {
	b := s.f.opts.Budget
	if b == nil || len(recs) == 0 {
		return recs, nil
	}
	lim := sink.NewReadLimit(len(recs), bound)
	n := 0
	for n < len(recs) && lim.Take(&recs[n]) {
		n++
	}
	recs = recs[:n]
	actual := positionedBytes(recs)
	per := actual / int64(n)
	s.perRecord = max(s.f.opts.RecordSizeEstimate, (s.perRecord+per+1)/2)
	if actual <= *held {
		b.Release(*held - actual)
		*held = actual
		return recs, nil
	}
	b.Release(*held)
	*held = 0
	t, err := b.Reserve(actual)
	if err != nil {
		return recs, fmt.Errorf("recovery record at position %d: %w", recs[0].Pos, err)
	}
	if err := s.awaitGrant(ctx, t); err != nil {
		return nil, err
	}
	*held = actual
	return recs, nil
}

// releaseWindow gives back a window's reservation.
func (s *secondary) releaseWindow(held int64) {
	if b := s.f.opts.Budget; b != nil {
		b.Release(held)
	}
}
