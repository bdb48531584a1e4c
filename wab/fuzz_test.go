package wab

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs"
)

// memFS serves one read-only in-memory file, enough for the reader.
type memFS struct {
	vfs.FS // nil: anything but Open panics
	data   []byte
}

func (m memFS) Open(name string) (vfs.File, error) {
	return &memFile{Reader: bytes.NewReader(m.data), name: name, size: int64(len(m.data))}, nil
}

type memFile struct {
	*bytes.Reader
	name string
	size int64
}

func (f *memFile) Write([]byte) (int, error)               { return 0, fs.ErrPermission }
func (f *memFile) Close() error                            { return nil }
func (f *memFile) Sync() error                             { return nil }
func (f *memFile) Truncate(int64) error                    { return fs.ErrPermission }
func (f *memFile) Preallocate(int64, int64) error          { return nil }
func (f *memFile) Birth() time.Time                        { return time.Time{} }
func (f *memFile) Name() string                            { return f.name }
func (f *memFile) Stat() (os.FileInfo, error)              { return memInfo{f.name, f.size}, nil }
func (f *memFile) ReadAt(p []byte, off int64) (int, error) { return f.Reader.ReadAt(p, off) }

type memInfo struct {
	name string
	size int64
}

func (i memInfo) Name() string       { return filepath.Base(i.name) }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) Mode() fs.FileMode  { return 0o600 }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return false }
func (i memInfo) Sys() any           { return nil }

// fuzzSeeds builds valid and damaged segments.
func fuzzSeeds() [][]byte {
	hdr := make([]byte, HeaderSize)
	encodeHeader(hdr, Header{Version: Version, Shard: 1, Seq: 2, UID: 3, Created: 4})
	open := append([]byte(nil), hdr...)
	open = appendRecord(open, Durable, 10, nil, []byte("hello"))
	open = appendRecord(open, Buffered, 11, []byte("meta"), []byte("world"))
	open = appendRecord(open, Durable, 12, nil, nil)
	sealed := appendFooter(append([]byte(nil), open...), Footer{Records: 3, FirstReceived: 10, LastReceived: 12})
	flipped := append([]byte(nil), sealed...)
	flipped[HeaderSize+25] ^= 1
	hugeLen := append([]byte(nil), hdr...)
	hugeLen = append(hugeLen, 0xff, 0xff, 0xff, 0xf0, 0, 0, 0, 0)
	shortLen := append([]byte(nil), hdr...)
	shortLen = append(shortLen, 0, 0, 0, 3, 0, 0, 0, 0, 1, 2, 3)
	// A segment with sync marks: a marked first record, a mark frame.
	marked := make([]byte, HeaderSize)
	encodeHeader(marked, Header{Version: Version, Shard: 1, Seq: 2, UID: 3, Created: 4, Flags: FlagSyncMarks})
	marked = appendMarkedRecord(marked, Durable, 10, nil, []byte("hello"))
	marked = appendRecord(marked, Buffered, 11, nil, []byte("world"))
	marked = appendMark(marked)
	marked = appendMarkedRecord(marked, Durable, 12, []byte("m"), []byte("again"))
	markedSealed := appendFooter(append([]byte(nil), marked...), Footer{Records: 3, FirstReceived: 10, LastReceived: 12})
	markedDamaged := append([]byte(nil), markedSealed...)
	markedDamaged[HeaderSize+FrameOverhead+2] ^= 1
	return [][]byte{
		nil,
		hdr,
		open,
		sealed,
		sealed[:len(sealed)-3],
		open[:len(open)-7],
		flipped,
		append(append([]byte(nil), sealed...), 0),
		hugeLen,
		shortLen,
		append(append([]byte(nil), open...), make([]byte, 64)...),
		marked,
		markedSealed,
		markedDamaged,
	}
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzReader when
// WAB_WRITE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("WAB_WRITE_CORPUS") != "1" {
		t.Skip("set WAB_WRITE_CORPUS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzReader")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range fuzzSeeds() {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func FuzzReader(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, name := range []string{"x.wab", "x.wab.sealed"} {
			fsys := memFS{data: data}
			r, err := OpenSegment(fsys, name)
			if err != nil {
				var ce *CorruptionError
				if !errors.As(err, &ce) {
					t.Fatalf("header error is not a CorruptionError: %v", err)
				}
				continue
			}
			// Each record takes at least FrameOverhead bytes, so this bounds
			// the loop; more iterations would mean a hang.
			limit := len(data)/FrameOverhead + 2
			last := r.Offset()
			for i := 0; ; i++ {
				if i > limit {
					t.Fatalf("%s: more than %d records from %d bytes", name, limit, len(data))
				}
				rec, err := r.Next()
				if cap(r.buf) > len(data) {
					t.Fatalf("%s: buffer of %d bytes for %d bytes of input", name, cap(r.buf), len(data))
				}
				if err != nil {
					var ce *CorruptionError
					if !errors.Is(err, io.EOF) && !errors.As(err, &ce) {
						t.Fatalf("%s: unexpected error %v", name, err)
					}
					if ce != nil && (ce.Offset < HeaderSize || ce.Offset > int64(len(data))) {
						t.Fatalf("%s: corruption offset %d outside file", name, ce.Offset)
					}
					if _, again := r.Next(); again == nil {
						t.Fatalf("%s: Next after %v returned a record", name, err)
					}
					break
				}
				if r.Offset() <= last || r.Offset() > int64(len(data)) {
					t.Fatalf("%s: offset went from %d to %d", name, last, r.Offset())
				}
				// Sync mark frames (FrameOverhead bytes each) may precede a record.
				if gap := r.Offset() - last - int64(len(rec.Payload)+len(rec.Meta)+FrameOverhead); gap < 0 || gap%FrameOverhead != 0 {
					t.Fatalf("%s: record size does not match offsets", name)
				}
				last = r.Offset()
			}
			r.Close()
			info, err := InspectSegment(fsys, name)
			if err != nil {
				t.Fatalf("InspectSegment: %v", err)
			}
			if info.RecordsEnd > int64(len(data)) {
				t.Fatalf("RecordsEnd %d past end", info.RecordsEnd)
			}
		}
	})
}
