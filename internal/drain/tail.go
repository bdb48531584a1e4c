package drain

// Reading the open segments' readable tails (docs/drain.md, "The open
// segment"): records are delivered as soon as their tier's promise holds,
// not when their segment is sealed.

import (
	"context"
	"errors"
	"io/fs"
	"time"

	"github.com/weir-io/weir/wab"
)

// TailSource is a Source that also tells how far each shard's open
// segment may be read (*wab.Log satisfies it). A drain whose Source is
// one delivers open segments' records as they become readable.
type TailSource interface {
	Source
	Shards() int
	// Tail is shard's readable tail; false when it has none.
	Tail(shard int) (wab.Tail, bool)
	// TailNotify receives a value whenever a tail grows.
	TailNotify() <-chan struct{}
}

// DefaultLinger is how long the drain waits, once an open segment holds
// fewer readable records than a full sub-batch, for more to join them.
const DefaultLinger = 5 * time.Millisecond

// tailSeen is when the drain first found records waiting in a shard's
// open segment at a given point of its progress (the linger's start).
type tailSeen struct {
	seq     uint64
	records uint64
	at      time.Time
}

// passTails delivers the readable tails of the shards that have no sealed
// segment left to deliver (pending names those that do: the tail waits
// behind them, so a shard's records reach the sink in order). It reports
// whether it delivered anything, and the time at which the first
// lingering tail is due (zero if none).
func (d *Drain) passTails(ctx context.Context, pending map[int]bool) (progressed bool, due time.Time) {
	if d.tails == nil {
		return false, time.Time{}
	}
	for shard := range d.tails.Shards() {
		if ctx.Err() != nil || pending[shard] {
			continue
		}
		t, ok := d.tails.Tail(shard)
		if !ok {
			continue
		}
		now := d.now()
		if until, ok := d.tailUntil[shard]; ok {
			if now.Before(until) {
				continue // the poll interval brings the drain back
			}
			delete(d.tailUntil, shard)
		}
		p, err := d.readProgress(t.Path)
		if err != nil {
			d.setTailAside(t, err)
			continue
		}
		if p.Records >= t.Records {
			continue
		}
		if at, waiting := d.lingering(t, p.Records, now); waiting {
			due = earliest(due, at)
			continue
		}
		delivered, err := d.drainTail(ctx, t, p)
		switch {
		case err == nil:
			progressed = progressed || delivered
		case ctx.Err() != nil:
			return progressed, due
		case errors.Is(err, fs.ErrNotExist):
			// Sealed meanwhile: the next pass finds it in the listing.
			progressed = true
		default:
			d.setTailAside(t, err)
		}
	}
	return progressed, due
}

// lingering reports whether the records waiting in t past confirmed are
// fewer than a sub-batch and were first found less than the linger ago,
// and if so when the linger ends.
func (d *Drain) lingering(t wab.Tail, confirmed uint64, now time.Time) (time.Time, bool) {
	if d.linger <= 0 || t.Records-confirmed >= uint64(d.batchLimit()) {
		return time.Time{}, false
	}
	seen, ok := d.tailSeen[t.Shard]
	if !ok || seen.seq != t.Seq || seen.records != confirmed {
		seen = tailSeen{seq: t.Seq, records: confirmed, at: now}
		d.tailSeen[t.Shard] = seen
	}
	end := seen.at.Add(d.linger)
	return end, now.Before(end)
}

// drainTail delivers t's records past p. It reports whether it confirmed
// any.
func (d *Drain) drainTail(ctx context.Context, t wab.Tail, p wab.Progress) (bool, error) {
	r, err := wab.OpenTail(d.fs, t)
	if err != nil {
		return false, err
	}
	defer r.Close()
	ref := wab.SegmentRef{Shard: t.Shard, Seq: t.Seq, Path: t.Path}
	r, idx, err := d.skipConfirmed(ref, r, p)
	if err != nil {
		return false, err
	}
	d.setState(Draining)
	end, err := d.deliverFrom(ctx, ref, r, idx)
	return end > idx, err
}

// setTailAside leaves a shard's open segment to its seal after a failed
// attempt at its tail: it is attempted again no sooner than RetryMax
// later, and as a sealed segment once sealed.
func (d *Drain) setTailAside(t wab.Tail, err error) {
	d.tailUntil[t.Shard] = d.now().Add(d.retryMax)
	d.log.Warn("open segment's tail not delivered; attempted again later, or once sealed", "segment", t.Path,
		"shard", t.Shard, "seq", t.Seq, "retry_after", d.retryMax, "err", err)
	d.obs.SegmentDeferred(wab.SegmentRef{Shard: t.Shard, Seq: t.Seq, Path: t.Path}, err)
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
