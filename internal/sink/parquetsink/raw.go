package parquetsink

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"path/filepath"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// ErrNotRaw is returned by the raw methods of a sink opened without
// Options.Positions.
var ErrNotRaw = errors.New("parquetsink: sink is not in raw (positions) mode")

// ErrRawBusy is returned (wrapped, with vfs.ErrLocked) by New in raw mode
// when another writer holds the directory.
var ErrRawBusy = errors.New("parquetsink: raw directory already has a writer")

// openRaw finishes New in raw mode: one writer per directory, recovery of
// every raw file, and the end position.
func (s *Sink) openRaw(ctx context.Context) (*Sink, error) {
	path := filepath.Join(s.dir, rawLockName)
	l, err := s.fs.Lock(path)
	if errors.Is(err, vfs.ErrLocked) {
		return nil, fmt.Errorf("%w: %s is locked (one raw-mode writer per directory): %w", ErrRawBusy, path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("parquetsink: lock %s: %w", path, err)
	}
	s.lock = l
	s.raw = &rawDir{fs: s.fs, dir: s.dir}
	if err := s.recoverRaw(ctx); err != nil {
		_ = s.releaseLock()
		return nil, err
	}
	return s, nil
}

// recoverRaw settles what an earlier writer left: temporary Parquet files
// are removed and every stage is written as Parquet (valid frames only) and
// removed, so that afterwards every raw file is a finished Parquet file.
// Then the end is the last file's first position plus its row count.
func (s *Sink) recoverRaw(ctx context.Context) error {
	names, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("parquetsink: list %s: %w", s.dir, err)
	}
	finished := map[uint64]bool{}
	var stages, temps []string
	plain := 0
	for _, name := range names {
		first, suffix, ok := parseRawName(name)
		if !ok {
			if _, ok := parseName(name); ok {
				plain++
			}
			continue
		}
		switch suffix {
		case SuffixParquet:
			finished[first] = true
		case SuffixStage:
			stages = append(stages, name)
		case SuffixTemp:
			temps = append(temps, name)
		}
	}
	if plain > 0 {
		s.logger.Warn("directory also holds files written without raw mode; they have no positions and raw mode leaves them alone", "files", plain)
	}
	changed := false
	for _, name := range temps {
		if err := s.fs.Remove(filepath.Join(s.dir, name)); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			return fmt.Errorf("parquetsink: recovery: remove %s: %w", name, err)
		}
		s.logger.Info("removed incomplete Parquet file left by a crash", "file", name)
		changed = true
	}
	for _, name := range stages {
		if err := ctx.Err(); err != nil {
			return err
		}
		first, _, _ := parseRawName(name)
		if err := s.recoverStage(rawBase(first), finished[first]); err != nil {
			return err
		}
		changed = true
	}
	if changed {
		if err := s.fs.SyncDir(s.dir); err != nil {
			return fmt.Errorf("parquetsink: recovery: %w", err)
		}
	}
	files, err := s.raw.files()
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return nil
	}
	last := files[len(files)-1]
	rows, err := parquetRows(s.fs, filepath.Join(s.dir, last.name))
	if err != nil {
		return fmt.Errorf("parquetsink: recovery: %w", err)
	}
	s.end.Store(last.first + uint64(rows))
	s.logger.Info("raw end recovered", "file", last.name, "end", last.first+uint64(rows))
	return nil
}

// stopRaw (raw mode) refuses every commit until the sink is reopened, for
// a failure that leaves a stage only recovery can settle without putting
// two files on one position. Outside raw mode it does nothing.
func (s *Sink) stopRaw(cause error) {
	if !s.opts.Positions || s.broken != nil {
		return
	}
	s.broken = fmt.Errorf("parquetsink: raw sink stopped, reopen to recover: %w", cause)
	s.logger.Error("raw sink stopped until it is reopened", "err", cause)
}

// CommitRaw implements sink.Raw: Commit, also returning the position of
// the batch's first committed record.
func (s *Sink) CommitRaw(ctx context.Context, b sink.Batch) (sink.CommitResult, uint64, error) {
	if !s.opts.Positions {
		return sink.CommitResult{}, 0, sink.Permanent(ErrNotRaw)
	}
	return s.commitLocked(ctx, b)
}

// End implements sink.RawReader: one past the last acknowledged position.
func (s *Sink) End(context.Context) (uint64, error) {
	if !s.opts.Positions {
		return 0, ErrNotRaw
	}
	return s.end.Load(), nil
}

// Replayable implements sink.Raw: true in raw mode.
func (s *Sink) Replayable() bool { return s.opts.Positions }

// ReadFrom implements sink.RawReader. It may run concurrently with Commit
// (which may turn a stage into Parquet under it); it never returns a
// position at or past the end acknowledged when it started.
func (s *Sink) ReadFrom(ctx context.Context, from uint64, n int, maxBytes int64) ([]sink.Positioned, error) {
	if !s.opts.Positions {
		return nil, ErrNotRaw
	}
	return s.raw.read(ctx, from, s.end.Load(), n, maxBytes)
}
