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

const confirmedSize = 8 + 8 + 4

// ReadConfirmed returns how many leading records of the segment at path the
// drain has durably delivered (its .confirmed sidecar), 0 if none.
func ReadConfirmed(fsys vfs.FS, segPath string) (uint64, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	path := ConfirmedPath(segPath)
	b, err := readAll(fsys, path, confirmedSize)
	if isNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("wab: read sidecar: %w", err)
	}
	if len(b) != confirmedSize {
		return 0, &CorruptionError{Path: path, Offset: int64(len(b)), Reason: fmt.Sprintf("sidecar is %d bytes, want %d", len(b), confirmedSize)}
	}
	if [8]byte(b[:8]) != confirmedMagic {
		return 0, &CorruptionError{Path: path, Offset: 0, Reason: "bad sidecar magic"}
	}
	if got, want := binary.BigEndian.Uint32(b[16:]), crc(b[:16]); got != want {
		return 0, &CorruptionError{Path: path, Offset: 16, Reason: fmt.Sprintf("sidecar checksum mismatch (stored %08x, computed %08x)", got, want)}
	}
	return binary.BigEndian.Uint64(b[8:]), nil
}

// WriteConfirmed records durably (temp file, fdatasync, rename, directory
// fsync) that the first n records of the segment have been delivered.
func WriteConfirmed(fsys vfs.FS, segPath string, n uint64) error {
	if fsys == nil {
		fsys = vfs.OS
	}
	var b [confirmedSize]byte
	copy(b[:8], confirmedMagic[:])
	binary.BigEndian.PutUint64(b[8:], n)
	binary.BigEndian.PutUint32(b[16:], crc(b[:16]))
	if err := writeFileDurably(fsys, ConfirmedPath(segPath), b[:]); err != nil {
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
