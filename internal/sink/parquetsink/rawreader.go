package parquetsink

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
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
// It never creates, writes, renames or removes anything, and takes no
// lock: the directory belongs to the writer, which may turn a stage into
// Parquet or start a stage at any moment. A read that loses a stage to that
// rename lists the directory again.
//
// End re-derives the end from the directory on every call: the last
// file's first position plus its rows (a Parquet file's row count, or a
// stage's complete frames, counting only the frames added since the
// previous call). It counts what is on disk, not what the writer has
// acknowledged: a frame whose fdatasync has not returned yet (or failed) is
// counted too, and a crash of the writer can take it back, after which its
// positions go to other records. A caller must therefore bound its reads
// by an end the writer recorded after its durable ack (the fan-out takes
// min(End, the offset store's raw end)). Below that bound every position is
// immutable, so reads there are exact.
type RawReader struct {
	d rawDir

	mu   sync.Mutex // End
	tail tailCount  // what End counted in the last file
}

// tailCount is what End counted in the last file, the one starting at
// first: rows rows; for a stage, complete frames up to byte off, the last
// of them starting at byte last.
type tailCount struct {
	valid   bool
	first   uint64
	parquet bool
	rows    uint64
	off     int64
	last    int64
}

var _ sink.RawReader = (*RawReader)(nil)

// OpenRawReader opens a read-only view of the raw-mode directory dir
// (fsys nil means vfs.OS). The directory must exist; it may be empty (the
// writer has not committed anything yet). A directory holding only output
// written without raw mode is refused: it has no positions to read.
func OpenRawReader(fsys vfs.FS, dir string) (*RawReader, error) {
	fsys, dir, err := rawfiles.OpenDir(fsys, dir, rawfiles.Kind{
		Pkg: "parquetsink", Output: "Parquet sink output",
		Raw: func(n string) bool {
			_, _, ok := parseRawName(n)
			return ok || n == rawLockName
		},
		Plain: func(n string) bool {
			_, ok := parseName(n)
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

// Close releases the Parquet file the reader keeps open between reads.
// Reads after Close still work, but keep nothing open between them.
func (r *RawReader) Close() error { return r.d.close() }

// End implements sink.RawReader: one past the last complete row on disk
// (see RawReader for why a caller bounds it by the writer's acknowledged
// end).
func (r *RawReader) End(ctx context.Context) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var end uint64
	var err error
	for range readAttempts {
		if end, err = r.end(ctx); !errors.Is(err, iofs.ErrNotExist) {
			break
		}
	}
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
	if last.parquet {
		if !t.valid || t.first != last.first || !t.parquet {
			rows, err := parquetRows(r.d.fs, filepath.Join(r.d.dir, last.name))
			if err != nil {
				return 0, err
			}
			t = tailCount{valid: true, first: last.first, parquet: true, rows: uint64(rows)}
		}
		r.tail = t
		return t.first + t.rows, nil
	}
	path := filepath.Join(r.d.dir, last.name)
	f, err := r.d.fs.Open(path)
	if err != nil {
		return 0, fmt.Errorf("parquetsink: read %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("parquetsink: read %s: %w", path, err)
	}
	size := fi.Size()
	if !t.valid || t.first != last.first || t.parquet || t.rows == 0 || !stillThere(f, t, size) {
		// Count from the start: a new last file, or not the stage that
		// was counted (the writer replaced a stage it had abandoned).
		t = tailCount{valid: true, first: last.first, off: stageHeaderLen}
		if ok, err := hasMagic(f, size); err != nil || !ok {
			r.tail = tailCount{}
			return t.first, err // a stage being created: no rows yet
		}
	}
	for k := 0; ; k++ {
		if k%64 == 63 {
			if err := ctx.Err(); err != nil {
				return 0, fmt.Errorf("parquetsink: read %s: %w", path, err)
			}
		}
		fr, next, ok, err := frameAt(f, t.off, size)
		if err != nil {
			return 0, fmt.Errorf("parquetsink: read %s: %w", path, err)
		}
		if !ok {
			break
		}
		t.rows += uint64(len(fr.rows))
		t.last, t.off = t.off, next
	}
	r.tail = t
	return t.first + t.rows, nil
}

// stillThere reports whether the last frame End counted is still where it
// was, whole: the stage only grew since.
func stillThere(f vfs.File, t tailCount, size int64) bool {
	_, next, ok, err := frameAt(f, t.last, size)
	return err == nil && ok && next == t.off
}

// ReadFrom implements sink.RawReader: up to n records, holding up to
// maxBytes, from position from on, below End as of this call. Like End it
// sees rows the writer has not acknowledged yet; callers bound from and
// the records they use by the writer's acknowledged end.
func (r *RawReader) ReadFrom(ctx context.Context, from uint64, n int, maxBytes int64) ([]sink.Positioned, error) {
	end, err := r.End(ctx)
	if err != nil {
		return nil, err
	}
	return r.d.read(ctx, from, end, n, maxBytes)
}
