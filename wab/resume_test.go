package wab

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
)

func TestProgressSidecar(t *testing.T) {
	dir := t.TempDir()
	seg := filepath.Join(dir, SegmentName(3)+".sealed")
	if p, err := ReadProgress(vfs.OS, seg); err != nil || p != (Progress{}) {
		t.Fatalf("no sidecar: %+v, %v", p, err)
	}
	efs := errorfs.New(vfs.OS)
	want := Progress{Records: 1 << 33, Offset: 1 << 40}
	if err := WriteProgress(efs, seg, want); err != nil {
		t.Fatal(err)
	}
	if efs.CallsOn(errorfs.OpSync, ConfirmedPath(seg)+".tmp") != 1 || efs.CallsOn(errorfs.OpSyncDir, dir) != 1 {
		t.Fatal("sidecar not written durably")
	}
	if p, err := ReadProgress(vfs.OS, seg); err != nil || p != want {
		t.Fatalf("ReadProgress = %+v, %v; want %+v", p, err, want)
	}
	if n, err := ReadConfirmed(vfs.OS, seg); err != nil || n != want.Records {
		t.Fatalf("ReadConfirmed of a version-2 sidecar = %d, %v", n, err)
	}
	// Version 1 (count only) still reads, with no offset.
	if err := WriteConfirmed(vfs.OS, seg, 12); err != nil {
		t.Fatal(err)
	}
	if p, err := ReadProgress(vfs.OS, seg); err != nil || p != (Progress{Records: 12}) {
		t.Fatalf("version-1 sidecar: %+v, %v", p, err)
	}
	if err := WriteProgress(vfs.OS, seg, Progress{Records: 1, Offset: 10}); err == nil {
		t.Fatal("offset inside the header accepted")
	}
	// An unknown version, with a valid CRC, is refused.
	if err := WriteProgress(vfs.OS, seg, want); err != nil {
		t.Fatal(err)
	}
	side := ConfirmedPath(seg)
	b, _ := os.ReadFile(side)
	binary.BigEndian.PutUint32(b[8:], 3)
	binary.BigEndian.PutUint32(b[28:], crc(b[:28]))
	os.WriteFile(side, b, 0o600)
	var ce *CorruptionError
	if _, err := ReadProgress(vfs.OS, seg); !errors.As(err, &ce) || !strings.Contains(err.Error(), "version 3") {
		t.Fatalf("version-3 sidecar: %v", err)
	}
}

func TestReaderSkipTo(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, testOpts(dir))
	for i := range 6 {
		if err := submit(t, l, 0, Durable, int64(100+i), []byte(strings.Repeat("s", i+1))); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, l)
	path := filepath.Join(dir, "shard-000", SegmentName(1)+".sealed")
	offs := frameOffsets(t, path)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	footer := fi.Size() - FooterFrameSize
	for _, idx := range []int{0, 3, 5, 6} {
		r, err := OpenSegment(vfs.OS, path)
		if err != nil {
			t.Fatal(err)
		}
		off := footer
		if idx < 6 {
			off = offs[idx]
		}
		if err := r.SkipTo(uint64(idx), off); err != nil {
			t.Fatalf("SkipTo(%d, %d): %v", idx, off, err)
		}
		n := idx
		for {
			rec, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("after SkipTo(%d): %v", idx, err)
			}
			if len(rec.Payload) != n+1 || rec.Durability != Durable {
				t.Fatalf("after SkipTo(%d): record %d is %q (%d)", idx, n, rec.Payload, rec.Durability)
			}
			n++
		}
		if ft, ok := r.Footer(); !ok || ft.Records != 6 || n != 6 {
			t.Fatalf("after SkipTo(%d): footer %+v %v, %d records", idx, ft, ok, n)
		}
		r.Close()
	}
	r, err := OpenSegment(vfs.OS, path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, off := range []int64{0, offs[2] + 1, footer + 1, footer + FooterFrameSize} {
		if err := r.SkipTo(2, off); err == nil {
			t.Fatalf("SkipTo(2, %d) accepted", off)
		}
	}
	// A failed SkipTo leaves the reader at the start.
	if rec, err := r.Next(); err != nil || string(rec.Payload) != "s" {
		t.Fatalf("after failed SkipTo: %q, %v", rec.Payload, err)
	}
	if err := r.SkipTo(3, offs[3]); err == nil {
		t.Fatal("SkipTo after Next accepted")
	}
}

// TestOpenReadsOnlyFooters: Open checks a sealed segment by its header and
// footer, whatever its size; before, it read every sealed byte.
func TestOpenReadsOnlyFooters(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	l := mustOpen(t, o)
	payload := []byte(strings.Repeat("r", 64<<10))
	for i := range 64 {
		if err := submit(t, l, 0, Buffered, int64(i), payload); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, l)
	path := filepath.Join(dir, "shard-000", SegmentName(1)+".sealed")
	efs := errorfs.New(vfs.OS)
	o.FS = efs
	l = mustOpen(t, o)
	mustClose(t, l)
	if n := efs.CallsOn(errorfs.OpRead, path); n > 2 {
		t.Fatalf("Open made %d reads of a 4 MiB sealed segment, want at most 2 (header and footer)", n)
	}
	if got := len(readAllSealed(t, nil, dir)); got != 64 {
		t.Fatalf("%d records, want 64", got)
	}
}
