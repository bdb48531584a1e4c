package drain

// Damaged and deferred segments: set aside, found again at start, forgotten
// when they vanish.

import (
	"context"
	"errors"
	"io"

	"github.com/weir-io/weir/wab"
)

// setAside leaves ref on disk after a failed attempt, until RetryMax has
// passed (or, after a sink error, until the sink turns healthy again). A
// *wab.CorruptionError makes it a damaged segment: the sink's health does
// not mend that, and weir_segments_damaged counts it until it is delivered
// or leaves the listing.
func (d *Drain) setAside(ref wab.SegmentRef, err error) {
	ce := (*wab.CorruptionError)(nil)
	corrupt := errors.As(err, &ce)
	d.deferred[ref.Path] = deferral{until: d.now().Add(d.retryMax), corrupt: corrupt}
	msg := "segment left on disk, will retry later (at once if the sink turns healthy again)"
	if corrupt {
		// wab.Open trusts sealed footers: damage inside a sealed
		// segment shows up here, when its records are read.
		msg = "segment is corrupt: records from the damage on cannot be delivered; " +
			"stop the daemon and see weir verify and weir repair"
	}
	d.log.Error(msg, "segment", ref.Path, "shard", ref.Shard, "seq", ref.Seq,
		"retry_after", d.retryMax, "err", err)
	d.obs.SegmentDeferred(ref, err)
	if corrupt {
		d.setDamaged(ref.Path, true)
	}
}

// setDamaged records whether the segment at path is damaged, and reports
// the count to the observer when it changes.
func (d *Drain) setDamaged(path string, damaged bool) {
	if _, was := d.damaged[path]; was == damaged {
		return
	}
	if damaged {
		d.damaged[path] = struct{}{}
	} else {
		delete(d.damaged, path)
	}
	if d.damageReported {
		d.obs.SegmentsDamaged(len(d.damaged))
	}
}

// findDamaged runs when Run starts. It reads the next record to deliver
// of every sealed segment, and sets aside as damaged those where that
// record is damaged — among them every segment an earlier run set aside
// for damage, because records are confirmed up to the damage. So
// weir_segments_damaged is right again after a restart before the first
// pass reaches those segments, which behind a sink that is down may take
// long. It costs one open and one frame read per sealed segment, in the
// drain's goroutine: start-up itself (wab.Open) still trusts sealed
// segments by header and footer, and its time does not grow with the
// backlog; it reads each sealed segment's header and footer already, so
// this at most doubles the time from a start to the first delivery.
// Each segment's probe counts as one piece of the drain's work for /live
// (Busy). Errors other than damage are left to the first pass.
func (d *Drain) findDamaged(ctx context.Context) {
	refs, err := d.src.Sealed()
	if err != nil {
		return // the first pass lists again, and logs
	}
	for _, ref := range refs {
		if ctx.Err() != nil {
			return
		}
		d.markBusy()
		err := d.probe(ref)
		if ce := (*wab.CorruptionError)(nil); errors.As(err, &ce) {
			d.setAside(ref, err)
		}
	}
}

// probe opens ref at its first record not yet confirmed and reads that
// record; it returns the error doing so met, nil when the record is
// sound or there is none.
func (d *Drain) probe(ref wab.SegmentRef) error {
	r, _, err := d.openAtProgress(ref)
	if err != nil {
		return err
	}
	defer r.Close()
	if _, err := r.Next(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// forgetVanished drops deferrals of segments no longer listed, and counts
// damaged segments no longer listed (removed or replaced by weir repair)
// out.
func (d *Drain) forgetVanished(refs []wab.SegmentRef) {
	if len(d.deferred) == 0 && len(d.damaged) == 0 {
		return
	}
	live := make(map[string]struct{}, len(refs))
	for _, r := range refs {
		live[r.Path] = struct{}{}
	}
	for p := range d.deferred {
		if _, ok := live[p]; !ok {
			delete(d.deferred, p)
		}
	}
	for p := range d.damaged {
		if _, ok := live[p]; !ok {
			d.setDamaged(p, false)
		}
	}
}
