package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
)

// failingPersister fails every Update after its merge ran, as a write
// that did not reach the disk.
type failingPersister struct {
	OffsetPersister
	fail atomic.Bool
}

func (p *failingPersister) Update(ctx context.Context, merge func(*OffsetState) (*OffsetState, error)) error {
	if !p.fail.Load() {
		return p.OffsetPersister.Update(ctx, merge)
	}
	return p.OffsetPersister.Update(ctx, func(st *OffsetState) (*OffsetState, error) {
		if _, err := merge(st); err != nil {
			return nil, err
		}
		return nil, errors.New("disk said no")
	})
}

// A CoverFenced whose write failed leaves memory without the span, so a
// later Flush cannot write it either.
func TestOffsetStoreCoverFencedFailedWrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := &failingPersister{OffsetPersister: &offsetFile{fs: vfs.OS, dir: dir, path: filepath.Join(dir, DefaultOffsetFile)}}
	s, err := NewOffsetStore(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	f := Fence{"pg/0", 3}
	if err := s.Enter(ctx, f); err != nil {
		t.Fatal(err)
	}
	p.fail.Store(true)
	if err := s.CoverFenced(ctx, "pg", 0, 10, f); err == nil || errors.Is(err, ErrFenced) {
		t.Fatalf("CoverFenced with a failing write: %v", err)
	}
	if err := s.Enter(ctx, Fence{"pg/1", 9}); err == nil {
		t.Fatal("Enter with a failing write succeeded")
	}
	p.fail.Store(false)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r, _ := OpenOffsetStore(ctx, vfs.OS, dir)
	if c := r.Coverage("pg"); c.Contains(0) {
		t.Fatalf("a failed CoverFenced reached the file through Flush: %v", &c)
	}
	if r.fences["pg/1"] != 0 {
		t.Fatal("a failed Enter reached the file through Flush")
	}
}

// A file in the format before fences (WEIROFF1) is read, and the next
// write turns it into the current one.
func TestOffsetStoreReadsV1(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := []byte(offsetMagicV1)
	b = binary.AppendUvarint(b, 1) // one cursor
	b = binary.AppendUvarint(b, 3)
	b = append(b, "src"...)
	b = binary.AppendUvarint(b, 2)
	b = append(b, "c1"...)
	b = binary.AppendUvarint(b, 1) // one sink
	b = binary.AppendUvarint(b, 2)
	b = append(b, "pg"...)
	set := SpanSet{}
	set.Add(0, 42)
	b, _ = set.AppendBinary(b)
	b = binary.BigEndian.AppendUint64(b, 50)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	path := filepath.Join(dir, DefaultOffsetFile)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenOffsetStore(ctx, vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	if c := s.Coverage("pg"); c.String() != "{[0,42)}" || s.RawEnd() != 50 {
		t.Fatalf("v1 file read as coverage %v raw end %d", &c, s.RawEnd())
	}
	if cur, _ := s.Load(ctx, "src"); string(cur) != "c1" {
		t.Fatalf("v1 cursor %q", cur)
	}
	if err := s.Enter(ctx, Fence{"pg/0", 1}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if string(got[:len(offsetMagic)]) != offsetMagic {
		t.Fatalf("rewritten with magic %q", got[:len(offsetMagic)])
	}
	r, err := OpenOffsetStore(ctx, vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Coverage("pg"); c.String() != "{[0,42)}" || r.fences["pg/0"] != 1 {
		t.Fatalf("after rewrite: coverage %v fences %v", &c, r.fences)
	}
}
