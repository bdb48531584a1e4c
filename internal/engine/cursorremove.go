package engine

import (
	"context"
	"fmt"
	"maps"
)

// Remove deletes the source's cursor, durably, before returning nil (the
// file is replaced whole, as by Save). Removing a cursor the store does
// not hold is a no-op.
func (s *FileCursorStore) Remove(ctx context.Context, src string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("engine: cursor store: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return s.broken
	}
	if _, ok := s.cursors[src]; !ok {
		return nil
	}
	next := maps.Clone(s.cursors)
	delete(next, src)
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
