package engine_test

import (
	"context"
	"testing"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/source"
)

// A removed cursor is gone for good: after a reopen, and in the offset
// store also after another writer's flush merges what is persisted.
func TestCursorRemove(t *testing.T) {
	ctx := context.Background()
	t.Run("file cursor store", func(t *testing.T) {
		dir := t.TempDir()
		s, err := engine.OpenFileCursorStore(nil, dir, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"a", "b"} {
			if err := s.Save(ctx, n, source.Cursor(n+"1")); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Remove(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if err := s.Remove(ctx, "never"); err != nil {
			t.Fatal(err)
		}
		s2, err := engine.OpenFileCursorStore(nil, dir, "")
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := s2.Load(ctx, "a"); c != nil {
			t.Errorf("removed cursor reads back as %q", c)
		}
		if c, _ := s2.Load(ctx, "b"); string(c) != "b1" {
			t.Errorf("cursor b = %q, want b1", c)
		}
	})
	t.Run("offset store", func(t *testing.T) {
		dir := t.TempDir()
		s, err := engine.OpenOffsetStore(ctx, nil, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"a", "b"} {
			if err := s.Save(ctx, n, source.Cursor(n+"1")); err != nil {
				t.Fatal(err)
			}
		}
		// A second process on the same file still knows "a".
		other, err := engine.OpenOffsetStore(ctx, nil, dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RemoveCursor(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if c, _ := s.Load(ctx, "a"); c != nil {
			t.Errorf("removed cursor still loads: %q", c)
		}
		other.Cover("sink", 0, 10)
		if err := other.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		re, err := engine.OpenOffsetStore(ctx, nil, dir)
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := re.Load(ctx, "b"); string(c) != "b1" {
			t.Errorf("cursor b = %q, want b1", c)
		}
		// The other process read "a" before it was removed; a writer
		// that never saved a cursor takes the persisted state, so it
		// does not write "a" back.
		if c, _ := re.Load(ctx, "a"); c != nil {
			t.Errorf("another writer's flush brought the removed cursor back: %q", c)
		}
	})
}
