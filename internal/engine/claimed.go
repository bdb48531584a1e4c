package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Claimed recovery (FanoutOptions.Claims): the nodes sharing one raw cut
// each secondary's positions into a grid of windows of ClaimPositions,
// and a node replays only a window it holds a claim on. Window k of sink
// S is the key "S/k" (WindowKey), covering [k*G, (k+1)*G). The worker
// takes the first window below raw's end that has a gap and no holder,
// enters the claim's token in the offset store (OffsetStore.Enter), then
// replays the window's gaps as recoverWindow does — reservation, halving,
// quarantine, audit — but records coverage with OffsetStore.CoverFenced,
// so that once a newer claim has entered, nothing more is recorded under
// this one. It gives the window up when no gap is left, when the claim's
// lease is lost, or when the store refuses its token.

// claimSkipIntervals is how many RecoveryIntervals a window this node
// failed to claim is passed over.
const claimSkipIntervals = 5

// releaseTimeout bounds the release of a claim, and claimTimeout the
// look for a window to claim: the worker that waits on them also delivers
// the live batches, which must not stall while the claims store cannot
// answer (quorum lost).
const (
	releaseTimeout = 5 * time.Second
	claimTimeout   = 5 * time.Second
)

// errClaimLost stops a window's coverage once its claim's lease is gone.
var errClaimLost = errors.New("engine: the recovery window's claim was lost")

// heldCell is the window a secondary's worker holds under a claim.
type heldCell struct {
	lo, hi uint64 // raw positions [lo, hi)
	claim  Claim
	fence  Fence
}

// recover replays one recovery window: claimed, with FanoutOptions.Claims,
// otherwise the first gap. It reports whether there was anything to do.
func (s *secondary) recover(ctx context.Context) (bool, error) {
	if s.f.opts.Claims == nil {
		return s.recoverWindow(ctx)
	}
	if s.cell == nil {
		ok, err := s.claimCell(ctx)
		if !ok || err != nil {
			return false, err
		}
	}
	return s.workCell(ctx)
}

// workCell replays one window of the first gap in the held window, and
// gives the window up when it has none, or the claim is lost or fenced.
func (s *secondary) workCell(ctx context.Context) (bool, error) {
	c := s.cell
	select {
	case <-c.claim.Lost():
		s.dropCell("lease lost")
		return true, nil
	default:
	}
	end := s.f.end.Load()
	cov := s.covered()
	gap, ok := cov.FirstGapFrom(c.lo, min(c.hi, end))
	if !ok {
		s.dropCell("window complete")
		return true, nil
	}
	did, err := s.replayGap(ctx, gap, end, s.coverCell(c))
	switch {
	case errors.Is(err, ErrFenced):
		s.f.log.Warn("a newer claim holds the window; giving it up", "sink", s.name,
			"window", c.fence.Window, "token", c.fence.Token, "err", err)
		s.dropCell("fenced")
		return true, nil
	case errors.Is(err, errClaimLost):
		s.dropCell("lease lost")
		return true, nil
	}
	return did, err
}

// coverCell records coverage under c's fence, and nothing once c's
// lease is lost.
func (s *secondary) coverCell(c *heldCell) coverFunc {
	return func(ctx context.Context, lo, hi uint64) error {
		select {
		case <-c.claim.Lost():
			return errClaimLost
		default:
		}
		if err := s.f.fenced.CoverFenced(ctx, s.name, lo, hi, c.fence); err != nil {
			return err
		}
		s.f.log.Debug("fenced coverage recorded", "sink", s.name, "window", c.fence.Window, "token", c.fence.Token, "from", lo, "to", hi)
		return nil
	}
}

