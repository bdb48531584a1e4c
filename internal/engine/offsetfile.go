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
//	[8]byte  magic "WEIROFF2"
//	uvarint  number of source cursors, then for each (sorted by name):
//	         uvarint name length, name, uvarint cursor length, cursor
//	uvarint  number of sinks, then for each (sorted by name):
//	         uvarint name length, name, the sink's coverage (SpanSet encoding)
//	uvarint  number of fences, then for each (sorted by window key):
//	         uvarint key length, key, uvarint token (OffsetStore.Enter)
//	u64      raw end: the primary-raw end the writer had acknowledged
//	u32      CRC32C (Castagnoli) of everything before it
//
// A file with the magic "WEIROFF1" (written before fences existed) is the
// same without the fences section; it is still read, and the next write
// replaces it with the current format (which a build older than fencing
// cannot read).
//
// Fixed-width integers are big-endian. Like the cursor file it is only
// ever replaced whole (temporary file, fdatasync, rename, directory fsync),
// so a crash leaves the old or the new content, never a mix.
const (
	offsetMagic     = "WEIROFF2"
	offsetMagicV1   = "WEIROFF1" // no fences
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

func (f *offsetFile) Update(ctx context.Context, merge func(*OffsetState) (*OffsetState, error)) error {
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
	next, err := merge(st)
	if err != nil {
		return err
	}
	return f.write(encodeOffsets(next))
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
	names = slices.Sorted(maps.Keys(st.Fences))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = binary.AppendUvarint(b, uint64(len(n)))
		b = append(b, n...)
		b = binary.AppendUvarint(b, st.Fences[n])
	}
	b = binary.BigEndian.AppendUint64(b, st.RawEnd)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeOffsets(b []byte) (*OffsetState, error) {
	if len(b) < len(offsetMagic)+12 {
		return nil, errors.New("short file")
	}
	magic := string(b[:len(offsetMagic)])
	if magic != offsetMagic && magic != offsetMagicV1 {
		return nil, errors.New("bad magic")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, errors.New("checksum mismatch")
	}
	r := &offsetReader{b: body[len(offsetMagic) : len(body)-8]}
	st := &OffsetState{Cursors: map[string]source.Cursor{}, Coverage: map[string]*SpanSet{},
		Fences: map[string]uint64{}, RawEnd: binary.BigEndian.Uint64(body[len(body)-8:])}
	if err := r.cursors(st); err != nil {
		return nil, err
	}
	if err := r.coverage(st); err != nil {
		return nil, err
	}
	if magic != offsetMagicV1 {
		if err := r.fences(st); err != nil {
			return nil, err
		}
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(r.b))
	}
	return st, nil
}

// offsetReader reads the sections of an offset file's body.
type offsetReader struct{ b []byte }

// bytes reads a uvarint length and that many bytes.
func (r *offsetReader) bytes() ([]byte, error) {
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)-k) {
		return nil, errors.New("truncated field")
	}
	v := r.b[k : k+int(n)]
	r.b = r.b[k+int(n):]
	return v, nil
}

// uvarint reads a uvarint.
func (r *offsetReader) uvarint() (uint64, error) {
	n, k := binary.Uvarint(r.b)
	if k <= 0 {
		return 0, errors.New("bad uvarint")
	}
	r.b = r.b[k:]
	return n, nil
}

// count reads a section's entry count: no more entries than bytes left.
func (r *offsetReader) count() (uint64, error) {
	n, err := r.uvarint()
	if err != nil || n > uint64(len(r.b)) {
		return 0, errors.New("bad count")
	}
	return n, nil
}

func (r *offsetReader) cursors(st *OffsetState) error {
	n, err := r.count()
	if err != nil {
		return err
	}
	for i := uint64(0); i < n; i++ {
		name, err := r.bytes()
		if err != nil {
			return fmt.Errorf("cursor %d: %w", i, err)
		}
		c, err := r.bytes()
		if err != nil {
			return fmt.Errorf("cursor %q: %w", name, err)
		}
		st.Cursors[string(name)] = slices.Clone(source.Cursor(c))
	}
	return nil
}

func (r *offsetReader) coverage(st *OffsetState) error {
	n, err := r.count()
	if err != nil {
		return err
	}
	for i := uint64(0); i < n; i++ {
		name, err := r.bytes()
		if err != nil {
			return fmt.Errorf("sink %d: %w", i, err)
		}
		set, rest, err := decodeSpanSet(r.b)
		if err != nil {
			return fmt.Errorf("sink %q: %w", name, err)
		}
		r.b = rest
		st.Coverage[string(name)] = &set
	}
	return nil
}

func (r *offsetReader) fences(st *OffsetState) error {
	n, err := r.count()
	if err != nil {
		return err
	}
	for i := uint64(0); i < n; i++ {
		key, err := r.bytes()
		if err != nil {
			return fmt.Errorf("fence %d: %w", i, err)
		}
		tok, err := r.uvarint()
		if err != nil {
			return fmt.Errorf("fence %q: %w", key, err)
		}
		st.Fences[string(key)] = tok
	}
	return nil
}
