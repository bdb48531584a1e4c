package wab

import (
	"context"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/weir-io/weir/internal/vfs"
)

// recoverDir prepares the directory for writing: stray temporary files are
// removed, the instance id is loaded (or created), every shard directory is
// recovered. It returns each shard's next sequence number.
func (l *Log) recoverDir(ctx context.Context) (map[int]uint64, error) {
	fsys := l.fs
	names, err := fsys.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("wab: list %s: %w", l.dir, err)
	}
	if err := removeTemps(fsys, l.dir, names); err != nil {
		return nil, err
	}
	if l.instance, err = loadInstance(fsys, l.dir); err != nil {
		return nil, err
	}
	ids := make(map[int]bool)
	for _, name := range names {
		if id, ok := parseShardDir(name); ok {
			ids[id] = true
		}
	}
	for id := range l.opts.Shards {
		if !ids[id] {
			if err := fsys.MkdirAll(filepath.Join(l.dir, ShardDirName(id)), 0o700); err != nil {
				return nil, fmt.Errorf("wab: create shard directory: %w", classify(err))
			}
			ids[id] = true
		}
	}
	next := make(map[int]uint64, len(ids))
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("wab: recovery interrupted: %w", err)
		}
		n, err := l.recoverShard(id)
		if err != nil {
			return nil, err
		}
		next[id] = n
	}
	return next, nil
}

func removeTemps(fsys vfs.FS, dir string, names []string) error {
	removed := false
	for _, name := range names {
		if strings.HasSuffix(name, suffixTemp) {
			if err := fsys.Remove(filepath.Join(dir, name)); err != nil && !isNotExist(err) {
				return fmt.Errorf("wab: remove temporary file: %w", err)
			}
			removed = true
		}
	}
	if removed {
		if err := fsys.SyncDir(dir); err != nil {
			return fmt.Errorf("wab: remove temporary files: %w", err)
		}
	}
	return nil
}

// recoverShard verifies every sealed segment, seals every open one (after
// cutting its torn tail), removes orphan sidecars, and returns the next
// sequence number.
func (l *Log) recoverShard(id int) (uint64, error) {
	fsys := l.fs
	dir := filepath.Join(l.dir, ShardDirName(id))
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("wab: list %s: %w", dir, err)
	}
	if err := removeTemps(fsys, dir, names); err != nil {
		return 0, err
	}
	var open, sealed, confirmed []uint64
	present := make(map[uint64]bool)
	var maxSeq uint64
	for _, name := range names {
		seq, kind := parseSegmentName(name)
		switch kind {
		case kindOpenSeg:
			open = append(open, seq)
		case kindSealedSeg:
			sealed = append(sealed, seq)
		case kindConfirmed:
			confirmed = append(confirmed, seq)
			continue
		case kindTemp:
			continue
		default:
			l.logger.Warn("ignoring unexpected file in shard directory", "path", filepath.Join(dir, name))
			continue
		}
		if present[seq] {
			return 0, fmt.Errorf("wab: shard %d: segment %d is both open and sealed", id, seq)
		}
		present[seq] = true
		maxSeq = max(maxSeq, seq)
	}
	for _, seq := range sealed {
		path := filepath.Join(dir, SegmentName(seq)+".sealed")
		info, err := InspectSegment(fsys, path)
		if err != nil {
			return 0, fmt.Errorf("wab: verify: %w", err)
		}
		if info.Corruption != nil {
			return 0, info.Corruption
		}
		if err := checkHeader(info, id, seq); err != nil {
			return 0, err
		}
	}
	for _, seq := range open {
		kept, err := l.recoverOpen(filepath.Join(dir, SegmentName(seq)), id, seq)
		if err != nil {
			return 0, err
		}
		present[seq] = kept
	}
	dirty := false
	for _, seq := range confirmed {
		if !present[seq] {
			path := filepath.Join(dir, SegmentName(seq)+".confirmed")
			if err := fsys.Remove(path); err != nil && !isNotExist(err) {
				return 0, fmt.Errorf("wab: remove orphan sidecar: %w", err)
			}
			l.logger.Info("removed sidecar of a deleted segment", "path", path)
			dirty = true
		}
	}
	if dirty {
		if err := fsys.SyncDir(dir); err != nil {
			return 0, fmt.Errorf("wab: remove orphan sidecars: %w", err)
		}
	}
	return maxSeq + 1, nil
}

