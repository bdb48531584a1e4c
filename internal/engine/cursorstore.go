package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"sync"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/source"
)

// The cursor file:
//
//	[8]byte magic "WEIRCUR1"
//	u32     number of entries
//	entries, sorted by name:
//	  u16 name length, name
//	  u32 cursor length, cursor
//	u32     CRC32C (Castagnoli) of everything before it
//
// All integers are big-endian. The file is only ever replaced whole: the new
// content goes to a temporary file that is fdatasynced, renamed over the
// old one, and the directory fsynced — so after a crash the file holds
// either the old or the new set of cursors, never a mix.
const (
	cursorMagic      = "WEIRCUR1"
	cursorTmpSuffix  = ".tmp"
	maxCursorFile    = 64 << 20
	maxCursorNameLen = 1<<16 - 1
)

// DefaultCursorFile is the cursor file's name in its directory.
const DefaultCursorFile = "source-cursors"

// ErrCorruptCursors is returned by OpenFileCursorStore for a cursor file
// that fails its checksum or cannot be parsed. Nothing is guessed: an
// operator must look at the named file.
var ErrCorruptCursors = errors.New("engine: corrupt cursor file")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// FileCursorStore is a source.CursorStore kept in one file, replaced
// atomically on every Save. It is meant for the offset store's directory
// (next to raw). Save is serialised; each Save rewrites every cursor, which
// is cheap for the handful of sources a node runs.
type FileCursorStore struct {
	fs   vfs.FS
	dir  string
	path string

	mu      sync.Mutex
	cursors map[string]source.Cursor
	broken  error // a failed sync leaves the store refusing further saves
}

var _ source.CursorStore = (*FileCursorStore)(nil)

// OpenFileCursorStore opens (or starts) the cursor file name in dir
// (DefaultCursorFile when name is empty), creating dir if needed. A leftover
// temporary file from an interrupted Save is removed.
func OpenFileCursorStore(fsys vfs.FS, dir, name string) (*FileCursorStore, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	if name == "" {
		name = DefaultCursorFile
	}
	if err := fsys.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("engine: cursor store: create %s: %w", dir, err)
	}
	s := &FileCursorStore{fs: fsys, dir: dir, path: filepath.Join(dir, name), cursors: map[string]source.Cursor{}}
	tmp := s.path + cursorTmpSuffix
	if err := fsys.Remove(tmp); err == nil {
		if err := fsys.SyncDir(dir); err != nil {
			return nil, fmt.Errorf("engine: cursor store: sync %s: %w", dir, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("engine: cursor store: remove %s: %w", tmp, err)
	}
	data, err := readFile(fsys, s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("engine: cursor store: read %s: %w", s.path, err)
	}
	if s.cursors, err = decodeCursors(data); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorruptCursors, s.path, err)
	}
	return s, nil
}

// Path is the cursor file.
func (s *FileCursorStore) Path() string { return s.path }

// Load returns the source's cursor, or nil if it has none.
func (s *FileCursorStore) Load(_ context.Context, src string) (source.Cursor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.cursors[src]), nil
}

// Save makes c the source's cursor, durably, before returning nil. After a
// failed sync the store refuses every later Save (the file's state on disk
// is unknown, and fdatasync is never retried); reopen it to recover.
func (s *FileCursorStore) Save(ctx context.Context, src string, c source.Cursor) error {
	if len(src) > maxCursorNameLen {
		return fmt.Errorf("engine: cursor store: source name of %d bytes", len(src))
	}
	return s.update(ctx, func(next map[string]source.Cursor) bool {
		next[src] = slices.Clone(c)
		return true
	})
}

func (s *FileCursorStore) write(data []byte) error {
	tmp := s.path + cursorTmpSuffix
	_ = s.fs.Remove(tmp) // left by a failed Save; Create needs it gone
	f, err := s.fs.Create(tmp, 0o600)
	if err != nil {
		return fmt.Errorf("engine: cursor store: create %s: %w", tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("engine: cursor store: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		s.broken = fmt.Errorf("engine: cursor store: sync %s (store stopped): %w", tmp, err)
		return s.broken
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("engine: cursor store: close %s: %w", tmp, err)
	}
	if err := s.fs.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("engine: cursor store: rename %s: %w", tmp, err)
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		s.broken = fmt.Errorf("engine: cursor store: sync dir %s (store stopped): %w", s.dir, err)
		return s.broken
	}
	return nil
}

func encodeCursors(m map[string]source.Cursor) []byte {
	names := slices.Sorted(maps.Keys(m))
	b := append([]byte(nil), cursorMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(names)))
	for _, n := range names {
		b = binary.BigEndian.AppendUint16(b, uint16(len(n)))
		b = append(b, n...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(m[n])))
		b = append(b, m[n]...)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeCursors(b []byte) (map[string]source.Cursor, error) {
	if len(b) < len(cursorMagic)+8 || string(b[:len(cursorMagic)]) != cursorMagic {
		return nil, errors.New("bad magic or short file")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, errors.New("checksum mismatch")
	}
	r := body[len(cursorMagic):]
	n := binary.BigEndian.Uint32(r)
	r = r[4:]
	m := make(map[string]source.Cursor, min(n, 1024))
	for i := uint32(0); i < n; i++ {
		if len(r) < 2 {
			return nil, fmt.Errorf("entry %d: truncated", i)
		}
		nl := int(binary.BigEndian.Uint16(r))
		r = r[2:]
		if len(r) < nl+4 {
			return nil, fmt.Errorf("entry %d: truncated name", i)
		}
		name := string(r[:nl])
		r = r[nl:]
		cl := int(binary.BigEndian.Uint32(r))
		r = r[4:]
		if len(r) < cl {
			return nil, fmt.Errorf("entry %d: truncated cursor", i)
		}
		m[name] = slices.Clone(source.Cursor(r[:cl]))
		r = r[cl:]
	}
	if len(r) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(r))
	}
	return m, nil
}

func readFile(fsys vfs.FS, path string) ([]byte, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > maxCursorFile {
		return nil, fmt.Errorf("%d bytes, limit %d", st.Size(), maxCursorFile)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && st.Size() > 0 {
		return nil, err
	}
	return b, nil
}
