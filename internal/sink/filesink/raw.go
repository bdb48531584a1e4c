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

// rawFiles lists the readable raw files (finished and open), by first
// position.
func (s *Sink) rawFiles() ([]rawFile, error) {
	names, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("filesink: list %s: %w", s.dir, err)
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

// recoverEnd derives the end position from the last file after recovery
// has finished every .open file.
func (s *Sink) recoverEnd(ctx context.Context) error {
	files, err := s.rawFiles()
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return nil
	}
	last := files[len(files)-1]
	n := uint64(0)
	err = s.scan(ctx, last.name, 0, func(int64, []byte) bool { n++; return true })
	if err != nil {
		return err
	}
	s.end.Store(last.first + n)
	s.logger.Info("raw end recovered", "file", last.name, "end", last.first+n)
	return nil
}

// scan calls fn with each complete line of the named file from byte offset
// off (and the offset of the line after it) until fn returns false.
func (s *Sink) scan(ctx context.Context, name string, off int64, fn func(next int64, line []byte) bool) error {
	path := filepath.Join(s.dir, name)
	f, err := s.fs.Open(path)
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
func (s *Sink) ReadFrom(ctx context.Context, from uint64, max int) ([]sink.Positioned, error) {
	if !s.opts.Positions {
		return nil, ErrNotRaw
	}
	end := s.end.Load()
	if from >= end || max <= 0 {
		return nil, nil
	}
	s.readMu.Lock()
	defer s.readMu.Unlock()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var out []sink.Positioned
		out, err = s.readFrom(ctx, from, end, max)
		if err == nil {
			return out, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		// The open file was finished (renamed) under us: list again.
	}
	return nil, err
}

func (s *Sink) readFrom(ctx context.Context, from, end uint64, max int) ([]sink.Positioned, error) {
	files, err := s.rawFiles()
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
	for ; i < len(files) && len(out) < max; i++ {
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
		if h := s.hint; h.valid && h.first == f.first && h.pos <= max64(from, f.first) {
			pos, off = h.pos, h.off
		}
		var perr error
		err := s.scan(ctx, f.name, off, func(next int64, line []byte) bool {
			if pos >= limit || len(out) >= max {
				return false
			}
			p := pos
			pos++
			if p < from {
				s.hint = readHint{true, f.first, pos, next}
				return true
			}
			l, err := parseLine(bytes.Clone(line))
			if err != nil {
				perr = fmt.Errorf("filesink: %s: position %d: %w", filepath.Join(s.dir, f.name), p, err)
				return false
			}
			out = append(out, sink.Positioned{Pos: p, Record: sink.Record{
				ID: l.ID, Payload: l.Payload, Durability: l.Durability, Received: l.Received, Source: l.Source,
			}})
			s.hint = readHint{true, f.first, pos, next}
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
