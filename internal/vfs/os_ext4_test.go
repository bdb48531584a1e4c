package vfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/internal/vfs"
)

// TestPreallocateENOSPCReleases asks a real ext4 file system, with about
// 8 MiB free, for a 64 MiB reservation: the call fails with ENOSPC and
// leaves the disk no fuller than before it — ext4 keeps the blocks a
// failed fallocate found, which would leave nothing for anyone else (a
// directory, another segment, a sink's file) — and the file's bytes as
// they were. A smaller reservation then succeeds.
func TestPreallocateENOSPCReleases(t *testing.T) {
	mnt := testenv.LoopExt4(t, 48<<20)
	testenv.FillTo(t, mnt, 8<<20)
	f, err := vfs.OS.Create(filepath.Join(mnt, "seg"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("header")); err != nil {
		t.Fatal(err)
	}
	if err := f.Preallocate(0, 1<<20); err != nil {
		t.Fatal(err)
	}
	before := testenv.FreeBytes(t, mnt)
	err = f.Preallocate(1<<20, 64<<20)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a 64 MiB reservation with %d bytes free: %v, want ENOSPC", before, err)
	}
	if after := testenv.FreeBytes(t, mnt); after < before {
		t.Fatalf("%d bytes free before the failed reservation, %d after: it kept what it found", before, after)
	}
	if err := f.Preallocate(0, 4<<20); err != nil {
		t.Fatalf("a 4 MiB reservation after the failed one: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "seg")); err != nil || string(b) != "header" {
		t.Fatalf("file content %q, %v", b, err)
	}
}
