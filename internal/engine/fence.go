package engine

import (
	"context"
	"errors"
	"fmt"
)

// Fence is the fencing token a recovery window's claim carries into the
// offset store (FanoutOptions.Claims): Window is the window's key, Token
// the claim's token, greater than that of every earlier claim of the same
// window.
type Fence struct {
	Window string
	Token  uint64
}

// ErrFenced is returned by OffsetStore.Enter and OffsetStore.CoverFenced
// when a newer claim of the window has entered the store: the holder's
// claim is stale (its lease ended) and it may record nothing more for the
// window.
var ErrFenced = errors.New("engine: offset store: a newer claim holds the recovery window")

// fenced is ErrFenced for f, against the token the store holds.
func fenced(f Fence, persisted uint64) error {
	return fmt.Errorf("%w: window %s: claim token %d, store holds %d", ErrFenced, f.Window, f.Token, persisted)
}

// persistedFence is the token persisted for window (0: none).
func persistedFence(st *OffsetState, window string) uint64 {
	if st == nil {
		return 0
	}
	return st.Fences[window]
}

// Enter registers the claim f in the store before its holder records any
// coverage under it: in one update it refuses (ErrFenced) when a higher
// token is persisted for f.Window, and otherwise raises the window's token
// to f.Token. The token is durable when Enter returns nil. Whatever
// coverage memory holds is written with it.
func (s *OffsetStore) Enter(ctx context.Context, f Fence) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("engine: offset store: %w", err)
	}
	return s.update(ctx, true, func(persisted, next *OffsetState) error {
		if have := persistedFence(persisted, f.Window); have > f.Token {
			return fenced(f, have)
		}
		next.Fences[f.Window] = max(next.Fences[f.Window], f.Token)
		return nil
	}, func() { s.fences[f.Window] = max(s.fences[f.Window], f.Token) })
}

// CoverFenced records, like Cover, that the sink has durably received raw
// positions [lo, hi) — call it only after the sink's durable ack — but
// only while f is the window's current claim: in one update it refuses
// (ErrFenced) unless the token persisted for f.Window is f.Token, and
// otherwise persists the coverage. Memory takes the span only once it is
// durable, so a refused or failed write never reaches the store later
// through Flush.
func (s *OffsetStore) CoverFenced(ctx context.Context, sinkName string, lo, hi uint64, f Fence) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("engine: offset store: %w", err)
	}
	return s.update(ctx, true, func(persisted, next *OffsetState) error {
		if have := persistedFence(persisted, f.Window); have != f.Token {
			return fenced(f, have)
		}
		addCoverage(next.Coverage, sinkName, lo, hi)
		return nil
	}, func() { addCoverage(s.coverage, sinkName, lo, hi) })
}
