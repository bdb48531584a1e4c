package engine

import (
	"context"
	"sync/atomic"
	"unsafe"

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
	bytes  int64        // what the batch holds in memory
	refs   atomic.Int32 // holders
	budget *flow.Budget // the bytes are reserved from it; nil when not
}

// positionedSize is what a sink.Positioned adds to its record.
const positionedSize = int64(unsafe.Sizeof(sink.Positioned{}.Pos))

// positionedBytes is what recs hold in memory.
func positionedBytes(recs []sink.Positioned) int64 {
	var n int64
	for i := range recs {
		n += positionedSize + recs[i].Record.MemSize()
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
		lb.budget.Release(lb.bytes)
	}
}

// offer reserves the batch's bytes and offers it to every secondary, then
// lets go of it. The live path never waits for the budget: a batch it
// cannot grant at once (or ever: larger than what is grantable) is dropped
// to recovery for every secondary, as if their queues were full.
func (f *Fanout) offer(lb *liveBatch) {
	defer lb.done()
	if b := f.opts.Budget; b != nil {
		if ok, _ := b.TryAcquire(lb.bytes); !ok {
			for _, s := range f.secs {
				s.drop(len(lb.recs))
			}
			return
		}
		lb.budget = b
	}
	for _, s := range f.secs {
		s.offer(lb)
	}
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

// reserveWindow reserves, before a recovery window of want records is
// read from raw, its estimated size: the recent bytes per record × want,
// no more than a windowShare of what the budget can grant (the window
// shrinks to fit, to one record at least). It returns the bytes held and
// the records to read. It waits for the grant
// in a select beside the live queue, delivering live batches meanwhile —
// they release what they hold, which may be what the window waits for —
// and gives up when ctx ends.
func (s *secondary) reserveWindow(ctx context.Context, want int) (held int64, n int, err error) {
	b := s.f.opts.Budget
	if b == nil {
		return 0, want, nil
	}
	per, g := s.perRecord, b.Stats().Grantable
	held = max(min(int64(want)*per, g/windowShare), min(per, g))
	n = min(want, max(1, int(held/per)))
	t, err := b.Reserve(held)
	if err != nil {
		return 0, 0, err // the budget shrank since it was asked: next time
	}
	for {
		select {
		case <-t.C:
			return held, n, nil
		case lb := <-s.queue:
			s.deliverLive(ctx, lb)
		case <-ctx.Done():
			t.Cancel()
			return 0, 0, ctx.Err()
		}
	}
}

// fitWindow makes held, the reservation of a window, what recs — the
// window as read — hold in memory: it gives back the surplus, or takes
// the shortfall if it can without waiting (the estimate was low: the
// records are in memory already). It learns the size per record for the
// next window.
func (s *secondary) fitWindow(held *int64, recs []sink.Positioned) {
	b := s.f.opts.Budget
	if b == nil || len(recs) == 0 {
		return
	}
	actual := positionedBytes(recs)
	switch {
	case actual < *held:
		b.Release(*held - actual)
		*held = actual
	case actual > *held:
		if ok, _ := b.TryAcquire(actual - *held); ok {
			*held = actual
		}
	}
	per := actual / int64(len(recs))
	s.perRecord = max(s.f.opts.RecordSizeEstimate, (s.perRecord+per+1)/2)
}

// releaseWindow gives back a window's reservation.
func (s *secondary) releaseWindow(held int64) {
	if b := s.f.opts.Budget; b != nil {
		b.Release(held)
	}
}
