package flow

import (
	"sync"
	"time"
)

// Hold is a growing reservation on a Budget for one request whose size is
// learnt while it is read (an HTTP body, decompressed as it arrives): it
// takes bytes in steps before they are read into memory and gives back
// exactly what it took, once, however often Release is called. A nil
// Budget makes a Hold that counts and grants everything (admission off).
//
// A Hold is used by one goroutine at a time; Release may race with
// nothing else. Grow may wait (AcquireWithin), so it must not be called
// from a goroutine that processes acknowledgements.
type Hold struct {
	b  *Budget
	mu sync.Mutex
	n  int64
}

// NewHold returns an empty hold on b.
func NewHold(b *Budget) *Hold { return &Hold{b: b} }

// N is what the hold has taken from the budget.
func (h *Hold) N() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// Grow takes n more bytes, waiting at most wait for them. It returns
// false (holding what it held before) when they were not granted in
// time, and ErrOversize (wrapped by the budget) when n can never be
// granted now.
func (h *Hold) Grow(n int64, wait time.Duration) (bool, error) {
	if n <= 0 {
		return true, nil
	}
	if h.b != nil {
		ok, err := h.b.TryAcquire(n)
		if err != nil {
			return false, err
		}
		if !ok {
			if wait <= 0 {
				return false, nil
			}
			if ok, err = h.b.AcquireWithin(n, wait); !ok || err != nil {
				return false, err
			}
		}
	}
	h.mu.Lock()
	h.n += n
	h.mu.Unlock()
	return true, nil
}

// Shrink gives n of the bytes the hold took back (all it holds, at most):
// memory the holder no longer keeps, such as a buffer it has outgrown.
func (h *Hold) Shrink(n int64) {
	h.mu.Lock()
	n = min(max(n, 0), h.n)
	h.n -= n
	h.mu.Unlock()
	if h.b != nil && n > 0 {
		h.b.Release(n)
	}
}

// Release gives everything the hold took back to the budget; a second
// Release gives back nothing.
func (h *Hold) Release() {
	h.mu.Lock()
	n := h.n
	h.n = 0
	h.mu.Unlock()
	if h.b != nil && n > 0 {
		h.b.Release(n)
	}
}
