package wab

import (
	"context"
	"encoding/binary"
	"fmt"
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
		if err := checkSealed(fsys, filepath.Join(dir, SegmentName(seq)+".sealed"), id, seq); err != nil {
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

// RecoveryObserver is an optional extension of Observer: an Observer that
// also implements it is told of every torn tail Open cuts from an open
// segment.
type RecoveryObserver interface {
	// TailCut reports a cut: kept records stay, and validAfter complete,
	// valid records were found after the bad frame and dropped with it.
	// Those are normally the rest of a batch that was never synced (a
	// power loss that wrote pages out of order); they can also be the only
	// trace of damage inside the last synced batch, which sync marks
	// cannot prove (docs/wab_format.md, Recovery).
	TailCut(shard int, kept, validAfter int)
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
	if info.Damaged() {
		// Not what a crash leaves of writes never synced: a later frame
		// proves the bad one had been fdatasynced (or, in a segment
		// without sync marks, any valid frame follows). The records after
		// it may have been acknowledged.
		return false, midSegmentDamage(info)
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
	if info.HasFooter && info.Corruption == nil {
		// The crash came between writing the footer and the rename.
		if err := f.Sync(); err != nil {
			return false, fmt.Errorf("wab: recover %s: fdatasync: %w", path, err)
		}
	} else {
		if info.Corruption != nil {
			l.logger.Warn("cutting torn tail of open segment",
				"path", path, "offset", info.RecordsEnd, "discarded_bytes", info.Size-info.RecordsEnd,
				"records_kept", info.Records, "unsynced_records_discarded", info.RecordsAfter,
				"reason", info.Corruption.Reason)
			if ro, ok := l.obs.(RecoveryObserver); ok {
				ro.TailCut(id, int(info.Records), int(info.RecordsAfter))
			}
		}
		if err := truncateAndSeal(f, path, info, true); err != nil {
			return false, fmt.Errorf("wab: recover: %w", err)
		}
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

// midSegmentDamage is the error for an open segment whose bad frame is not
// a torn tail.
func midSegmentDamage(info SegmentInfo) *CorruptionError {
	why := fmt.Sprintf("a valid frame follows at offset %d", info.ValidAfter)
	if info.SyncedAfter != 0 {
		why = fmt.Sprintf("the frame at offset %d was written after an fdatasync that covered it", info.SyncedAfter)
	}
	return &CorruptionError{Path: info.Path, Offset: info.Corruption.Offset, Reason: fmt.Sprintf(
		"%s; %s (%d valid records after the damage): damage in the middle of the segment, not a torn tail; "+
			"cutting it would drop records that may have been acknowledged (weir repair --cut does it on request)",
		info.Corruption.Reason, why, info.RecordsAfter)}
}

// checkSealed checks a sealed segment at Open without reading it whole: its
// header must be valid and name this shard and sequence, and its last
// FooterFrameSize bytes must be a valid footer (the footer's own CRC guards
// it, and a footer found there ends the file exactly) whose record count
// the bytes before it can hold. The records themselves are checked when the
// drain reads them, and in full by InspectSegment (weir verify): a sealed
// segment was fdatasynced whole before it was renamed, so what could go
// wrong inside it since is media damage, not a crash.
func checkSealed(fsys vfs.FS, path string, id int, seq uint64) error {
	f, err := fsys.Open(path)
	if err != nil {
		return fmt.Errorf("wab: check sealed segment: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("wab: check sealed segment %s: %w", path, err)
	}
	size := fi.Size()
	if size < HeaderSize {
		return &CorruptionError{Path: path, Offset: 0, Reason: fmt.Sprintf("file is %d bytes, shorter than the %d-byte header", size, HeaderSize)}
	}
	var hb [HeaderSize]byte
	if _, err := f.ReadAt(hb[:], 0); err != nil {
		return fmt.Errorf("wab: read header of %s: %w", path, err)
	}
	h, reason := decodeHeader(hb[:])
	if reason != "" {
		return &CorruptionError{Path: path, Offset: 0, Reason: reason}
	}
	if err := checkHeader(SegmentInfo{Path: path, Header: h}, id, seq); err != nil {
		return err
	}
	if size < HeaderSize+FooterFrameSize {
		return &CorruptionError{Path: path, Offset: HeaderSize, Reason: "sealed segment ends without a footer"}
	}
	off := size - FooterFrameSize
	var fb [FooterFrameSize]byte
	if _, err := f.ReadAt(fb[:], off); err != nil {
		return fmt.Errorf("wab: read footer of %s: %w", path, err)
	}
	ft, reason := decodeFooterFrame(fb[:])
	if reason != "" {
		return &CorruptionError{Path: path, Offset: off, Reason: "sealed segment does not end with a valid footer: " + reason}
	}
	body := uint64(off - HeaderSize)
	switch {
	case ft.Records == 0 && body != 0:
		return &CorruptionError{Path: path, Offset: HeaderSize, Reason: fmt.Sprintf("footer counts no record, but %d bytes precede it", body)}
	case ft.Records > body/FrameOverhead:
		return &CorruptionError{Path: path, Offset: off, Reason: fmt.Sprintf("footer counts %d records, more than the %d bytes before it can hold", ft.Records, body)}
	}
	return nil
}

// decodeFooterFrame parses a complete footer frame; reason is empty when it
// is valid.
func decodeFooterFrame(b []byte) (Footer, string) {
	if l := binary.BigEndian.Uint32(b[0:]); l != BodyFixedSize+FooterPayloadSize {
		return Footer{}, fmt.Sprintf("frame length %d", l)
	}
	if got, want := binary.BigEndian.Uint32(b[4:]), crc(b[FrameHeaderSize:]); got != want {
		return Footer{}, fmt.Sprintf("checksum mismatch (stored %08x, computed %08x)", got, want)
	}
	if b[8] != kindFooter || b[9] != 0 || binary.BigEndian.Uint16(b[10:]) != 0 {
		return Footer{}, fmt.Sprintf("kind %d, durability %d, meta length %d", b[8], b[9], binary.BigEndian.Uint16(b[10:]))
	}
	p := b[FrameOverhead:]
	return Footer{
		Records:       binary.BigEndian.Uint64(p[0:]),
		FirstReceived: int64(binary.BigEndian.Uint64(p[8:])),
		LastReceived:  int64(binary.BigEndian.Uint64(p[16:])),
	}, ""
}
