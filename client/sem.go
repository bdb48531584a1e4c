package client

import (
	"container/list"
	"context"
	"sync"
)

// window is a FIFO weighted semaphore bounding the records in flight. A
// waiter that cannot be served blocks every waiter behind it, so a large
// batch is not starved by a stream of single records.
type window struct {
	mu      sync.Mutex
	size    int
	cur     int
	closed  bool
	waiters list.List // of *waiter
}

type waiter struct {
	n     int
	ready chan struct{} // closed when granted or when the window closes
}

func newWindow(size int) *window { return &window{size: size} }

// acquire takes n slots (n <= size), blocking while the window is full. It
// returns ctx's error if ctx ends first and ErrClosed once the window is
// closed.
func (w *window) acquire(ctx context.Context, n int) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if w.cur+n <= w.size && w.waiters.Len() == 0 {
		w.cur += n
		w.mu.Unlock()
		return nil
	}
	wt := &waiter{n: n, ready: make(chan struct{})}
	elem := w.waiters.PushBack(wt)
	w.mu.Unlock()

	select {
	case <-wt.ready:
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.closed && elem.Value == nil {
			return ErrClosed
		}
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		defer w.mu.Unlock()
		select {
		case <-wt.ready:
			if w.closed && elem.Value == nil {
				return ErrClosed
			}
			// Granted just as ctx ended: give the slots back.
			w.cur -= n
			w.notify()
		default:
			w.waiters.Remove(elem)
			w.notify() // we may have been blocking smaller waiters
		}
		return ctx.Err()
	}
}

// release returns n slots.
func (w *window) release(n int) {
	w.mu.Lock()
	w.cur -= n
	w.notify()
	w.mu.Unlock()
}

// notify grants waiters in order while they fit. Called with mu held.
func (w *window) notify() {
	for {
		front := w.waiters.Front()
		if front == nil {
			return
		}
		wt := front.Value.(*waiter)
		if w.cur+wt.n > w.size {
			return
		}
		w.cur += wt.n
		w.waiters.Remove(front)
		close(wt.ready)
	}
}

// close fails every current and future acquire with ErrClosed.
func (w *window) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for e := w.waiters.Front(); e != nil; e = w.waiters.Front() {
		wt := w.waiters.Remove(e).(*waiter)
		e.Value = nil
		close(wt.ready)
	}
}
