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

// OpenOffsetStore opens (or starts) the offset file in dir, which should
// be the primary-raw directory. A leftover temporary file is removed.
//
// Processes sharing the file take an advisory lock for every read and
// write. A failed fdatasync of the file or its directory stops the store:
// the file's state is unknown, the sync is never retried, and every later
// write fails; reopening the store recovers.
func OpenOffsetStore(ctx context.Context, fsys vfs.FS, dir string) (*OffsetStore, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	if err := fsys.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("engine: offset store: create %s: %w", dir, err)
	}
	f := &offsetFile{fs: fsys, dir: dir, path: filepath.Join(dir, DefaultOffsetFile)}
	unlock, err := f.lock(ctx)
	if err != nil {
		return nil, err
	}
	tmp := f.path + offsetTmpSuffix
	if err := fsys.Remove(tmp); err == nil {
		err = fsys.SyncDir(dir)
		if err != nil {
			unlock()
			return nil, fmt.Errorf("engine: offset store: sync %s: %w", dir, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		unlock()
		return nil, fmt.Errorf("engine: offset store: remove %s: %w", tmp, err)
	}
	unlock()
	return NewOffsetStore(ctx, f)
}

// offsetFile is the OffsetPersister of a file in raw's directory.
type offsetFile struct {
	fs   vfs.FS
	dir  string
	path string

	mu     sync.Mutex
	broken error // a failed sync: sticky
}

func (f *offsetFile) Where() string { return f.path }

func (f *offsetFile) Read(ctx context.Context) (*OffsetState, error) {
	unlock, err := f.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return f.readDisk()
}

func (f *offsetFile) Update(ctx context.Context, merge func(*OffsetState) *OffsetState) error {
	f.mu.Lock()
	broken := f.broken
	f.mu.Unlock()
	if broken != nil {
		return broken
	}
	unlock, err := f.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := f.readDisk()
	if err != nil {
		return err
	}
	return f.write(encodeOffsets(merge(st)))
}

// lock takes the store's advisory lock, waiting (until ctx ends) while
// another process holds it.
func (f *offsetFile) lock(ctx context.Context) (func(), error) {
	for {
		l, err := f.fs.Lock(f.path + offsetLockName)
		if err == nil {
			return func() { _ = l.Close() }, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("engine: offset store: lock %s: %w (last: %w)", f.path+offsetLockName, ctx.Err(), err)
		case <-time.After(lockRetry):
		}
	}
}

func (f *offsetFile) write(data []byte) error {
	tmp := f.path + offsetTmpSuffix
	_ = f.fs.Remove(tmp)
	w, err := f.fs.Create(tmp, 0o600)
	if err != nil {
		return fmt.Errorf("engine: offset store: create %s: %w", tmp, err)
	}
	if _, err := w.Write(data); err != nil {
		w.Close()
		return fmt.Errorf("engine: offset store: write %s: %w", tmp, err)
	}
	if err := w.Sync(); err != nil {
		w.Close()
		return f.stop(fmt.Errorf("engine: offset store: fdatasync %s (store stopped): %w", tmp, err))
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("engine: offset store: close %s: %w", tmp, err)
	}
	if err := f.fs.Rename(tmp, f.path); err != nil {
		return fmt.Errorf("engine: offset store: rename %s: %w", tmp, err)
	}
	if err := f.fs.SyncDir(f.dir); err != nil {
		return f.stop(fmt.Errorf("engine: offset store: sync directory %s (store stopped): %w", f.dir, err))
	}
	return nil
}

// stop makes a failed sync sticky.
func (f *offsetFile) stop(err error) error {
	f.mu.Lock()
	f.broken = err
	f.mu.Unlock()
	return err
}

func (f *offsetFile) readDisk() (*OffsetState, error) {
	r, err := f.fs.Open(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("engine: offset store: open %s: %w", f.path, err)
	}
	defer r.Close()
	st, err := r.Stat()
	if err != nil {
		return nil, fmt.Errorf("engine: offset store: stat %s: %w", f.path, err)
	}
	if st.Size() > maxOffsetFile {
		return nil, fmt.Errorf("%w: %s: %d bytes, limit %d", ErrCorruptOffsets, f.path, st.Size(), maxOffsetFile)
	}
	data := make([]byte, st.Size())
	if _, err := r.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("engine: offset store: read %s: %w", f.path, err)
	}
	o, err := decodeOffsets(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorruptOffsets, f.path, err)
	}
	return o, nil
}

// encodeOffsets serialises a state in the offset file format.
func encodeOffsets(st *OffsetState) []byte {
	b := append([]byte(nil), offsetMagic...)
	names := slices.Sorted(maps.Keys(st.Cursors))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = binary.AppendUvarint(b, uint64(len(n)))
		b = append(b, n...)
		b = binary.AppendUvarint(b, uint64(len(st.Cursors[n])))
		b = append(b, st.Cursors[n]...)
	}
	names = slices.Sorted(maps.Keys(st.Coverage))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = binary.AppendUvarint(b, uint64(len(n)))
		b = append(b, n...)
		b, _ = st.Coverage[n].AppendBinary(b)
	}
	b = binary.BigEndian.AppendUint64(b, st.RawEnd)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeOffsets(b []byte) (*OffsetState, error) {
	if len(b) < len(offsetMagic)+12 || string(b[:len(offsetMagic)]) != offsetMagic {
		return nil, errors.New("bad magic or short file")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, errors.New("checksum mismatch")
	}
	r := body[len(offsetMagic) : len(body)-8]
	st := &OffsetState{Cursors: map[string]source.Cursor{}, Coverage: map[string]*SpanSet{},
		RawEnd: binary.BigEndian.Uint64(body[len(body)-8:])}
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
		st.Cursors[string(name)] = slices.Clone(source.Cursor(c))
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
		st.Coverage[string(name)] = &set
	}
	if len(r) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(r))
	}
	return st, nil
}
