package engine

import (
	"context"
	"fmt"
	"maps"

	"github.com/weir-io/weir/source"
)

// Remove deletes the source's cursor, durably, before returning nil (the
// file is replaced whole, as by Save). Removing a cursor the store does
// not hold is a no-op.
func (s *FileCursorStore) Remove(ctx context.Context, src string) error {
	return s.update(ctx, func(next map[string]source.Cursor) bool {
		_, ok := next[src]
		delete(next, src)
		return ok
	})
}

// update applies change to a copy of the cursors and, when it reports a
// change, writes the copy durably and makes it the store's.
func (s *FileCursorStore) update(ctx context.Context, change func(next map[string]source.Cursor) bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("engine: cursor store: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return s.broken
	}
	next := maps.Clone(s.cursors)
	if !change(next) {
		return nil
	}
	if err := s.write(encodeCursors(next)); err != nil {
		return err
	}
	s.cursors = next
	return nil
}

// Where names the cursor file for logs.
func (s *FileCursorStore) Where() string { return s.path }

// RemoveCursor deletes the source's cursor, durably, before returning nil.
// From then on this process neither keeps nor merges back a cursor of
// that name (as if it had saved "none"); a later Save sets it again.
func (s *OffsetStore) RemoveCursor(ctx context.Context, src string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("engine: offset store: %w", err)
	}
	s.mu.Lock()
	delete(s.cursors, src)
	s.saved[src] = true // persisted copies are not merged back
	s.dirty = true
	s.mu.Unlock()
	return s.flush(ctx, true)
}
