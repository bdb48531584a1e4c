package memfs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
)

func mustCreate(t *testing.T, m *FS, name string, data string) vfs.File {
	t.Helper()
	f, err := m.Create(name, 0o600)
	if err != nil {
		t.Fatalf("Create(%s): %v", name, err)
	}
	if _, err := f.Write([]byte(data)); err != nil {
		t.Fatalf("Write(%s): %v", name, err)
	}
	return f
}

func read(t *testing.T, m *FS, name string) (string, bool) {
	t.Helper()
	f, err := m.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	if err != nil {
		t.Fatalf("Open(%s): %v", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("ReadAll(%s): %v", name, err)
	}
	return string(b), true
}

func names(t *testing.T, m *FS, dir string) []string {
	t.Helper()
	n, err := m.ReadDir(dir)
	if err != nil {
		t.Fatalf("ReadDir(%s): %v", dir, err)
	}
	return n
}

func drop(m *FS) *FS { return m.CrashClone(CrashOptions{Mode: CrashDropUnsynced}) }

func TestBasicIO(t *testing.T) {
	m := New()
	if err := m.MkdirAll("/a/b", 0o700); err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, m, "/a/b/f", "hello world")
	if _, err := m.Create("/a/b/f", 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second Create: %v, want ErrExist", err)
	}
	if _, err := m.Create("/nope/f", 0o600); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Create in missing dir: %v", err)
	}
	if _, err := f.Seek(6, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("WORLD!")); err != nil {
		t.Fatal(err)
	}
	if got, _ := read(t, m, "/a/b/f"); got != "hello WORLD!" {
		t.Fatalf("content %q", got)
	}
	buf := make([]byte, 5)
	if n, err := f.ReadAt(buf, 0); n != 5 || err != nil || string(buf) != "hello" {
		t.Fatalf("ReadAt: %d %v %q", n, err, buf)
	}
	if n, err := f.ReadAt(buf, 10); n != 2 || err != io.EOF {
		t.Fatalf("ReadAt at end: %d %v", n, err)
	}
	if err := f.Truncate(5); err != nil {
		t.Fatal(err)
	}
	if err := f.Preallocate(0, 1<<20); err != nil {
		t.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil || fi.Size() != 5 || fi.Name() != "f" {
		t.Fatalf("Stat: %v %v", fi, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	ro, err := m.Open("/a/b/f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Write([]byte("x")); err == nil {
		t.Fatal("write on a read-only file succeeded")
	}
	ro.Close()
	if err := m.Remove("/a/b"); err == nil {
		t.Fatal("removed a non-empty directory")
	}
	if got := names(t, m, "/a"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("ReadDir: %v", got)
	}
}

func TestCrashDropsUnsyncedData(t *testing.T) {
	m := New()
	if err := m.MkdirAll("/d", 0o700); err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, m, "/d/f", "durable")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	// Synced content, but the entry is not durable yet.
	if _, ok := read(t, drop(m), "/d/f"); ok {
		t.Fatal("file survived a crash before its directory was synced")
	}
	if m.IsDurable("/d/f") || m.EntryDurable("/d/f") {
		t.Fatal("IsDurable or EntryDurable before SyncDir")
	}
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	if !m.IsDurable("/d/f") {
		t.Fatal("not durable after Sync and SyncDir")
	}
	if _, err := f.Write([]byte("+volatile")); err != nil {
		t.Fatal(err)
	}
	if m.IsDurable("/d/f") || !m.EntryDurable("/d/f") {
		t.Fatal("IsDurable with unsynced data, or entry not durable")
	}
	c := drop(m)
	if got, _ := read(t, c, "/d/f"); got != "durable" {
		t.Fatalf("after crash: %q", got)
	}
	// The clone is independent and fully durable.
	if !c.IsDurable("/d/f") {
		t.Fatal("clone not durable")
	}
	if got, _ := read(t, m, "/d/f"); got != "durable+volatile" {
		t.Fatalf("original changed: %q", got)
	}
	// The original goes on working.
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got, _ := read(t, drop(m), "/d/f"); got != "durable+volatile" {
		t.Fatalf("after second sync: %q", got)
	}
}

func TestCrashUndoesDirectoryChanges(t *testing.T) {
	m := New()
	if err := m.MkdirAll("/d", 0o700); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"/d/a", "/d/b", "/d/c"} {
		f := mustCreate(t, m, n, n)
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	if err := m.Rename("/d/a", "/d/a2"); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove("/d/b"); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, m, "/d/new", "x").Sync()
	if got := names(t, m, "/d"); !slices.Equal(got, []string{"a2", "c", "new"}) {
		t.Fatalf("volatile entries: %v", got)
	}
	c := drop(m)
	if got := names(t, c, "/d"); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("entries after crash: %v", got)
	}
	if got, _ := read(t, c, "/d/a"); got != "/d/a" {
		t.Fatalf("renamed file after crash: %q", got)
	}
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	c = drop(m)
	if got := names(t, c, "/d"); !slices.Equal(got, []string{"a2", "c", "new"}) {
		t.Fatalf("entries after SyncDir and crash: %v", got)
	}
	// Keep-all keeps volatile entries and the durable state underneath.
	mustCreate(t, m, "/d/late", "late")
	k := m.CrashClone(CrashOptions{Mode: CrashKeepAll})
	if got := names(t, k, "/d"); !slices.Equal(got, []string{"a2", "c", "late", "new"}) {
		t.Fatalf("keep-all entries: %v", got)
	}
	if got := names(t, drop(k), "/d"); !slices.Equal(got, []string{"a2", "c", "new"}) {
		t.Fatalf("power loss after keep-all: %v", got)
	}
}

