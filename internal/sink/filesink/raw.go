package filesink

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// rawPrefix starts every raw-mode file name.
const rawPrefix = "raw-"

// ErrNotRaw is returned by the raw methods of a sink opened without
// Options.Positions.
var ErrNotRaw = errors.New("filesink: sink is not in raw (positions) mode")

func rawBase(first uint64) string { return fmt.Sprintf("%s%020d", rawPrefix, first) }

// parseRawName splits raw-<first><suffix>.
func parseRawName(name string) (first uint64, suffix string, ok bool) {
	for _, suf := range []string{SuffixOpen, SuffixFailed, SuffixDone} {
		if strings.HasSuffix(name, suf) {
			suffix = suf
			break
		}
	}
	if suffix == "" || !strings.HasPrefix(name, rawPrefix) {
		return 0, "", false
	}
	mid := strings.TrimSuffix(strings.TrimPrefix(name, rawPrefix), suffix)
	if len(mid) != 20 {
		return 0, "", false
	}
	n, err := strconv.ParseUint(mid, 10, 64)
	if err != nil {
		return 0, "", false
	}
	return n, suffix, true
}

type rawFile struct {
	name  string
	first uint64
}

// rawDir reads a raw-mode directory: it lists the files, scans them and
// serves reads by position. It never writes. The Sink reads its own
// directory through one; a RawReader reads another process's.
type rawDir struct {
	fs  vfs.FS
	dir string

	mu   sync.Mutex // one read at a time: hint
	hint readHint   // where the last read stopped
}

// files lists the readable raw files (finished and open), by first
// position.
func (d *rawDir) files() ([]rawFile, error) {
	names, err := d.fs.ReadDir(d.dir)
	if err != nil {
		return nil, fmt.Errorf("filesink: list %s: %w", d.dir, err)
	}
	var out []rawFile
	for _, n := range names {
		first, suffix, ok := parseRawName(n)
		if !ok || suffix == SuffixFailed {
			continue
		}
		out = append(out, rawFile{n, first})
	}
	// Names sort by first position already (fixed width), and one first
	// position has one file, .open or finished.
	return out, nil
}

// renameRetries bounds how often a listing is redone because a file was
// renamed (finished, .open → .ndjson) between the listing and its open.
// A writer that rolls small files quickly can win that race several times
// in a row against a reader on a busy machine; each retry lists again, so
// the bound only keeps a reader from spinning on a directory that
// changes without end.
const renameRetries = 100

// retryRenamed runs fn, which lists the directory and opens files from
// the listing, again while it fails because a listed file is gone: the
// writer finished (renamed) it under us, and a fresh listing finds it.
func retryRenamed(fn func() error) error {
	var err error
	for range renameRetries {
		if err = fn(); !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return err
}

// recoverEnd derives the end position from the last file after recovery
// has finished every .open file.
func (s *Sink) recoverEnd(ctx context.Context) error {
	files, err := s.raw.files()
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return nil
	}
	last := files[len(files)-1]
	n := uint64(0)
	err = s.raw.scan(ctx, last.name, 0, func(int64, []byte) bool { n++; return true })
	if err != nil {
		return err
	}
	s.end.Store(last.first + n)
	s.logger.Info("raw end recovered", "file", last.name, "end", last.first+n)
	return nil
}

// scan calls fn with each complete line of the named file from byte offset
// off (and the offset of the line after it) until fn returns false.
func (d *rawDir) scan(ctx context.Context, name string, off int64, fn func(next int64, line []byte) bool) error {
	path := filepath.Join(d.dir, name)
	f, err := d.fs.Open(path)
	if err != nil {
		return fmt.Errorf("filesink: read %s: %w", path, err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(io.NewSectionReader(f, off, 1<<62), 1<<16)
	for i := 0; ; i++ {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("filesink: read %s: %w", path, err)
			}
		}
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: collect it.
			buf := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.ReadSlice('\n')
				buf = append(buf, line...)
			}
			line = buf
		}
		if len(line) == 0 || line[len(line)-1] != '\n' {
			if err == nil || errors.Is(err, io.EOF) {
				return nil // end of file, or a line still being written
			}
			return fmt.Errorf("filesink: read %s: %w", path, err)
		}
		off += int64(len(line))
		if !fn(off, line[:len(line)-1]) {
			return nil
		}
	}
}

