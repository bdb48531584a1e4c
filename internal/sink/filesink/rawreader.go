package filesink

import (
	"context"
	"path/filepath"
	"sync"

	"github.com/weir-io/weir/internal/sink/rawfiles"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// RawReader is a read-only view of a raw-mode directory that another
// process writes (a recovery-only node reading an ingest node's primary
// raw). It implements sink.RawReader.
//
// It never creates, writes, truncates or renames anything: the directory
// belongs to the writer, which may finish (rename) or start files at any
// moment. A read that loses a file to a rename lists the directory again,
// as the Sink's own ReadFrom does.
//
// End re-derives the end from the directory on every call — the last
// file's first position plus its complete lines — so it follows the
// writer's progress. It counts what is on disk, not what the writer has
// acknowledged: complete lines of a batch whose fdatasync has not
// returned yet (or failed) are counted too, and a crash of the writer can
// still take them back, after which their positions go to other records.
// A caller must therefore bound its reads by an end the writer recorded
// after its durable ack — the fan-out takes min(End, the offset store's
// raw end), which only the writer advances. Below that bound every
// position is immutable, so reads there are exact.
type RawReader struct {
	d rawDir

	mu   sync.Mutex // End
	tail tailCount  // complete lines counted in the last file so far
}

// tailCount is how far End has counted the last file: n complete lines,
// the last of them ending at byte off, in the file starting at first.
type tailCount struct {
	valid bool
	first uint64
	off   int64
	n     uint64
}

var _ sink.RawReader = (*RawReader)(nil)

// OpenRawReader opens a read-only view of the raw-mode directory dir
// (fsys nil means vfs.OS). The directory must exist; it may be empty (the
// writer has not committed anything yet). A directory holding file-sink
// output written without raw mode is refused: it has no positions to read.
func OpenRawReader(fsys vfs.FS, dir string) (*RawReader, error) {
	fsys, dir, err := rawfiles.OpenDir(fsys, dir, rawfiles.Kind{
		Pkg: "filesink", Output: "file-sink output",
		Raw: func(n string) bool {
			_, _, ok := parseRawName(n)
			return ok
		},
		Plain: func(n string) bool {
			_, _, _, ok := parseName(n)
			return ok
		},
	})
	if err != nil {
		return nil, err
	}
	return &RawReader{d: rawDir{fs: fsys, dir: dir}}, nil
}

// Dir is the directory read.
func (r *RawReader) Dir() string { return r.d.dir }

// End implements sink.RawReader: one past the last complete line on disk
// (see RawReader for why a caller bounds it by the writer's acknowledged
// end). Each call lists the directory and counts only the lines written
// to the last file since the previous call.
func (r *RawReader) End(ctx context.Context) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var end uint64
	err := retryRenamed(func() (err error) {
		end, err = r.end(ctx)
		return err
	})
	if err != nil {
		return 0, err
	}
	return end, nil
}

func (r *RawReader) end(ctx context.Context) (uint64, error) {
	files, err := r.d.files()
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		r.tail = tailCount{}
		return 0, nil
	}
	last := files[len(files)-1]
	t := r.tail
	if !t.valid || t.first != last.first || !r.countedPrefixHolds(last.name, t.off) {
		t = tailCount{valid: true, first: last.first}
	}
	err = r.d.scan(ctx, last.name, t.off, func(next int64, _ []byte) bool {
		t.off, t.n = next, t.n+1
		return true
	})
	if err != nil {
		return 0, err
	}
	r.tail = t
	return t.first + t.n, nil
}

// countedPrefixHolds reports whether the file still ends a line at off:
// true unless the writer, restarting after a crash, cut a torn tail that
// End had counted. Then the file is counted again from its start.
func (r *RawReader) countedPrefixHolds(name string, off int64) bool {
	if off == 0 {
		return true
	}
	f, err := r.d.fs.Open(filepath.Join(r.d.dir, name))
	if err != nil {
		return false // renamed: the retry lists again
	}
	defer f.Close()
	var b [1]byte
	_, err = f.ReadAt(b[:], off-1)
	return err == nil && b[0] == '\n'
}

// ReadFrom implements sink.RawReader: up to max records, holding up to
// maxBytes, from position from on, below End as of this call. Like End it
// sees lines the writer has not acknowledged yet; callers bound from and
// the records they use by the writer's acknowledged end.
func (r *RawReader) ReadFrom(ctx context.Context, from uint64, max int, maxBytes int64) ([]sink.Positioned, error) {
	end, err := r.End(ctx)
	if err != nil {
		return nil, err
	}
	return r.d.read(ctx, from, end, max, maxBytes)
}
