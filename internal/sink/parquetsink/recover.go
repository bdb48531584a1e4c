package parquetsink

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"path/filepath"
	"sort"

	"github.com/weir-io/weir/internal/vfs"
)

// recover settles the files of every writer that is not running (whose lock
// can be taken): temporary Parquet files are removed, stages are written as
// Parquet and removed, and the writer's lock file goes.
func (s *Sink) recover(ctx context.Context) error {
	names, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("parquetsink: list %s: %w", s.dir, err)
	}
	byWriter := map[string][]parsedName{}
	finished := map[string]bool{}
	for _, name := range names {
		if w, ok := parseLockName(name); ok {
			if _, seen := byWriter[w]; !seen {
				byWriter[w] = nil
			}
			continue
		}
		p, ok := parseName(name)
		if !ok {
			continue
		}
		switch p.suffix {
		case SuffixParquet:
			finished[p.base] = true
		case SuffixStage, SuffixTemp:
			byWriter[p.writer] = append(byWriter[p.writer], p)
		}
	}
	writers := make([]string, 0, len(byWriter))
	for w := range byWriter {
		writers = append(writers, w)
	}
	sort.Strings(writers)
	for _, w := range writers {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.recoverWriter(w, byWriter[w], finished); err != nil {
			return err
		}
	}
	return nil
}

func (s *Sink) recoverWriter(w string, files []parsedName, finished map[string]bool) error {
	if w != s.writer {
		lockPath := filepath.Join(s.dir, lockName(w))
		l, err := s.fs.Lock(lockPath)
		if errors.Is(err, vfs.ErrLocked) {
			s.logger.Debug("files of a running writer left alone", "other_writer", w, "files", len(files))
			return nil
		}
		if err != nil {
			return fmt.Errorf("parquetsink: recovery: lock %s: %w", lockPath, err)
		}
		defer func() {
			_ = s.fs.Remove(lockPath)
			_ = l.Close()
		}()
	}
	changed := false
	for _, p := range files {
		path := filepath.Join(s.dir, p.base+p.suffix)
		switch p.suffix {
		case SuffixTemp:
			if err := s.fs.Remove(path); err != nil && !errors.Is(err, iofs.ErrNotExist) {
				return fmt.Errorf("parquetsink: recovery: remove %s: %w", path, err)
			}
			s.logger.Info("removed incomplete Parquet file left by a crash", "file", p.base+p.suffix)
			changed = true
		case SuffixStage:
			if err := s.recoverStage(p.base, finished[p.base]); err != nil {
				return err
			}
			changed = true
		}
	}
	if changed {
		if err := s.fs.SyncDir(s.dir); err != nil {
			return fmt.Errorf("parquetsink: recovery: %w", err)
		}
	}
	return nil
}

// recoverStage writes a stage left by a crash as Parquet (unless its
// Parquet file is already complete: a crash between rename and removal)
// and removes it.
func (s *Sink) recoverStage(base string, done bool) error {
	name := base + SuffixStage
	path := filepath.Join(s.dir, name)
	if !done {
		f, err := s.fs.Open(path)
		if err != nil {
			return fmt.Errorf("parquetsink: recover %s: %w", path, err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return fmt.Errorf("parquetsink: recover %s: %w", path, err)
		}
		var rows int64
		end, err := scanStage(f, name, fi.Size(), true, func(fr frame, _ int64) error {
			rows += int64(len(fr.rows))
			return nil
		})
		if err != nil {
			return fmt.Errorf("parquetsink: recover: %w", err)
		}
		if end < fi.Size() {
			s.logger.Warn("dropped torn tail of stage left by a crash", "file", name, "offset", end, "dropped_bytes", fi.Size()-end)
		}
		if rows > 0 {
			if _, err := s.conv.convert(f, name, end, base, rows); err != nil {
				return fmt.Errorf("parquetsink: recover %s: %w", path, err)
			}
			s.logger.Info("stage left by a crash written as Parquet", "file", base+SuffixParquet, "rows", rows)
		}
	}
	if err := s.fs.Remove(path); err != nil {
		return fmt.Errorf("parquetsink: recover %s: remove: %w", path, err)
	}
	return nil
}