func TestMkdirAllIsDurable(t *testing.T) {
	m := New()
	if err := m.MkdirAll("/x/y/z", 0o700); err != nil {
		t.Fatal(err)
	}
	if !m.IsDurable("/x/y/z") {
		t.Fatal("MkdirAll result not durable")
	}
	if got := names(t, drop(m), "/x/y"); !slices.Equal(got, []string{"z"}) {
		t.Fatalf("after crash: %v", got)
	}
	mustCreate(t, m, "/x/f", "")
	if err := m.MkdirAll("/x/f", 0o700); err == nil {
		t.Fatal("MkdirAll over a file succeeded")
	}
}

func TestLocks(t *testing.T) {
	m := New()
	l, err := m.Lock("/LOCK")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lock("/LOCK"); !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("second Lock: %v", err)
	}
	if !m.Held("/LOCK") {
		t.Fatal("Held = false")
	}
	// A crash releases it (and the entry, never synced, is gone).
	c := m.CrashClone(CrashOptions{Mode: CrashKeepAll})
	l2, err := c.Lock("/LOCK")
	if err != nil {
		t.Fatalf("Lock on clone: %v", err)
	}
	l2.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l3, err := m.Lock("/LOCK")
	if err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	l3.Close()
}

func setupTail(t *testing.T) *FS {
	t.Helper()
	m := New()
	if err := m.MkdirAll("/d", 0o700); err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, m, "/d/f", string(bytes.Repeat([]byte("D"), 700)))
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bytes.Repeat([]byte("N"), 3000)); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCrashKeepPrefix(t *testing.T) {
	m := setupTail(t)
	lens := map[int]bool{}
	for seed := range uint64(50) {
		c := m.CrashClone(CrashOptions{Mode: CrashKeepPrefix, Rand: rand.NewPCG(seed, 1)})
		got, _ := read(t, c, "/d/f")
		if len(got) < 700 || len(got) > 3700 {
			t.Fatalf("length %d outside [700, 3700]", len(got))
		}
		want := strings700(700) + string(bytes.Repeat([]byte("N"), len(got)-700))
		if got != want {
			t.Fatalf("seed %d: content is not durable data plus a prefix of the tail", seed)
		}
		lens[len(got)] = true
	}
	if len(lens) < 10 {
		t.Fatalf("only %d distinct lengths in 50 crashes", len(lens))
	}
}

