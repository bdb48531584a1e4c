package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/tap"
	"github.com/weir-io/weir/source"
)

// Admission is a source's share in the memory budget at its gate
// (docs/flow_control.md): while a Write holds a batch in memory until it
// is durable, the batch's estimated size is reserved from the budget.
type Admission struct {
	Budget *flow.Budget
	// Estimator is the source's: it estimates a record's memory from its
	// data size (source.Record.Size).
	Estimator *flow.Estimator
	// OnOversize is told how many records were refused as larger than
	// the budget can grant (nil: nobody).
	OnOversize func(records int)
}

// WithAdmission returns a gate that writes through g under a: see
// admitGate. A record larger than the budget can grant goes to g's
// rejection lane (GateOptions.Quarantine) with reason code oversize, or
// fails the Write when g has none.
func (g *WABGate) WithAdmission(a Admission) source.Gate {
	return &admitGate{inner: g, a: a, into: g.opts.Quarantine, name: g.opts.Name, obs: g.opts.Observer, qtap: g.opts.QuarantineTap}
}

// WithAdmission returns a gate that writes through g under a, as
// WABGate.WithAdmission does; oversize records go to
// SinkGateOptions.Quarantine.
func (g *SinkGate) WithAdmission(a Admission) source.Gate {
	return &admitGate{inner: g, a: a, into: g.opts.Quarantine, name: g.opts.Name, obs: g.opts.Observer, qtap: g.opts.QuarantineTap}
}

// admitGate is one source's admission in front of a gate. Before it
// writes a batch it reserves the batch's estimated size
// (Estimator.EstimateBatch over the records' data) from the budget, and
// it releases the reservation when the inner Write returns: by then the
// records are durable (or the Write failed), and holding them is the
// next stage's business.
//
// A record whose own estimate exceeds what the budget can grant now
// (flow.ErrOversize; during warm-up that is less than the budget) would
// stall its source for good, and everything behind it: it is stored in
// the gate's rejection lane with reason code oversize instead, before the
// rest is written — the same path as a record over max_frame_bytes — so
// the source's position may pass it. A batch whose estimate exceeds what
// is grantable, each of its records fitting, is written in consecutive
// parts that each fit.
type admitGate struct {
	inner source.Gate
	a     Admission
	into  lane.Lane // nil: an oversize record fails the Write
	name  string
	obs   GateObserver
	qtap  *tap.Point // the lane's tap point
}

// Write implements source.Gate.
func (g *admitGate) Write(ctx context.Context, recs []source.Record) error {
	sizes := make([]int64, len(recs))
	for i := range recs {
		sizes[i] = int64(recs[i].Size())
	}
	for len(recs) > 0 {
		grantable := g.a.Budget.Stats().Grantable
		var err error
		if recs, sizes, err = g.refuseOversize(ctx, recs, sizes, grantable); err != nil {
			return err
		}
		for len(recs) > 0 {
			n, est := g.part(recs, sizes, grantable)
			// Acquire blocks this goroutine outside any select over
			// acknowledgements, which is safe here: the source goroutine
			// that calls Write holds no reservation while it waits (the
			// previous part's was released when its Write returned), and
			// what frees the budget — the drain's and the fan-out's
			// acknowledgements, other sources' writes returning — runs on
			// other goroutines, never on this one. The select rule binds
			// a goroutine that itself processes the acknowledgements that
			// release the budget; a source's does not.
			if err := g.a.Budget.Acquire(ctx, est); err != nil {
				if errors.Is(err, flow.ErrOversize) {
					break // the budget shrank since grantable was read: plan again
				}
				return fmt.Errorf("%w: waiting for %d bytes of the memory budget: %w", ErrGate, est, err)
			}
			err := g.inner.Write(ctx, recs[:n])
			g.a.Budget.Release(est)
			if err != nil {
				return err
			}
			recs, sizes = recs[n:], sizes[n:]
		}
	}
	return nil
}

// refuseOversize stores the records whose estimate alone exceeds
// grantable in the rejection lane and returns the others.
func (g *admitGate) refuseOversize(ctx context.Context, recs []source.Record, sizes []int64, grantable int64) ([]source.Record, []int64, error) {
	if g.a.Estimator.Estimate(slices.Max(sizes)) <= grantable {
		return recs, sizes, nil // the common case, at the cost of one estimate
	}
	var over []gateRefusal
	for i, n := range sizes {
		if est := g.a.Estimator.Estimate(n); est > grantable {
			over = append(over, gateRefusal{index: i, why: fmt.Sprintf(
				"estimated %d bytes in memory (%d bytes of data), more than the %d the memory budget can grant now", est, n, grantable)})
		}
	}
	if len(over) == 0 {
		return recs, sizes, nil
	}
	if g.into == nil {
		o := over[0]
		return nil, nil, fmt.Errorf("%w: record %d of %q: %w: %s", ErrGate, o.index, recs[o.index].Source, flow.ErrOversize, o.why)
	}
	if err := rejectAtGate(ctx, g.into, g.name, g.obs, g.qtap, recs, over, "larger than the memory budget grants"); err != nil {
		return nil, nil, err
	}
	if g.a.OnOversize != nil {
		g.a.OnOversize(len(over))
	}
	keep := make([]source.Record, 0, len(recs)-len(over))
	keepSizes := make([]int64, 0, len(recs)-len(over))
	next := 0
	for i := range recs {
		if next < len(over) && over[next].index == i {
			next++
			continue
		}
		keep, keepSizes = append(keep, recs[i]), append(keepSizes, sizes[i])
	}
	return keep, keepSizes, nil
}

// part is the longest prefix of recs whose estimate fits grantable (at
// least one record: each fits alone), and that estimate.
func (g *admitGate) part(recs []source.Record, sizes []int64, grantable int64) (n int, est int64) {
	var total int64
	for _, sz := range sizes {
		total += sz
	}
	if est := g.a.Estimator.EstimateBatch(len(recs), total); est <= grantable {
		return len(recs), est // the common case: the whole batch
	}
	total = 0
	for n < len(recs) {
		e := g.a.Estimator.EstimateBatch(n+1, total+sizes[n])
		if n > 0 && e > grantable {
			break
		}
		total += sizes[n]
		n, est = n+1, e
	}
	return n, est
}

// Hold reserves the estimated memory of recs, waiting for it, for a
// source that is its own raw and so has no gate to do it (the origin
// makes the batch durable in place). Nothing can be refused there — the
// records are already in the origin, the system of record — so a batch
// estimated at more than the budget can grant reserves what it can
// grant. release gives the reservation back. The waiting is safe for the
// reason given in admitGate.Write.
func (a Admission) Hold(ctx context.Context, recs []source.Record) (release func(), err error) {
	var size int64
	for i := range recs {
		size += int64(recs[i].Size())
	}
	est := a.Estimator.EstimateBatch(len(recs), size)
	for {
		n := min(est, a.Budget.Stats().Grantable)
		err := a.Budget.Acquire(ctx, n)
		if errors.Is(err, flow.ErrOversize) {
			continue // the budget shrank since it was read
		}
		if err != nil {
			return nil, fmt.Errorf("waiting for %d bytes of the memory budget: %w", n, err)
		}
		return func() { a.Budget.Release(n) }, nil
	}
}
