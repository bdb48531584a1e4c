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

// FencedError is the ErrFenced of one refused claim: Have is the token
// the store holds for the window.
type FencedError struct {
	Fence
	Have uint64
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("%v: window %s: claim token %d, store holds %d", ErrFenced, e.Window, e.Token, e.Have)
}

func (e *FencedError) Unwrap() error { return ErrFenced }

// fenced is ErrFenced for f, against the token the store holds.
func fenced(f Fence, persisted uint64) error {
	return &FencedError{Fence: f, Have: persisted}
}

// MaxFence implements FencedStore: the highest token registered for any
// window, as memory holds them (merged from the store at open and at
// every flush and reload).
func (s *OffsetStore) MaxFence() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var m uint64
	for _, tok := range s.fences {
		m = max(m, tok)
	}
	return m
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