func strings700(n int) string { return string(bytes.Repeat([]byte("D"), n)) }

func TestCrashTornPages(t *testing.T) {
	m := setupTail(t)
	sawHole := false
	for seed := range uint64(100) {
		for _, junk := range []bool{false, true} {
			c := m.CrashClone(CrashOptions{Mode: CrashTornPages, Rand: rand.NewPCG(seed, 2), PageSize: 512, SectorSize: 64, Junk: junk})
			got, _ := read(t, c, "/d/f")
			if len(got) < 700 || len(got) > 3700 {
				t.Fatalf("length %d outside [700, 3700]", len(got))
			}
			// Durable bytes are never lost.
			if got[:700] != strings700(700) {
				t.Fatalf("seed %d: durable prefix damaged", seed)
			}
			// Every byte past it is new data or lost (zero unless junk).
			for i := 700; i < len(got); i++ {
				if got[i] != 'N' {
					if !junk && got[i] != 0 {
						t.Fatalf("seed %d: byte %d = %q, want N or 0", seed, i, got[i])
					}
					// a lost byte followed later by a new one: a hole
					if strings.IndexByte(got[i:], 'N') > 0 {
						sawHole = true
					}
					break
				}
			}
		}
	}
	if !sawHole {
		t.Fatal("no torn page left a hole before new data in 200 crashes")
	}
}

func TestCrashDeterministic(t *testing.T) {
	m := setupTail(t)
	for _, mode := range []CrashMode{CrashKeepPrefix, CrashTornPages} {
		a, _ := read(t, m.CrashClone(CrashOptions{Mode: mode, Rand: rand.NewPCG(7, 7), Junk: true, PageSize: 256}), "/d/f")
		b, _ := read(t, m.CrashClone(CrashOptions{Mode: mode, Rand: rand.NewPCG(7, 7), Junk: true, PageSize: 256}), "/d/f")
		if a != b {
			t.Fatalf("%v: same seed, different crash images", mode)
		}
	}
}

func TestRenameSyncedOnlyInTarget(t *testing.T) {
	// Synced content under a renamed name: power loss before SyncDir
	// brings back the old name with the synced content.
	m := New()
	if err := m.MkdirAll("/d", 0o700); err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, m, "/d/seg.wab", "records")
	f.Sync()
	m.SyncDir("/d")
	f.Write([]byte("+footer"))
	f.Sync()
	f.Close()
	if err := m.Rename("/d/seg.wab", "/d/seg.wab.sealed"); err != nil {
		t.Fatal(err)
	}
	c := drop(m)
	if got := names(t, c, "/d"); !slices.Equal(got, []string{"seg.wab"}) {
		t.Fatalf("entries: %v", got)
	}
	if got, _ := read(t, c, "/d/seg.wab"); got != "records+footer" {
		t.Fatalf("content: %q", got)
	}
	if gen := m.DurableGeneration(); gen == 0 {
		t.Fatal("DurableGeneration not bumped")
	}
	if files, dirs := m.Syncs(); files != 2 || dirs < 2 {
		t.Fatalf("Syncs = %d, %d", files, dirs)
	}
}

func TestParseCrashMode(t *testing.T) {
	for c := CrashDropUnsynced; c <= CrashKeepAll; c++ {
		got, err := ParseCrashMode(c.String())
		if err != nil || got != c {
			t.Fatalf("ParseCrashMode(%q) = %v, %v", c, got, err)
		}
	}
	if _, err := ParseCrashMode("bogus"); err == nil {
		t.Fatal("no error for a bogus mode")
	}
}
