package wab

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/weir-io/weir/internal/vfs"
)

// isDiskFull reports an out-of-space condition.
func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// classify wraps err in ErrDiskFull when it is an out-of-space error.
func classify(err error) error {
	if err != nil && isDiskFull(err) && !errors.Is(err, ErrDiskFull) {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	return err
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// writeFileDurably writes data to path atomically and durably: a temporary
// file (path+".tmp") is written, fdatasynced, renamed over path, and the
// directory fsynced.
func writeFileDurably(fsys vfs.FS, path string, data []byte) error {
	tmp := path + suffixTemp
	if err := fsys.Remove(tmp); err != nil && !isNotExist(err) {
		return fmt.Errorf("remove stale %s: %w", tmp, err)
	}
	f, err := fsys.Create(tmp, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		_ = fsys.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		_ = fsys.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		_ = fsys.Remove(tmp)
		return err
	}
	if err := fsys.Rename(tmp, path); err != nil {
		_ = fsys.Remove(tmp)
		return err
	}
	return fsys.SyncDir(filepath.Dir(path))
}

// readAll reads a small file whole, refusing files over limit bytes.
func readAll(fsys vfs.FS, path string, limit int64) ([]byte, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > limit {
		return nil, &CorruptionError{Path: path, Offset: limit, Reason: fmt.Sprintf("file is %d bytes, at most %d expected", fi.Size(), limit)}
	}
	b := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, err
	}
	return b, nil
}

// loadInstance reads <dir>/INSTANCE, creating it durably on first use.
func loadInstance(fsys vfs.FS, dir string) ([16]byte, error) {
	var id [16]byte
	path := filepath.Join(dir, instanceName)
	b, err := readAll(fsys, path, 64)
	switch {
	case err == nil:
		if len(b) != len(id) {
			return id, &CorruptionError{Path: path, Offset: 0, Reason: fmt.Sprintf("instance file is %d bytes, want %d", len(b), len(id))}
		}
		copy(id[:], b)
		return id, nil
	case !isNotExist(err):
		return id, fmt.Errorf("wab: read instance id: %w", err)
	}
	if _, err := rand.Read(id[:]); err != nil {
		return id, fmt.Errorf("wab: new instance id: %w", err)
	}
	if err := writeFileDurably(fsys, path, id[:]); err != nil {
		return id, fmt.Errorf("wab: write instance id: %w", classify(err))
	}
	return id, nil
}

// ConfirmedPath is the path of a segment's .confirmed sidecar: the segment
// path without ".sealed", plus ".confirmed".
func ConfirmedPath(segPath string) string {
	return strings.TrimSuffix(segPath, ".sealed") + ".confirmed"
}

// Sidecar layouts: version 1 holds the delivered record count only;
// version 2 adds the byte offset of the first record not delivered, so that
// the drain can seek to it instead of reading (and checking) every
// delivered record again.
const (
	confirmedV1Size = 8 + 8 + 4
	confirmedV2Size = 8 + 4 + 8 + 8 + 4
	confirmedV2     = 2
)

// Progress is what a segment's .confirmed sidecar records.
type Progress struct {
	// Records is how many leading records of the segment the drain has
	// durably delivered.
	Records uint64
	// Offset is the byte offset of the first record not delivered (the
	// footer's offset once every record is), or 0 when the sidecar does not
	// say (version 1, count only): the reader must then skip Records
	// records from the start.
	Offset int64
}

// ReadConfirmed returns how many leading records of the segment at path the
// drain has durably delivered (its .confirmed sidecar), 0 if none.
func ReadConfirmed(fsys vfs.FS, segPath string) (uint64, error) {
	p, err := ReadProgress(fsys, segPath)
	return p.Records, err
}

// ReadProgress reads the segment's .confirmed sidecar, of either version;
// a missing sidecar is the zero Progress.
func ReadProgress(fsys vfs.FS, segPath string) (Progress, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	path := ConfirmedPath(segPath)
	b, err := readAll(fsys, path, 64)
	if isNotExist(err) {
		return Progress{}, nil
	}
	if err != nil {
		return Progress{}, fmt.Errorf("wab: read sidecar: %w", err)
	}
	if len(b) != confirmedV1Size && len(b) != confirmedV2Size {
		return Progress{}, &CorruptionError{Path: path, Offset: int64(len(b)), Reason: fmt.Sprintf("sidecar is %d bytes, want %d or %d", len(b), confirmedV1Size, confirmedV2Size)}
	}
	if [8]byte(b[:8]) != confirmedMagic {
		return Progress{}, &CorruptionError{Path: path, Offset: 0, Reason: "bad sidecar magic"}
	}
	end := len(b) - 4
	if got, want := binary.BigEndian.Uint32(b[end:]), crc(b[:end]); got != want {
		return Progress{}, &CorruptionError{Path: path, Offset: int64(end), Reason: fmt.Sprintf("sidecar checksum mismatch (stored %08x, computed %08x)", got, want)}
	}
	if len(b) == confirmedV1Size {
		return Progress{Records: binary.BigEndian.Uint64(b[8:])}, nil
	}
	if v := binary.BigEndian.Uint32(b[8:]); v != confirmedV2 {
		return Progress{}, &CorruptionError{Path: path, Offset: 8, Reason: fmt.Sprintf("unsupported sidecar version %d", v)}
	}
	p := Progress{Records: binary.BigEndian.Uint64(b[12:]), Offset: int64(binary.BigEndian.Uint64(b[20:]))}
	if p.Offset < HeaderSize {
		return Progress{}, &CorruptionError{Path: path, Offset: 20, Reason: fmt.Sprintf("sidecar offset %d is inside the segment header", p.Offset)}
	}
	return p, nil
}

// WriteConfirmed records durably that the first n records of the segment
// have been delivered, as a count-only (version 1) sidecar. The drain uses
// WriteProgress, which also records where the next record starts.
func WriteConfirmed(fsys vfs.FS, segPath string, n uint64) error {
	var b [confirmedV1Size]byte
	copy(b[:8], confirmedMagic[:])
	binary.BigEndian.PutUint64(b[8:], n)
	binary.BigEndian.PutUint32(b[16:], crc(b[:16]))
	return writeSidecar(fsys, segPath, b[:])
}

// WriteProgress records p durably in the segment's sidecar (version 2).
// p.Offset must be the offset of record p.Records (or of the footer).
// Repair and Salvage lower sidecars with it: a sidecar that counts past
// what a repaired segment holds must never come back.
func WriteProgress(fsys vfs.FS, segPath string, p Progress) error {
	b, err := encodeProgress(segPath, p)
	if err != nil {
		return err
	}
	return writeSidecar(fsys, segPath, b[:])
}

// NoteProgress records p in the segment's sidecar atomically but not
// durably: a temporary file renamed over the sidecar, with no fdatasync and
// no directory fsync. A process crash keeps it (the kernel has it); a power
// loss may leave the sidecar as it was before, or torn — which
// ReadProgress reports as a *CorruptionError, and which a reader of
// progress must take as nothing delivered. It is how the drain records
// progress after every sub-batch: progress is a hint that saves
// redelivery, never a promise — delivery is at least once either way, and
// every version of a sidecar the drain ever wrote counts only records the
// sink had committed, so whichever one a crash leaves never leads.
func NoteProgress(fsys vfs.FS, segPath string, p Progress) error {
	if fsys == nil {
		fsys = vfs.OS
	}
	b, err := encodeProgress(segPath, p)
	if err != nil {
		return err
	}
	path := ConfirmedPath(segPath)
	tmp := path + suffixTemp
	if err := fsys.Remove(tmp); err != nil && !isNotExist(err) {
		return fmt.Errorf("wab: note sidecar of %s: remove stale %s: %w", segPath, tmp, classify(err))
	}
	f, err := fsys.Create(tmp, 0o600)
	if err != nil {
		return fmt.Errorf("wab: note sidecar of %s: %w", segPath, classify(err))
	}
	_, werr := f.Write(b[:])
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = fsys.Remove(tmp)
		return fmt.Errorf("wab: note sidecar of %s: %w", segPath, classify(err))
	}
	if err := fsys.Rename(tmp, path); err != nil {
		_ = fsys.Remove(tmp)
		return fmt.Errorf("wab: note sidecar of %s: %w", segPath, classify(err))
	}
	return nil
}

