package wab

import (
	"context"
	"time"
)

// The byte bound of a shard's queue (Options.QueueCapacityBytes). A Submit
// takes room for its request's payload and meta bytes before it sends the
// request on the queue; the flusher gives the room back as it takes the
// request off (unpack). Taking is one compare-and-swap; only a Submit that
// finds no room waits, on a channel the flusher closes when it frees bytes
// while someone waits.

// takeBytes takes room for n bytes if there is some: the queue holds at
// most QueueCapacityBytes, except that a request of any size may enter a
// queue holding no bytes (else it could never be queued).
func (s *shard) takeBytes(n int64) bool {
	if n <= 0 {
		return true
	}
	limit := s.l.opts.QueueCapacityBytes
	for {
		cur := s.queuedBytes.Load()
		if cur > 0 && cur+n > limit {
			return false
		}
		if s.queuedBytes.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// giveBytes gives room for n bytes back and wakes the Submits waiting for
// room.
func (s *shard) giveBytes(n int64) {
	if n <= 0 {
		return
	}
	s.queuedBytes.Add(-n)
	if s.bytesWaiters.Load() > 0 {
		s.roomMu.Lock()
		close(s.room)
		s.room = make(chan struct{})
		s.roomMu.Unlock()
	}
}

// waitBytes waits until it has taken room for n bytes, or until timeout
// fires (ErrQueueTimeout), ctx ends or the log closes.
func (s *shard) waitBytes(ctx context.Context, n int64, timeout <-chan time.Time) error {
	s.bytesWaiters.Add(1)
	defer s.bytesWaiters.Add(-1)
	for {
		// Take the channel before looking again: bytes freed after the
		// look close this channel (the waiter count is already up).
		s.roomMu.Lock()
		room := s.room
		s.roomMu.Unlock()
		if s.takeBytes(n) {
			return nil
		}
		select {
		case <-room:
		case <-timeout:
			return ErrQueueTimeout
		case <-ctx.Done():
			return ctx.Err()
		case <-s.l.closing:
			return ErrClosed
		}
	}
}
