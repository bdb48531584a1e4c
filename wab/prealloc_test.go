package wab

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
)

// logRecorder is a slog.Handler that keeps every record's level and message.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Level.String()+" "+r.Message)
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// count is how many records were logged at level whose message contains s.
func (h *logRecorder) count(level slog.Level, s string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if strings.HasPrefix(m, level.String()+" ") && strings.Contains(m, s) {
			n++
		}
	}
	return n
}

// preallocRecorder is an Observer that also records preallocation changes.
type preallocRecorder struct {
	recorder
	chunks []int64
}

func (r *preallocRecorder) Preallocation(shard int, want, chunk int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.chunks = append(r.chunks, chunk)
}

func (r *preallocRecorder) seen() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.chunks...)
}

// TestPreallocFallback: with less free space than a preallocation chunk
// (fallocate fails above some size), Durable pushes are still stored: the
// reservation falls back to a smaller chunk, or to just what each batch
// needs, logged once; once space is back, a new segment gets a full chunk
// again. Before, every push was answered ErrDiskFull.
func TestPreallocFallback(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name      string
		free      int64 // fallocate fails above this many bytes
		wantChunk int64
	}{
		{"halved", 3 * mib, 2 * mib},
		{"below the floor", 100 << 10, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			efs := errorfs.New(vfs.OS, errorfs.Rule{Op: errorfs.OpPreallocate, Path: "*.wab", Larger: c.free, Errno: syscall.ENOSPC})
			logs := &logRecorder{}
			obs := &preallocRecorder{}
			o := testOpts(dir)
			o.FS, o.Logger, o.Observer = efs, slog.New(logs), obs
			o.PreallocateBytes, o.SegmentMaxBytes = 8*mib, 8*mib
			l := mustOpen(t, o)
			payload := []byte(strings.Repeat("p", 60<<10))
			// About 1.5 segments: several reservations, one seal, one new
			// segment that tries (and fails) a full chunk again.
			for i := range 200 {
				if err := submit(t, l, 0, Durable, int64(i), payload); err != nil {
					t.Fatalf("push %d with %d bytes free for preallocation: %v", i, c.free, err)
				}
			}
			if got := obs.seen(); len(got) != 1 || got[0] != c.wantChunk {
				t.Fatalf("preallocation changes %v, want [%d]", got, c.wantChunk)
			}
			if n := logs.count(slog.LevelWarn, "disk nearly full"); n != 1 {
				t.Fatalf("fallback logged %d times at warn, want once", n)
			}
			// Space is back: the next segment reserves a full chunk.
			efs.Clear()
			for i := range 150 {
				if err := submit(t, l, 0, Durable, int64(1000+i), payload); err != nil {
					t.Fatal(err)
				}
			}
			if got := obs.seen(); len(got) != 2 || got[1] != 8*mib {
				t.Fatalf("preallocation changes %v, want back to %d", got, 8*mib)
			}
			if n := logs.count(slog.LevelInfo, "full chunks again"); n != 1 {
				t.Fatalf("return to full chunks logged %d times, want once", n)
			}
			mustClose(t, l)
			if n := len(readAllSealed(t, nil, dir)); n != 350 {
				t.Fatalf("%d records stored, want 350", n)
			}
		})
	}
}

// TestPreallocStillDiskFull: when not even a batch's own bytes can be
// reserved, the batch fails with ErrDiskFull before anything is written,
// and the shard goes on once space is back.
func TestPreallocStillDiskFull(t *testing.T) {
	dir := t.TempDir()
	efs := errorfs.New(vfs.OS)
	o := testOpts(dir)
	o.FS = efs
	l := mustOpen(t, o)
	if err := submit(t, l, 0, Durable, 1, []byte("before")); err != nil {
		t.Fatal(err)
	}
	efs.Add(errorfs.Rule{Op: errorfs.OpPreallocate, Path: "*.wab", Larger: 1000, Errno: syscall.ENOSPC})
	big := []byte(strings.Repeat("b", 2<<20)) // more than the 1 MiB reserved
	err := submit(t, l, 0, Durable, 2, big)
	if !errors.Is(err, ErrDiskFull) || errors.Is(err, ErrShardFailed) {
		t.Fatalf("push needing more than the disk holds: %v, want ErrDiskFull and a healthy shard", err)
	}
	if err := submit(t, l, 0, Durable, 3, []byte("small, fits the reservation")); err != nil {
		t.Fatal(err)
	}
	efs.Clear()
	if err := submit(t, l, 0, Durable, 4, big); err != nil {
		t.Fatalf("after space is back: %v", err)
	}
	done := make(chan struct{})
	go func() { mustClose(t, l); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung")
	}
	if n := len(readAllSealed(t, nil, dir)); n != 3 {
		t.Fatalf("%d records stored, want 3", n)
	}
}

