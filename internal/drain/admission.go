package drain

import (
	"context"
	"errors"
	"unsafe"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

// admission reserves, from the node's memory budget, what a sub-batch will
// occupy in memory before the drain reads it out of the segment, and
// releases it once the sub-batch is confirmed (docs/drain.md, "Memory
// admission"). A record's share is estimated from its size in the segment
// by an Estimator that learns from what the records read occupy.
//
// A sub-batch opens with one reservation sized for the whole of it (the
// recent size per record × the sub-batch's records, at most a quarter of
// what is grantable, at least its first record), so that the drain waits
// its turn once per sub-batch. Records are taken while they fit; past it
// the drain tries to extend the reservation without waiting, and when it
// cannot, the sub-batch ends there and the record opens the next one. What
// is left over is released before the sub-batch is committed.
//
// Waiting: the drain's goroutine may block on the budget (Budget.Acquire)
// because it releases nothing that another holder is waiting for:
//   - what it holds itself, the previous sub-batch, is released before it
//     waits again (account releases every path; start is only called with
//     nothing held);
//   - the holders it waits for release on goroutines of their own: socket
//     frames and shard queues when the write-ahead buffer's flusher makes
//     them durable (the flusher never waits for the drain: a full disk
//     fails the write), a secondary's live queue when that secondary's
//     worker commits or drops it, a recovery window when its worker
//     commits it;
//   - what it calls reserves without waiting: the fan-out behind Commit
//     only ever tries (TryAcquire) and drops to recovery when it cannot.
//
// With no budget (admission off) nothing is reserved or estimated.
type admission struct {
	budget *flow.Budget // nil: off
	est    *flow.Estimator
	// waiting is told when the drain starts and stops waiting for the
	// budget, so that a wait does not count as busy (Drain.Busy).
	waiting func(bool)
	// perRecord is the recent reservation per record, in bytes (0 before
	// the first sub-batch). Used only by Run's goroutine.
	perRecord float64
}

// drainShare bounds a sub-batch's opening reservation to 1/drainShare of
// what the budget can grant, leaving the rest to the other holders.
const drainShare = 4

// observeSamples bounds the estimator samples taken per sub-batch.
const observeSamples = 16

func newAdmission(b *flow.Budget, est *flow.Estimator, waiting func(bool)) admission {
	if b != nil && est == nil {
		est = flow.NewEstimator(0)
	}
	return admission{budget: b, est: est, waiting: waiting}
}

// reservation is one sub-batch's share of the budget.
type reservation struct {
	held int64 // granted
	used int64 // estimated for the records taken
}

// frameBytes is what rec occupies in its segment.
func frameBytes(rec wab.Record) int64 {
	return int64(wab.FrameOverhead + len(rec.Meta) + len(rec.Payload))
}

// estimate is rec's estimated in-memory size once read.
func (a *admission) estimate(rec wab.Record) int64 {
	if a.budget == nil {
		return 0
	}
	return a.est.Estimate(frameBytes(rec))
}

// need is what rec is reserved with, so that a sub-batch's reservation
// covers every byte the drain allocates for it (TestSubBatchReservesItsCopies):
// a record with a copy of its own, its estimated in-memory size or that
// copy's room (rounded up to the runtime's pages) when that is more; a
// record carved from cp's chunk, the estimate less its bytes, which are
// the chunk's — and the whole chunk when it opens one.
func (a *admission) need(rec wab.Record, cp *copier) int64 {
	if a.budget == nil {
		return 0
	}
	est := a.estimate(rec)
	alloc, shared := cp.cost(rec)
	if !shared {
		return max(est, alloc)
	}
	return max(est-int64(len(rec.Meta)+len(rec.Payload)), 0) + alloc
}

// chunkBytes is the size of the chunks a sub-batch's small records are
// copied into: batchChunkBytes, or under a small budget a 64th of what it
// grants (whole pages, at least one), so that the chunk a small record
// opens never makes it larger than the budget can grant.
func (a *admission) chunkBytes() int {
	if a.budget == nil {
		return batchChunkBytes
	}
	g := a.budget.Stats().Grantable / 64
	return int(min(batchChunkBytes, max(runtimePage, g&^(runtimePage-1))))
}

// start opens a sub-batch of up to limit records whose first record needs
// need bytes: it waits for the opening reservation or for ctx to end. It
// returns an error wrapping flow.ErrOversize when need alone is more than
// the budget can grant now. Nothing may be held when it is called.
func (a *admission) start(ctx context.Context, need int64, limit int) (reservation, error) {
	if a.budget == nil {
		return reservation{}, nil
	}
	want := need * int64(limit)
	if a.perRecord > 0 {
		want = int64(a.perRecord * float64(limit))
	}
	want = max(need, min(want, a.budget.Stats().Grantable/drainShare))
	err := a.acquire(ctx, want)
	if errors.Is(err, flow.ErrOversize) && want > need {
		// The budget shrank since it was asked (SetLimit): ask for the
		// first record alone.
		want = need
		err = a.acquire(ctx, want)
	}
	if err != nil {
		return reservation{}, err
	}
	return reservation{held: want, used: need}, nil
}

func (a *admission) acquire(ctx context.Context, n int64) error {
	if ok, err := a.budget.TryAcquire(n); ok || err != nil {
		return err
	}
	a.waiting(true)
	defer a.waiting(false)
	return a.budget.Acquire(ctx, n)
}

// take adds a record needing need bytes to rv, extending rv without
// waiting if it does not fit; false means it could not.
func (a *admission) take(rv *reservation, need int64) bool {
	if a.budget == nil {
		return true
	}
	if extra := rv.used + need - rv.held; extra > 0 {
		if ok, _ := a.budget.TryAcquire(extra); !ok {
			return false // not now, or more than grantable: the next sub-batch
		}
		rv.held += extra
	}
	rv.used += need
	return true
}

// trim releases what rv holds beyond the n records taken, and learns the
// size per record for the next sub-batch's opening reservation.
func (a *admission) trim(rv *reservation, n int) {
	if a.budget == nil || n == 0 {
		return
	}
	if rv.held > rv.used {
		a.budget.Release(rv.held - rv.used)
		rv.held = rv.used
	}
	per := float64(rv.used) / float64(n)
	if a.perRecord == 0 {
		a.perRecord = per
	} else {
		a.perRecord = (a.perRecord + per) / 2
	}
}

// release gives back everything rv holds.
func (a *admission) release(rv *reservation) {
	if a.budget == nil || rv.held == 0 {
		return
	}
	a.budget.Release(rv.held)
	rv.held, rv.used = 0, 0
}

// wabRecordSize is what a wab.Record occupies before the bytes it points
// to.
const wabRecordSize = int64(unsafe.Sizeof(wab.Record{}))

// observe teaches the estimator what a sample of a sub-batch's records
// occupy in memory — their copy out of the segment and the sink record
// made from it — against their size in the segment.
func (a *admission) observe(recs []wab.Record, srecs []sink.Record) {
	if a.budget == nil {
		return
	}
	step := max(1, len(recs)/observeSamples)
	for i := 0; i < len(recs); i += step {
		// The sink record's payload is the copy's; its key and header
		// values alias the copy's meta (counted twice: an upper bound).
		a.est.Observe(frameBytes(recs[i]), wabRecordSize+int64(len(recs[i].Meta))+srecs[i].MemSize())
	}
}

// deadLetterOversize writes the index-th record of a segment, which alone
// is larger than the budget can grant (cause wraps flow.ErrOversize), to
// the dead-letter lane with code oversize — at once, so that the records
// behind it flow — and counts it. rec aliases the reader's buffer, which
// is not read again before this returns. Like a sub-batch's dead letters,
// it waits in BlockedDeadLetterFull while the lane has no room.
func (d *Drain) deadLetterOversize(ctx context.Context, ref wab.SegmentRef, h wab.Header, index uint64, rec wab.Record, cause error) error {
	recs := []wab.Record{rec}
	srecs := d.sinkRecords(ref, h, index, recs)
	rejected := []sink.Rejection{{Index: 0, Reason: cause.Error(), Code: sink.CodeOversize}}
	dlRecs := d.deadLetterRecords(h, index, srecs, recs, rejected, 0)
	if need := d.dl.size(dlRecs); !d.dl.hasRoom(need) {
		if err := d.blockUntilRoom(ctx, ref, need); err != nil {
			return err
		}
	}
	if err := d.writeDeadLetters(ref, h, dlRecs); err != nil {
		return err
	}
	d.oversize()
	return nil
}