func encodeProgress(segPath string, p Progress) ([confirmedV2Size]byte, error) {
	var b [confirmedV2Size]byte
	if p.Offset < HeaderSize {
		return b, fmt.Errorf("wab: write sidecar of %s: offset %d is inside the segment header", segPath, p.Offset)
	}
	copy(b[:8], confirmedMagic[:])
	binary.BigEndian.PutUint32(b[8:], confirmedV2)
	binary.BigEndian.PutUint64(b[12:], p.Records)
	binary.BigEndian.PutUint64(b[20:], uint64(p.Offset))
	binary.BigEndian.PutUint32(b[28:], crc(b[:28]))
	return b, nil
}

// writeSidecar replaces a sidecar atomically and durably (temporary file,
// fdatasync, rename, directory fsync).
func writeSidecar(fsys vfs.FS, segPath string, b []byte) error {
	if fsys == nil {
		fsys = vfs.OS
	}
	if err := writeFileDurably(fsys, ConfirmedPath(segPath), b); err != nil {
		return fmt.Errorf("wab: write sidecar of %s: %w", segPath, classify(err))
	}
	return nil
}

// RemoveSegment deletes a delivered segment and its sidecar durably.
// The segment goes first: a crash in between leaves a sidecar without a
// segment, which Open removes.
func RemoveSegment(fsys vfs.FS, segPath string) error {
	if fsys == nil {
		fsys = vfs.OS
	}
	if err := fsys.Remove(segPath); err != nil && !isNotExist(err) {
		return fmt.Errorf("wab: remove segment: %w", err)
	}
	if err := fsys.Remove(ConfirmedPath(segPath)); err != nil && !isNotExist(err) {
		return fmt.Errorf("wab: remove sidecar: %w", err)
	}
	if err := fsys.SyncDir(filepath.Dir(segPath)); err != nil {
		return fmt.Errorf("wab: remove segment %s: %w", segPath, err)
	}
	return nil
}

