package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/source"
)

// The offset file:
//
//	[8]byte  magic "WEIROFF1"
//	uvarint  number of source cursors, then for each (sorted by name):
//	         uvarint name length, name, uvarint cursor length, cursor
//	uvarint  number of sinks, then for each (sorted by name):
//	         uvarint name length, name, the sink's coverage (SpanSet encoding)
//	u64      raw end: the primary-raw end the writer had acknowledged
//	u32      CRC32C (Castagnoli) of everything before it
//
// Fixed-width integers are big-endian. Like the cursor file it is only
// ever replaced whole (temporary file, fdatasync, rename, directory fsync),
// so a crash leaves the old or the new content, never a mix.
const (
	offsetMagic     = "WEIROFF1"
	maxOffsetFile   = 64 << 20
	offsetTmpSuffix = ".tmp"
	offsetLockName  = ".lock"
	lockRetry       = 5 * time.Millisecond
)

// DefaultOffsetFile is the offset store's file name in the raw directory.
const DefaultOffsetFile = "weir-offsets"

// ErrCorruptOffsets is returned by OpenOffsetStore for an offset file that
// fails its checksum or cannot be parsed. Nothing is guessed.
var ErrCorruptOffsets = errors.New("engine: corrupt offset store")

// OffsetStore keeps, next to primary raw and never inside the sinks it
// describes, each secondary sink's coverage (the raw positions it has
// durably received) and the cursors of store-managed sources.
//
// Coverage is recorded in memory by Cover — which a caller may do only
// after the sink's durable ack — and written out by Flush, so many acks
// cost one file replacement: the file may lag memory, and memory may lag
// the sinks, but neither ever claims a position a sink has not acked.
// Cursors are written at once by Save (a source commits its position only
// when Save returns).
//
// Several processes may share the file (an ingest node and a recovery
// node on one raw directory): every write holds an advisory lock and
// merges what is on disk — coverage is united, cursors this process never
// saved are taken from disk — so one writer never erases the other's
// progress, and a lost race can only make coverage lag.
//
// OffsetStore implements source.CursorStore.
type OffsetStore struct {
	fs   vfs.FS
	dir  string
	path string

	mu       sync.Mutex
	cursors  map[string]source.Cursor
	saved    map[string]bool // cursors this process saved
	coverage map[string]*SpanSet
	replace  map[string]bool // coverage to write as is, not merged with disk
	rawEnd   uint64
	dirty    bool
	broken   error
	writeMu  sync.Mutex // one file replacement at a time
	lastSave time.Time
}

var _ source.CursorStore = (*OffsetStore)(nil)

// OpenOffsetStore opens (or starts) the offset file in dir, which should
// be the primary-raw directory. A leftover temporary file is removed.
func OpenOffsetStore(ctx context.Context, fsys vfs.FS, dir string) (*OffsetStore, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	if err := fsys.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("engine: offset store: create %s: %w", dir, err)
	}
	s := &OffsetStore{
		fs: fsys, dir: dir, path: filepath.Join(dir, DefaultOffsetFile),
		cursors: map[string]source.Cursor{}, saved: map[string]bool{},
		coverage: map[string]*SpanSet{}, replace: map[string]bool{},
	}
	unlock, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	tmp := s.path + offsetTmpSuffix
	if err := fsys.Remove(tmp); err == nil {
		if err := fsys.SyncDir(dir); err != nil {
			return nil, fmt.Errorf("engine: offset store: sync %s: %w", dir, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("engine: offset store: remove %s: %w", tmp, err)
	}
	st, err := s.readDisk()
	if err != nil {
		return nil, err
	}
	if st != nil {
		s.cursors, s.coverage, s.rawEnd = st.cursors, st.coverage, st.rawEnd
	}
	return s, nil
}

// Path is the offset file.
func (s *OffsetStore) Path() string { return s.path }

// Load implements source.CursorStore.
func (s *OffsetStore) Load(_ context.Context, src string) (source.Cursor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.cursors[src]), nil
}

// Save implements source.CursorStore: the cursor (and any coverage
// recorded so far) is durable when Save returns nil.
func (s *OffsetStore) Save(ctx context.Context, src string, c source.Cursor) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("engine: offset store: %w", err)
	}
	s.mu.Lock()
	s.cursors[src] = slices.Clone(c)
	s.saved[src] = true
	s.dirty = true
	s.mu.Unlock()
	return s.flush(ctx, true)
}