// claimCell claims the first window below raw's end that has a gap, no
// holder, and was not failed to claim lately. It reports whether it holds
// one.
func (s *secondary) claimCell(ctx context.Context) (bool, error) {
	end, cov := s.f.end.Load(), s.covered()
	if _, ok := cov.FirstGap(end); !ok {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	if !s.floored {
		if err := s.raiseAbove(ctx, s.f.fenced.MaxFence()); err != nil {
			return false, err
		}
		s.floored = true
	}
	held, err := s.f.opts.Claims.Held(ctx, s.name+"/")
	if err != nil {
		return false, fmt.Errorf("list held recovery windows: %w", err)
	}
	now := time.Now()
	for key, until := range s.skip {
		if !now.Before(until) {
			delete(s.skip, key)
		}
	}
	for k := range cov.gapCells(end, s.f.opts.ClaimPositions) {
		key := WindowKey(s.name, k)
		if held[key] || !s.skip[key].IsZero() {
			continue
		}
		ok, err := s.take(ctx, key, k)
		if err != nil || ok {
			return ok, err
		}
		s.skip[key] = now.Add(claimSkipIntervals * s.f.opts.RecoveryInterval)
	}
	return false, nil
}

// take claims window k (key) and enters the claim's fence in the store;
// ok is false when another node holds the window or a newer claim has
// entered already.
func (s *secondary) take(ctx context.Context, key string, k uint64) (bool, error) {
	c, ok, err := s.f.opts.Claims.Claim(ctx, key)
	if err != nil {
		return false, fmt.Errorf("claim recovery window %s: %w", key, err)
	}
	if !ok {
		return false, nil
	}
	g := s.f.opts.ClaimPositions
	cell := &heldCell{lo: k * g, hi: (k + 1) * g, claim: c, fence: Fence{Window: key, Token: c.Token()}}
	if err := s.f.fenced.Enter(ctx, cell.fence); err != nil {
		s.release(cell, "entering the claim failed")
		if fe := (*FencedError)(nil); errors.As(err, &fe) {
			s.f.log.Warn("a newer claim holds the window; giving it up", "sink", s.name, "window", key, "token", cell.fence.Token, "err", err)
			// The claims store may have lost its history: its tokens must
			// go above the store's.
			return false, s.raiseAbove(ctx, fe.Have)
		}
		return false, fmt.Errorf("enter the claim of recovery window %s: %w", key, err)
	}
	s.cell = cell
	s.leases.Store(1)
	s.f.log.Info("recovery window claimed", "sink", s.name, "window", key, "token", cell.fence.Token,
		"from", cell.lo, "to", cell.hi)
	return true, nil
}

// raiseAbove lets the claims hand out tokens above token, when they can
// (ClaimFloor).
func (s *secondary) raiseAbove(ctx context.Context, token uint64) error {
	cf, ok := s.f.opts.Claims.(ClaimFloor)
	if !ok {
		return nil
	}
	if err := cf.RaiseAbove(ctx, token); err != nil {
		return fmt.Errorf("raise claim tokens above the offset store's fence %d: %w", token, err)
	}
	return nil
}

// dropCell gives up the held window, if any.
func (s *secondary) dropCell(reason string) {
	if s.cell == nil {
		return
	}
	c := s.cell
	s.cell = nil
	s.leases.Store(0)
	s.release(c, reason)
}

// release releases c's claim and logs it.
func (s *secondary) release(c *heldCell, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := c.claim.Release(ctx); err != nil {
		s.f.log.Warn("releasing a recovery window failed; the claims store retries it, and this node may claim the window again meanwhile", "sink", s.name,
			"window", c.fence.Window, "token", c.fence.Token, "reason", reason, "err", err)
		return
	}
	s.f.log.Info("recovery window released", "sink", s.name, "window", c.fence.Window, "token", c.fence.Token, "reason", reason)
}

// heldTimeout bounds the listing of held windows for the metrics.
const heldTimeout = 2 * time.Second

// reportWindows reports the sink's windows with a gap that no node holds,
// and the claims this node holds. The claims are this node's own to
// count, so they are reported also when the held windows cannot be
// listed (quorum lost): a node cut off from the cluster that gave its
// claim up reports 0, not the claim it had; the unclaimed windows are
// then reported as last counted.
func (s *secondary) reportWindows(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, heldTimeout)
	held, err := s.f.opts.Claims.Held(hctx, s.name+"/")
	cancel()
	if err != nil {
		s.f.log.Debug("cannot list held recovery windows for the metrics", "sink", s.name, "err", err)
		s.f.obs.RecoveryWindows(s.name, s.unclaimed, uint64(s.leases.Load()))
		return
	}
	cov := s.covered()
	var unclaimed uint64
	for k := range cov.gapCells(s.f.end.Load(), s.f.opts.ClaimPositions) {
		if !held[WindowKey(s.name, k)] {
			unclaimed++
		}
	}
	s.unclaimed = unclaimed
	s.f.obs.RecoveryWindows(s.name, unclaimed, uint64(s.leases.Load()))
}