func checkHeader(info SegmentInfo, id int, seq uint64) error {
	if int(info.Header.Shard) != id || info.Header.Seq != seq {
		return &CorruptionError{Path: info.Path, Offset: 0, Reason: fmt.Sprintf("header names shard %d sequence %d, file is shard %d sequence %d", info.Header.Shard, info.Header.Seq, id, seq)}
	}
	return nil
}

// recoverOpen turns an open segment left by a crash into a sealed one: the
// tail after the last valid record is cut, the file synced, the footer
// written and synced, and the file renamed. A segment whose creation was
// interrupted (no complete header and nothing after it) or that holds no
// record is removed. It reports whether the segment was kept.
func (l *Log) recoverOpen(path string, id int, seq uint64) (bool, error) {
	fsys := l.fs
	dir := filepath.Dir(path)
	info, err := InspectSegment(fsys, path)
	if err != nil {
		return false, fmt.Errorf("wab: recover: %w", err)
	}
	remove := func(why string) (bool, error) {
		l.logger.Info("removing open segment", "path", path, "reason", why)
		if err := fsys.Remove(path); err != nil {
			return false, fmt.Errorf("wab: recover: remove %s: %w", path, err)
		}
		if err := fsys.SyncDir(dir); err != nil {
			return false, fmt.Errorf("wab: recover: %w", err)
		}
		return false, nil
	}
	if !info.HeaderOK {
		// The header is fdatasynced before anything else is written, so
		// a bad header with data after it is damage, not a crash.
		if info.Size <= HeaderSize {
			return remove("creation was interrupted: " + info.Corruption.Reason)
		}
		return false, info.Corruption
	}
	if err := checkHeader(info, id, seq); err != nil {
		return false, err
	}
	if info.Records == 0 {
		return remove("no records")
	}
	f, err := fsys.OpenReadWrite(path)
	if err != nil {
		return false, fmt.Errorf("wab: recover: %w", err)
	}
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	if !(info.HasFooter && info.Corruption == nil) {
		if info.Corruption != nil {
			l.logger.Warn("cutting torn tail of open segment",
				"path", path, "offset", info.RecordsEnd, "discarded_bytes", info.Size-info.RecordsEnd,
				"records_kept", info.Records, "reason", info.Corruption.Reason)
		}
		if err := f.Truncate(info.RecordsEnd); err != nil {
			return false, fmt.Errorf("wab: recover %s: truncate: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			return false, fmt.Errorf("wab: recover %s: fdatasync: %w", path, err)
		}
		if _, err := f.Seek(info.RecordsEnd, io.SeekStart); err != nil {
			return false, fmt.Errorf("wab: recover %s: %w", path, err)
		}
		ft := Footer{Records: info.Records, FirstReceived: info.FirstReceived, LastReceived: info.LastReceived}
		if _, err := f.Write(appendFooter(nil, ft)); err != nil {
			return false, fmt.Errorf("wab: recover %s: write footer: %w", path, classify(err))
		}
	}
	if err := f.Sync(); err != nil {
		return false, fmt.Errorf("wab: recover %s: fdatasync: %w", path, err)
	}
	err = f.Close()
	f = nil
	if err != nil {
		return false, fmt.Errorf("wab: recover %s: close: %w", path, err)
	}
	if err := fsys.Rename(path, path+".sealed"); err != nil {
		return false, fmt.Errorf("wab: recover: %w", err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return false, fmt.Errorf("wab: recover: %w", err)
	}
	l.logger.Info("sealed open segment left by a crash", "path", path+".sealed", "records", info.Records)
	return true, nil
}