// Coverage returns a copy of the sink's coverage.
func (s *OffsetStore) Coverage(sinkName string) SpanSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.coverage[sinkName]; c != nil {
		return c.Clone()
	}
	return SpanSet{}
}

// Known reports whether the store has ever recorded coverage for the sink.
func (s *OffsetStore) Known(sinkName string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.coverage[sinkName]
	return ok
}

// Cover records that the sink has durably received raw positions [lo, hi).
// Call it only after the sink's durable ack for every one of them. It
// registers the sink even when the range is empty.
func (s *OffsetStore) Cover(sinkName string, lo, hi uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.coverage[sinkName]
	if c == nil {
		c = &SpanSet{}
		s.coverage[sinkName] = c
		s.dirty = true
	}
	if hi > lo && !c.ContainsSpan(lo, hi) {
		c.Add(lo, hi)
		s.dirty = true
	}
}

// Clamp drops the sink's coverage at and above end and makes the next
// write replace, not merge, what the file holds for it. It is for coverage
// that claims positions raw does not have (raw lost an acknowledged tail,
// or the store belongs to another raw): keeping such a claim would stop
// recovery from ever delivering the records raw puts at those positions.
// It reports whether anything was dropped.
func (s *OffsetStore) Clamp(sinkName string, end uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.coverage[sinkName]
	if c == nil || c.Max() <= end {
		return false
	}
	c.Remove(end, c.Max())
	s.replace[sinkName] = true
	s.dirty = true
	return true
}

// NoteRawEnd records the primary-raw end this process has acknowledged; a
// recovery-only process on the same raw reads it (RawEnd, after Reload) as
// the limit below which raw is known to be acknowledged.
func (s *OffsetStore) NoteRawEnd(end uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if end > s.rawEnd {
		s.rawEnd = end
		s.dirty = true
	}
}

// RawEnd is the highest raw end noted here or read from the file.
func (s *OffsetStore) RawEnd() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rawEnd
}

// Flush writes the store if anything changed since the last write.
func (s *OffsetStore) Flush(ctx context.Context) error { return s.flush(ctx, false) }

// Reload merges what another process wrote to the file into memory.
func (s *OffsetStore) Reload(ctx context.Context) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := s.readDisk()
	if err != nil || st == nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.merge(st)
	return nil
}

// merge folds the disk state into memory. s.mu must be held.
func (s *OffsetStore) merge(st *offsetState) {
	for name, c := range st.cursors {
		if !s.saved[name] {
			s.cursors[name] = c
		}
	}
	for name, c := range st.coverage {
		if s.replace[name] {
			continue
		}
		mine := s.coverage[name]
		if mine == nil {
			mine = &SpanSet{}
			s.coverage[name] = mine
		}
		mine.AddSet(c)
	}
	s.rawEnd = max(s.rawEnd, st.rawEnd)
}

