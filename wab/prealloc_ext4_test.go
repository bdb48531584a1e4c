package wab

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// loopExt4 makes a fresh ext4 file system of size bytes on a loop device
// and mounts it under a temporary directory, for the test's duration. It
// skips the test, saying why, where that is not possible.
func loopExt4(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: a loop-device ext4 file system needs root (losetup, mount)")
	}
	for _, tool := range []string{"losetup", "mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("SKIPPED: %s not found: %v", tool, err)
		}
	}
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Skipf("SKIPPED: %s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	tmp := t.TempDir()
	img, mnt := filepath.Join(tmp, "ext4.img"), filepath.Join(tmp, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err == nil {
		err = f.Truncate(size)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	run("mkfs.ext4", "-q", "-F", "-m", "0", img)
	dev := run("losetup", "--find", "--show", img)
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	run("mount", dev, mnt)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
			exec.Command("umount", "-l", mnt).Run()
		}
	})
	return mnt
}

// fillTo writes a ballast file until the file system under dir has about
// free bytes left.
func fillTo(t *testing.T, dir string, free int64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	avail := int64(st.Bavail) * st.Bsize
	if avail <= free {
		t.Fatalf("only %d bytes free, want more than %d", avail, free)
	}
	f, err := os.Create(filepath.Join(dir, "ballast"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for left := avail - free; left > 0; left -= int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(int64(len(chunk)), left)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d bytes free after the ballast", int64(st.Bavail)*st.Bsize)
}

// TestNearlyFullExt4 runs the write-ahead buffer with its default 64 MiB
// preallocation on a real ext4 file system with much less free than that:
// Durable pushes are stored (the reservation falls back, logged once), and
// when the disk is really full a push gets ErrDiskFull while the shard
// stays healthy. Every acknowledged record is there after a reopen.
func TestNearlyFullExt4(t *testing.T) {
	mnt := loopExt4(t, 160<<20)
	fillTo(t, mnt, 24<<20)
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
