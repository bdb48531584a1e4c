package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/sink"
)

// minWindowRecords is the smallest recovery window: a window too slow for
// WindowTime is halved down to it, never below.
const minWindowRecords = 16

// errWindowTimeout says a recovery commit missed its window deadline.
var errWindowTimeout = errors.New("engine: recovery window deadline exceeded")

// coverFunc records raw positions [lo, hi) as durably received by the
// secondary; it is called only after the secondary's durable ack.
type coverFunc func(ctx context.Context, lo, hi uint64) error

// coverPlain records coverage in the store's memory, for its next flush.
func (s *secondary) coverPlain(_ context.Context, lo, hi uint64) error {
	s.f.store.Cover(s.name, lo, hi)
	return nil
}

// covered is the sink's coverage with the positions queued for live
// delivery counted as covered.
func (s *secondary) covered() SpanSet {
	cov := s.f.store.Coverage(s.name)
	s.qmu.Lock()
	cov.AddSet(&s.inQ)
	s.qmu.Unlock()
	return cov
}

// recoverWindow replays one window of the first gap in the sink's
// coverage (positions queued for live delivery count as covered). It
// reports whether there was anything to do.
func (s *secondary) recoverWindow(ctx context.Context) (bool, error) {
	end := s.f.end.Load()
	cov := s.covered()
	gap, ok := cov.FirstGap(end)
	if !ok {
		return false, nil
	}
	return s.replayGap(ctx, gap, end, s.coverPlain)
}

// replayGap replays one window from the start of gap, a gap in the sink's
// coverage below raw's end, and records what the sink acked with cover.
func (s *secondary) replayGap(ctx context.Context, gap Span, end uint64, cover coverFunc) (bool, error) {
	want := int(min(uint64(s.f.scale(s.window)), gap.Len()))
	held, bound, err := s.reserveWindow(ctx, want)
	if err != nil {
		return false, err
	}
	defer func() { s.releaseWindow(held) }() // once the window is committed, or given up
	rctx, cancel := context.WithTimeout(ctx, s.f.opts.WindowTime)
	recs, err := s.f.reader.ReadFrom(rctx, gap.Lo, want, bound)
	cancel()
	var gone sink.PositionsGone
	if errors.As(err, &gone) && errors.Is(err, sink.ErrPositionGone) {
		return s.stepOver(ctx, gap, gone, cover)
	}
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		s.releaseWindow(held) // nothing is held while it waits
		held = 0
		s.sleep(ctx, s.f.opts.RetryMax)
		return true, fmt.Errorf("read raw from %d: %w", gap.Lo, err)
	}
	keep := 0
	for keep < len(recs) && recs[keep].Pos < gap.Hi {
		keep++
	}
	if keep == 0 {
		if len(recs) > 0 {
			// Raw holds nothing in the gap: the next record is past it.
			return true, cover(ctx, gap.Lo, gap.Hi)
		}
		// Raw returned nothing below an end it acknowledged: never
		// guess that the gap is empty; look again later.
		return false, fmt.Errorf("raw returned nothing from %d below its end %d", gap.Lo, end)
	}
	recs, err = s.fitWindow(ctx, &held, bound, recs[:keep])
	if errors.Is(err, flow.ErrOversize) {
		return true, s.oversize(ctx, gap.Lo, recs[0], err, cover)
	}
	if err != nil {
		return false, err // ctx ended while the record waited for the budget
	}
	err = s.deliver(ctx, gap.Lo, recs, true, cover)
	switch {
	case errors.Is(err, errWindowTimeout):
		s.window = max(minWindowRecords, s.window/2)
		s.f.log.Warn("recovery window too slow; halving it", "sink", s.name, "window_records", s.window, "err", err)
		return true, nil
	case err != nil:
		return true, err
	}
	if a := s.f.opts.Audit; a != nil {
		a.Recovered(s.name, gap.Lo, recs[len(recs)-1].Pos+1, s.f.opts.Mode.String())
	}
	if s.window < s.f.opts.WindowRecords {
		s.window = min(s.f.opts.WindowRecords, s.window*2)
	}
	return true, nil
}

// oversize hands rec, read from raw at the start of a window and alone
// larger than the budget can grant (cause wraps flow.ErrOversize), to the
// quarantine lane with code oversize, as flow control's oversize rule
// says, and covers it with the positions before it: it has been accounted
// for, and recovery goes on with the records behind it instead of asking
// for it forever. Raw keeps it.
func (s *secondary) oversize(ctx context.Context, lo uint64, rec sink.Positioned, cause error, cover coverFunc) error {
	s.f.log.Warn("recovery read a record larger than the memory budget can grant; it goes to quarantine as oversize",
		"sink", s.name, "position", rec.Pos, "bytes", rec.MemSize(), "err", cause)
	s.accounted([]sink.Positioned{rec}, []sink.Rejection{{Index: 0, Reason: cause.Error(), Code: sink.CodeOversize}}, true, 0)
	return cover(ctx, lo, rec.Pos+1)
}

// stepOver records that the part of gap raw reports gone will never
// reach the sink: it is covered — there is nothing left to deliver — and
// counted and logged as unrecoverable, so that recovery goes on with what
// raw still keeps instead of asking for the lost span forever.
func (s *secondary) stepOver(ctx context.Context, gap Span, gone sink.PositionsGone, cover coverFunc) (bool, error) {
	lo, hi := gone.GonePositions()
	if lo > gap.Lo || hi <= gap.Lo {
		return false, fmt.Errorf("raw reported positions [%d, %d) gone when asked for %d: %w", lo, hi, gap.Lo, gone)
	}
	hi = min(hi, gap.Hi)
	if err := cover(ctx, gap.Lo, hi); err != nil {
		return true, err
	}
	s.unrecoverable.Add(int64(hi - gap.Lo))
	s.f.obs.Unrecoverable(s.name, hi-gap.Lo)
	s.f.log.Error("positions the secondary lacks are no longer kept by raw; they cannot be recovered into it",
		"sink", s.name, "from", gap.Lo, "to", hi, "err", gone)
	return true, nil
}

func (s *secondary) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