func (s *OffsetStore) flush(ctx context.Context, force bool) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	if s.broken != nil {
		s.mu.Unlock()
		return s.broken
	}
	if !s.dirty && !force {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := s.readDisk()
	if err != nil {
		return err
	}
	s.mu.Lock()
	if st != nil {
		s.merge(st)
	}
	data := s.encode()
	s.dirty = false
	replaced := maps.Clone(s.replace)
	s.mu.Unlock()
	if err := s.write(data); err != nil {
		s.mu.Lock()
		s.dirty = true
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	for name := range replaced {
		delete(s.replace, name)
	}
	s.lastSave = time.Now()
	s.mu.Unlock()
	return nil
}

// lock takes the store's advisory lock, waiting (until ctx ends) while
// another process holds it.
func (s *OffsetStore) lock(ctx context.Context) (func(), error) {
	for {
		l, err := s.fs.Lock(s.path + offsetLockName)
		if err == nil {
			return func() { _ = l.Close() }, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("engine: offset store: lock %s: %w (last: %w)", s.path+offsetLockName, ctx.Err(), err)
		case <-time.After(lockRetry):
		}
	}
}

func (s *OffsetStore) write(data []byte) error {
	tmp := s.path + offsetTmpSuffix
	_ = s.fs.Remove(tmp)
	f, err := s.fs.Create(tmp, 0o600)
	if err != nil {
		return fmt.Errorf("engine: offset store: create %s: %w", tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("engine: offset store: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return s.stop(fmt.Errorf("engine: offset store: fdatasync %s (store stopped): %w", tmp, err))
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("engine: offset store: close %s: %w", tmp, err)
	}
	if err := s.fs.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("engine: offset store: rename %s: %w", tmp, err)
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		return s.stop(fmt.Errorf("engine: offset store: sync directory %s (store stopped): %w", s.dir, err))
	}
	return nil
}

// stop makes a failed sync sticky: the file's state is unknown and the
// sync is never retried; reopening the store recovers.
func (s *OffsetStore) stop(err error) error {
	s.mu.Lock()
	s.broken = err
	s.mu.Unlock()
	return err
}

type offsetState struct {
	cursors  map[string]source.Cursor
	coverage map[string]*SpanSet
	rawEnd   uint64
}

func (s *OffsetStore) readDisk() (*offsetState, error) {
	f, err := s.fs.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("engine: offset store: open %s: %w", s.path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("engine: offset store: stat %s: %w", s.path, err)
	}
	if st.Size() > maxOffsetFile {
		return nil, fmt.Errorf("%w: %s: %d bytes, limit %d", ErrCorruptOffsets, s.path, st.Size(), maxOffsetFile)
	}
	data := make([]byte, st.Size())
	if _, err := f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("engine: offset store: read %s: %w", s.path, err)
	}
	o, err := decodeOffsets(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorruptOffsets, s.path, err)
	}
	return o, nil
}

// encode serialises the store. s.mu must be held.
func (s *OffsetStore) encode() []byte {
	b := append([]byte(nil), offsetMagic...)
	names := slices.Sorted(maps.Keys(s.cursors))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = binary.AppendUvarint(b, uint64(len(n)))
		b = append(b, n...)
		b = binary.AppendUvarint(b, uint64(len(s.cursors[n])))
		b = append(b, s.cursors[n]...)
	}
	names = slices.Sorted(maps.Keys(s.coverage))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = binary.AppendUvarint(b, uint64(len(n)))
		b = append(b, n...)
		b, _ = s.coverage[n].AppendBinary(b)
	}
	b = binary.BigEndian.AppendUint64(b, s.rawEnd)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeOffsets(b []byte) (*offsetState, error) {
	if len(b) < len(offsetMagic)+12 || string(b[:len(offsetMagic)]) != offsetMagic {
		return nil, errors.New("bad magic or short file")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, errors.New("checksum mismatch")
	}
	r := body[len(offsetMagic) : len(body)-8]
	st := &offsetState{cursors: map[string]source.Cursor{}, coverage: map[string]*SpanSet{},
		rawEnd: binary.BigEndian.Uint64(body[len(body)-8:])}
	bytesOf := func() ([]byte, error) {
		n, k := binary.Uvarint(r)
		if k <= 0 || n > uint64(len(r)-k) {
			return nil, errors.New("truncated field")
		}
		v := r[k : k+int(n)]
		r = r[k+int(n):]
		return v, nil
	}
	count := func() (uint64, error) {
		n, k := binary.Uvarint(r)
		if k <= 0 || n > uint64(len(r)) {
			return 0, errors.New("bad count")
		}
		r = r[k:]
		return n, nil
	}
	n, err := count()
	if err != nil {
		return nil, err
	}
	for i := uint64(0); i < n; i++ {
		name, err := bytesOf()
		if err != nil {
			return nil, fmt.Errorf("cursor %d: %w", i, err)
		}
		c, err := bytesOf()
		if err != nil {
			return nil, fmt.Errorf("cursor %q: %w", name, err)
		}
		st.cursors[string(name)] = slices.Clone(source.Cursor(c))
	}
	if n, err = count(); err != nil {
		return nil, err
	}
	for i := uint64(0); i < n; i++ {
		name, err := bytesOf()
		if err != nil {
			return nil, fmt.Errorf("sink %d: %w", i, err)
		}
		set, rest, err := decodeSpanSet(r)
		if err != nil {
			return nil, fmt.Errorf("sink %q: %w", name, err)
		}
		r = rest
		st.coverage[string(name)] = &set
	}
	if len(r) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(r))
	}
	return st, nil
}
