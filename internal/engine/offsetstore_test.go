package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/internal/vfs/memfs"
)

func TestOffsetStoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := OpenOffsetStore(ctx, vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Cover("pg", 0, 10)
	s.Cover("pg", 20, 30)
	s.Cover("file", 0, 0)
	s.NoteRawEnd(30)
	if err := s.Save(ctx, "files:in", []byte("cursor-1")); err != nil {
		t.Fatal(err)
	}
	s.Cover("pg", 10, 15) // not flushed: must not be on disk
	r, err := OpenOffsetStore(ctx, vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Coverage("pg"); c.String() != "{[0,10) [20,30)}" {
		t.Fatalf("coverage after reopen %v", &c)
	}
	if !r.Known("file") || r.Known("other") {
		t.Fatal("Known")
	}
	if cur, _ := r.Load(ctx, "files:in"); string(cur) != "cursor-1" {
		t.Fatalf("cursor %q", cur)
	}
	if r.RawEnd() != 30 {
		t.Fatalf("raw end %d", r.RawEnd())
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if c := r.Coverage("pg"); c.String() != "{[0,15) [20,30)}" {
		t.Fatalf("coverage after reload %v", &c)
	}
}

// Two stores on one file (an ingest and a recovery process) never erase
// each other's coverage: writes merge.
func TestOffsetStoreMergesWriters(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, _ := OpenOffsetStore(ctx, vfs.OS, dir)
	b, _ := OpenOffsetStore(ctx, vfs.OS, dir)
	a.Cover("pg", 100, 200)
	b.Cover("pg", 0, 100)
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(ctx, "src", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c, _ := OpenOffsetStore(ctx, vfs.OS, dir)
	if got := c.Coverage("pg"); got.String() != "{[0,200)}" {
		t.Fatalf("merged coverage %v", &got)
	}
	if cur, _ := c.Load(ctx, "src"); string(cur) != "a" {
		t.Fatalf("b's write lost a's cursor: %q", cur)
	}
	// Clamp replaces rather than merges.
	c.Clamp("pg", 150)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	d, _ := OpenOffsetStore(ctx, vfs.OS, dir)
	if got := d.Coverage("pg"); got.String() != "{[0,150)}" {
		t.Fatalf("clamped coverage %v", &got)
	}
}

// After a power loss at any point the file holds one of the written states,
// and never coverage that was not flushed.
func TestOffsetStoreCrash(t *testing.T) {
	ctx := context.Background()
	m := memfs.New()
	s, err := OpenOffsetStore(ctx, m, "/raw")
	if err != nil {
		t.Fatal(err)
	}
	var flushed []uint64
	for i := uint64(1); i <= 20; i++ {
		s.Cover("pg", 0, i*10)
		if i%3 == 0 {
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			flushed = append(flushed, i*10)
		}
		c := m.CrashClone(memfs.CrashOptions{Mode: memfs.CrashDropUnsynced})
		r, err := OpenOffsetStore(ctx, c, "/raw")
		if err != nil {
			t.Fatalf("reopen after crash %d: %v", i, err)
		}
		got := r.Coverage("pg")
		want := uint64(0)
		if len(flushed) > 0 {
			want = flushed[len(flushed)-1]
		}
		if got.Prefix() != want || got.Max() != want {
			t.Fatalf("after crash at step %d coverage %v, want [0,%d)", i, &got, want)
		}
	}
}

func TestOffsetStoreSyncFailureIsSticky(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	efs := errorfs.New(vfs.OS)
	s, err := OpenOffsetStore(ctx, efs, dir)
	if err != nil {
		t.Fatal(err)
	}
	efs.Add(errorfs.Rule{Op: errorfs.OpSync, Once: true})
	s.Cover("pg", 0, 5)
	if err := s.Flush(ctx); err == nil {
		t.Fatal("flush with failing fdatasync succeeded")
	}
	syncs := efs.Calls(errorfs.OpSync)
	s.Cover("pg", 5, 6)
	if err := s.Flush(ctx); err == nil {
		t.Fatal("store kept writing after a failed fdatasync")
	}
	if efs.Calls(errorfs.OpSync) != syncs {
		t.Fatal("fdatasync retried after failure")
	}
	if _, err := os.Stat(filepath.Join(dir, DefaultOffsetFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("offset file exists after failed first write: %v", err)
	}
}

func TestOffsetStoreCorrupt(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, _ := OpenOffsetStore(ctx, vfs.OS, dir)
	s.Cover("pg", 0, 5)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, DefaultOffsetFile)
	b, _ := os.ReadFile(p)
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenOffsetStore(ctx, vfs.OS, dir); !errors.Is(err, ErrCorruptOffsets) {
		t.Fatalf("corrupt file: %v", err)
	}
}