// WriteSealed writes a complete sealed segment holding recs at path durably
// (temporary name, footer, fdatasync, rename, directory fsync). It is how
// dead-letter files are made. Zero Version, UID and Created fields of h are
// filled in (1, random, now). The temporary name is path+".tmp"; a stale one
// from a crash is replaced. The file must not exist already.
func WriteSealed(fsys vfs.FS, path string, h Header, recs []Record) error {
	if fsys == nil {
		fsys = vfs.OS
	}
	if h.Version == 0 {
		h.Version = Version
	}
	if h.UID == 0 {
		u, err := randomUID()
		if err != nil {
			return err
		}
		h.UID = u
	}
	if h.Created == 0 {
		h.Created = time.Now().UnixNano()
	}
	if _, err := fsys.Stat(path); err == nil {
		return fmt.Errorf("wab: write sealed %s: %w", path, fs.ErrExist)
	}
	size := HeaderSize + FooterFrameSize
	for _, r := range recs {
		if len(r.Meta) > MaxMetaBytes {
			return fmt.Errorf("wab: write sealed %s: meta of %d bytes: %w", path, len(r.Meta), ErrRecordTooLarge)
		}
		if len(r.Payload) > RecordLimit {
			return fmt.Errorf("wab: write sealed %s: payload of %d bytes: %w", path, len(r.Payload), ErrRecordTooLarge)
		}
		size += FrameOverhead + len(r.Meta) + len(r.Payload)
	}
	buf := make([]byte, HeaderSize, size)
	encodeHeader(buf, h)
	var ft Footer
	for i, r := range recs {
		buf = appendRecord(buf, r.Durability, r.Received, r.Meta, r.Payload)
		if i == 0 {
			ft.FirstReceived = r.Received
		}
		ft.LastReceived = r.Received
	}
	ft.Records = uint64(len(recs))
	buf = appendFooter(buf, ft)
	if err := writeFileDurably(fsys, path, buf); err != nil {
		return fmt.Errorf("wab: write sealed %s: %w", path, classify(err))
	}
	return nil
}
