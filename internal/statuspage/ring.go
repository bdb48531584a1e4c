package statuspage

import "sync"

// Ring keeps the last n values pushed, for readers on other goroutines.
// Pushing never allocates once the ring is full: the oldest value is
// overwritten.
type Ring[T any] struct {
	mu   sync.Mutex
	buf  []T
	next int // where the next value goes
	full bool
}

// NewRing makes a ring of n values (at least 1).
func NewRing[T any](n int) *Ring[T] {
	return &Ring[T]{buf: make([]T, max(n, 1))}
}

// Push adds v, dropping the oldest value when the ring is full.
func (r *Ring[T]) Push(v T) {
	r.mu.Lock()
	r.buf[r.next] = v
	r.next++
	if r.next == len(r.buf) {
		r.next, r.full = 0, true
	}
	r.mu.Unlock()
}

// Items copies the values out, oldest first.
func (r *Ring[T]) Items() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return append([]T(nil), r.buf[:r.next]...)
	}
	out := make([]T, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}

// Len is how many values the ring holds.
func (r *Ring[T]) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.full {
		return len(r.buf)
	}
	return r.next
}

// Cap is how many values the ring keeps.
func (r *Ring[T]) Cap() int { return len(r.buf) }