// ext4File is a file on a disk with free bytes left that behaves as the
// real vfs does on ext4: a reservation that runs out of space releases
// every reservation past the end of the file.
type ext4File struct {
	vfs.File
	size, reserved, free int64
}

func (f *ext4File) Preallocate(off, n int64) error {
	start := max(f.reserved, f.size)
	if grow := off + n - start; grow > f.free {
		f.free += start - f.size // ext4 kept what it found; the truncate frees it all
		f.reserved = f.size
		return &os.PathError{Op: "fallocate", Path: "seg", Err: syscall.ENOSPC}
	} else if grow > 0 {
		f.free -= grow
		f.reserved = off + n
	}
	return nil
}

// TestPreallocAfterRelease: a reservation that runs out of space on a
// file system that then releases everything past the end of the file
// reserves again from there — the old reservation with a smaller chunk —
// and when nothing larger fits, makes the old reservation again (the room
// for the footer of a segment's records is in it), never leaving less
// than before.
func TestPreallocAfterRelease(t *testing.T) {
	l := mustOpen(t, Options{Dir: t.TempDir(), Shards: 1, SegmentMaxAge: -1})
	defer mustClose(t, l)
	s := l.shards[0]
	const eof, old = 1000, 1000 + 4<<20 // written up to eof, reserved up to old
	for _, tc := range []struct {
		name      string
		free      int64
		need      int64
		wantEnd   int64
		wantError bool
	}{
		{"a smaller chunk fits once the old reservation is freed", 3 << 19, 0, old + 1<<20, false},
		{"nothing more fits: the old reservation is made again", 0, 0, old, false},
		{"the batch's own bytes do not fit: the old reservation is made again", 0, 100, old, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &ext4File{size: eof, reserved: old, free: tc.free}
			s.own.Lock() // the shard's state, beside its flusher
			end, err := s.preallocate(f, "seg", eof, old, 64<<20, tc.need)
			s.own.Unlock()
			if end != tc.wantEnd || f.reserved != tc.wantEnd || (err != nil) != tc.wantError {
				t.Fatalf("reservation ends at %d (the file's at %d), error %v; want %d, error: %v", end, f.reserved, err, tc.wantEnd, tc.wantError)
			}
			if tc.wantError && !isDiskFull(err) {
				t.Fatalf("error %v, want a disk-full one", err)
			}
		})
	}
}

// TestNoSegmentAheadWithoutAFullChunk: a shard makes its next segment
// ahead of work (at start, after a seal) only with a full chunk. On a
// disk that cannot hold one, an empty segment would keep what it reserved
// for as long as no record comes — space the drain needs to deliver what
// is stored, and so to free it — so the segment is left for the next
// batch, which falls back to less; with room, it is there ahead.
func TestNoSegmentAheadWithoutAFullChunk(t *testing.T) {
	for _, full := range []bool{true, false} {
		t.Run(map[bool]string{true: "disk nearly full", false: "room"}[full], func(t *testing.T) {
			dir := t.TempDir()
			efs := errorfs.New(vfs.OS)
			if full {
				efs.Add(errorfs.Rule{Op: errorfs.OpPreallocate, Path: "*.wab", Larger: 1 << 20, Errno: syscall.ENOSPC})
			}
			o := testOpts(dir)
			o.FS, o.PreallocateBytes, o.SegmentMaxAge = efs, 4<<20, 50*time.Millisecond
			l := mustOpen(t, o)
			defer mustClose(t, l)
			open := func() int {
				m, _ := filepath.Glob(filepath.Join(dir, ShardDirName(0), "*.wab"))
				return len(m)
			}
			sealed := func() int {
				m, _ := filepath.Glob(filepath.Join(dir, ShardDirName(0), "*.wab.sealed"))
				return len(m)
			}
			time.Sleep(100 * time.Millisecond) // the flusher has started
			if got, want := open(), map[bool]int{true: 0, false: 1}[full]; got != want {
				t.Fatalf("%d open segments at start, want %d", got, want)
			}
			if err := submit(t, l, 0, Durable, 1, []byte("a record")); err != nil {
				t.Fatalf("a small push: %v", err)
			}
			waitFor(t, "the segment to be sealed by age", func() bool { return sealed() == 1 })
			time.Sleep(100 * time.Millisecond)
			if got, want := open(), map[bool]int{true: 0, false: 1}[full]; got != want {
				t.Fatalf("%d open segments after the seal, want %d", got, want)
			}
			if err := submit(t, l, 0, Durable, 2, []byte("the next record")); err != nil {
				t.Fatalf("a small push after the seal: %v", err)
			}
		})
	}
}