// readHint is where the last ReadFrom stopped: the next position after it
// lives at byte off of the file whose first position is first.
type readHint struct {
	valid bool
	first uint64
	pos   uint64
	off   int64
}

// CommitRaw implements sink.Raw: Commit, also returning the position of
// the batch's first record.
func (s *Sink) CommitRaw(ctx context.Context, b sink.Batch) (sink.CommitResult, uint64, error) {
	if !s.opts.Positions {
		return sink.CommitResult{}, 0, sink.Permanent(ErrNotRaw)
	}
	return s.commitLocked(ctx, b)
}

// End implements sink.Raw.
func (s *Sink) End(context.Context) (uint64, error) {
	if !s.opts.Positions {
		return 0, ErrNotRaw
	}
	return s.end.Load(), nil
}

// Replayable implements sink.Raw: true in raw mode.
func (s *Sink) Replayable() bool { return s.opts.Positions }

// ReadFrom implements sink.Raw. It may run concurrently with Commit; it
// never returns a position at or past the end that was acknowledged when
// it started.
func (s *Sink) ReadFrom(ctx context.Context, from uint64, max int, maxBytes int64) ([]sink.Positioned, error) {
	if !s.opts.Positions {
		return nil, ErrNotRaw
	}
	return s.raw.read(ctx, from, s.end.Load(), max, maxBytes)
}

// read returns up to max records, holding up to maxBytes (see
// sink.RawReader), from position from on and below end. It parses no line
// past the first one it refuses.
func (d *rawDir) read(ctx context.Context, from, end uint64, max int, maxBytes int64) ([]sink.Positioned, error) {
	if from >= end || max <= 0 {
		return nil, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []sink.Positioned
	err := retryRenamed(func() (err error) {
		lim := sink.NewReadLimit(max, maxBytes)
		out, err = d.readFrom(ctx, from, end, &lim)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (d *rawDir) readFrom(ctx context.Context, from, end uint64, lim *sink.ReadLimit) ([]sink.Positioned, error) {
	files, err := d.files()
	if err != nil {
		return nil, err
	}
	i := 0
	for j := range files {
		if files[j].first <= from {
			i = j
		}
	}
	var out []sink.Positioned
	for ; i < len(files) && !lim.Done(); i++ {
		f := files[i]
		if f.first >= end {
			break
		}
		limit := end
		if i+1 < len(files) {
			limit = min(limit, files[i+1].first)
		}
		if from >= limit {
			continue
		}
		pos, off := f.first, int64(0)
		if h := d.hint; h.valid && h.first == f.first && h.pos <= max64(from, f.first) {
			pos, off = h.pos, h.off
		}
		var perr error
		err := d.scan(ctx, f.name, off, func(next int64, line []byte) bool {
			if pos >= limit || lim.Done() {
				return false
			}
			p := pos
			pos++
			if p < from {
				d.hint = readHint{true, f.first, pos, next}
				return true
			}
			l, err := parseLine(bytes.Clone(line))
			if err != nil {
				perr = fmt.Errorf("filesink: %s: position %d: %w", filepath.Join(d.dir, f.name), p, err)
				return false
			}
			rec := sink.Positioned{Pos: p, Record: l.Record()}
			if !lim.Take(&rec) {
				return false // past maxBytes: the next read starts at p
			}
			out = append(out, rec)
			d.hint = readHint{true, f.first, pos, next}
			return true
		})
		if err != nil {
			return nil, err
		}
		if perr != nil {
			return nil, perr
		}
		from = max64(from, limit)
	}
	return out, nil
}

func max64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}
