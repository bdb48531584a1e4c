package engine_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/internal/vfs/memfs"
	"github.com/weir-io/weir/source"
)

func TestFileCursorStoreRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := engine.OpenFileCursorStore(nil, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s.Load(ctx, "a"); err != nil || c != nil {
		t.Fatalf("Load on empty store = %v, %v", c, err)
	}
	for _, kv := range []struct{ k, v string }{{"a", "1"}, {"b", "two"}, {"a", "three"}, {"", ""}} {
		if err := s.Save(ctx, kv.k, source.Cursor(kv.v)); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := engine.OpenFileCursorStore(nil, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"a": "three", "b": "two", "": ""} {
		c, err := s2.Load(ctx, k)
		if err != nil || string(c) != v {
			t.Fatalf("Load(%q) = %q, %v; want %q", k, c, err, v)
		}
	}
}

// Every Save is durable when it returns: a power loss right after keeps it;
// a power loss in the middle of a Save keeps the old or the new cursors.
func TestFileCursorStoreCrash(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(20) {
		m := memfs.New()
		var clones []*memfs.FS
		var expect [][2]string // after clone i, "a" must be one of these
		efs := errorfs.New(m)
		prev := ""
		cur := ""
		efs.SetHook(func(e errorfs.Event) {
			// A crash at every file-system step of every Save.
			clones = append(clones, m.CrashClone(memfs.CrashOptions{Mode: memfs.CrashMode(seed % 4), Rand: rand.New(rand.NewPCG(seed, uint64(len(clones))))}))
			expect = append(expect, [2]string{prev, cur})
		})
		s, err := engine.OpenFileCursorStore(efs, "/off", "")
		if err != nil {
			t.Fatal(err)
		}
		clones, expect = nil, nil
		for i := range 3 {
			cur = string(rune('x' + i))
			if err := s.Save(ctx, "a", source.Cursor(cur)); err != nil {
				t.Fatal(err)
			}
			prev = cur
			clones = append(clones, m.CrashClone(memfs.CrashOptions{Mode: memfs.CrashDropUnsynced}))
			expect = append(expect, [2]string{cur, cur})
		}
		for i, c := range clones {
			s2, err := engine.OpenFileCursorStore(c, "/off", "")
			if err != nil {
				t.Fatalf("seed %d clone %d: %v", seed, i, err)
			}
			got, _ := s2.Load(ctx, "a")
			if string(got) != expect[i][0] && string(got) != expect[i][1] {
				t.Fatalf("seed %d clone %d: cursor %q, want %q or %q", seed, i, got, expect[i][0], expect[i][1])
			}
		}
	}
}

func TestFileCursorStoreSyncFailureIsSticky(t *testing.T) {
	ctx := context.Background()
	efs := errorfs.New(vfs.OS, errorfs.Rule{Op: errorfs.OpSync, Once: true, Errno: syscall.EIO})
	s, err := engine.OpenFileCursorStore(efs, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, "a", source.Cursor("1")); err == nil {
		t.Fatal("Save after a failed sync returned nil")
	}
	// The fault is gone, but a failed sync is never retried.
	if err := s.Save(ctx, "a", source.Cursor("2")); err == nil {
		t.Fatal("second Save succeeded on a store whose sync failed")
	}
	if c, _ := s.Load(ctx, "a"); c != nil {
		t.Fatalf("Load = %q after failed saves", c)
	}
}

func TestFileCursorStoreCorruptFile(t *testing.T) {
	ctx := context.Background()
	m := memfs.New()
	s, err := engine.OpenFileCursorStore(m, "/off", "c")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, "a", source.Cursor("hello")); err != nil {
		t.Fatal(err)
	}
	f, err := m.OpenReadWrite("/off/c")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(14, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{0xff}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := engine.OpenFileCursorStore(m, "/off", "c"); !errors.Is(err, engine.ErrCorruptCursors) {
		t.Fatalf("err = %v, want ErrCorruptCursors", err)
	}
}
