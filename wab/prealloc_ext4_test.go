package wab

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/testenv"
)

// TestNearlyFullExt4 runs the write-ahead buffer with its default 64 MiB
// preallocation on a real ext4 file system with much less free than that:
// Durable pushes are stored (the reservation falls back, logged once), and
// when the disk is really full a push gets ErrDiskFull while the shard
// stays healthy. Every acknowledged record is there after a reopen. It
// needs root and the loop-device tools (testenv.LoopExt4): without them it
// skips, or fails under WEIR_REQUIRE_SERVICES=1.
func TestNearlyFullExt4(t *testing.T) {
	mnt := testenv.LoopExt4(t, 160<<20)
	testenv.FillTo(t, mnt, 24<<20)
	dir := filepath.Join(mnt, "wab")
	logs := &logRecorder{}
	o := Options{Dir: dir, Shards: 1, Logger: slog.New(logs), SegmentMaxAge: -1}
	l, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) }) // before the unmount, if the test fails
	small := []byte(strings.Repeat("s", 4<<10))
	acked := 0
	for i := range 200 {
		if err := submit(t, l, 0, Durable, int64(i), small); err != nil {
			t.Fatalf("Durable push %d with 24 MiB free and a 64 MiB preallocation: %v", i, err)
		}
		acked++
	}
	big := []byte(strings.Repeat("b", 1<<20))
	var full error
	for i := 0; i < 64 && full == nil; i++ {
		if full = submit(t, l, 0, Durable, int64(1000+i), big); full == nil {
			acked++
		}
	}
	if !errors.Is(full, ErrDiskFull) || errors.Is(full, ErrShardFailed) {
		t.Fatalf("push on a full disk: %v, want ErrDiskFull with the shard healthy", full)
	}
	if err := submit(t, l, 0, Durable, 2000, []byte("still fits")); err != nil {
		t.Fatalf("small push after ErrDiskFull: %v", err)
	}
	acked++
	if n := logs.count(slog.LevelWarn, "disk nearly full"); n != 1 {
		t.Fatalf("fallback logged %d times at warn, want once", n)
	}
	mustClose(t, l)
	l = mustOpen(t, Options{Dir: dir, Shards: 1, SegmentMaxAge: -1, PreallocateBytes: -1})
	mustClose(t, l)
	if n := len(readAllSealed(t, nil, dir)); n != acked {
		t.Fatalf("%d records after reopen, %d acknowledged", n, acked)
	}
}

// TestNearlyFullExt4TwoShards opens two shards, each wanting a 64 MiB
// reservation, with 20 MiB free: the first shard's failed attempts at a
// full chunk must not keep the space ext4 found for them, or the second
// shard cannot even write its segment's header and refuses every push.
// Both shards store a Durable push, and the disk is not left full.
func TestNearlyFullExt4TwoShards(t *testing.T) {
	mnt := testenv.LoopExt4(t, 64<<20)
	testenv.FillTo(t, mnt, 20<<20)
	dir := filepath.Join(mnt, "wab")
	l := mustOpen(t, Options{Dir: dir, Shards: 2, SegmentMaxAge: -1})
	t.Cleanup(func() { l.Close(context.Background()) }) // before the unmount, if the test fails
	for shard := range 2 {
		if err := submit(t, l, shard, Durable, int64(shard), []byte("fits")); err != nil {
			t.Fatalf("shard %d: a small Durable push with 20 MiB free: %v", shard, err)
		}
	}
	if free := testenv.FreeBytes(t, mnt); free < 64<<10 {
		t.Fatalf("%d bytes free with both shards open: the reservations took the whole disk", free)
	}
	mustClose(t, l)
}
