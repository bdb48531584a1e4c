// Package memfs is an in-memory vfs.FS that models what survives a power
// loss, for crash tests of code that writes through the vfs seam.
//
// # Model
//
// Every file (inode) has two contents: its volatile content, what reads see
// now, and its durable content, a copy taken by its last successful Sync
// (fdatasync: data and size). Every directory has two entry tables: its
// volatile entries, what ReadDir and lookups see now, and its durable
// entries, a copy taken by its last SyncDir. Create, Rename and Remove change
// volatile entries only. MkdirAll, like the real implementation in package
// vfs, syncs the parent of every directory it creates.
//
// CrashClone returns a new, independent FS holding the state a machine would
// find after losing power at that instant: the tree is rebuilt from durable
// entries only (a file created or renamed since its directory was last
// synced is gone or back under its old name; a removed one is back), and
// every file holds its durable content, optionally plus some of what was
// written since, chosen by a caller-supplied random source: a random prefix
// of the appended tail, or a page-by-page mix of old and new bytes (torn
// pages). A process crash, where the kernel keeps everything, is
// CrashKeepAll: only locks and open descriptors die. Locks are never carried
// into a clone.
//
// All state changes happen under one mutex, so a clone is a consistent
// snapshot even while other goroutines write. Given the same sequence of
// calls and the same random source, every result is the same: map
// iteration never decides anything.
//
// Not modelled: fsync of a file also persisting its directory entry (ext4
// may do that; weir never relies on it), metadata other than size, space
// limits (inject ENOSPC with package errorfs), symbolic links, permissions.
package memfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/weir-io/weir/internal/vfs"
)

type node struct {
	dir  bool
	mode os.FileMode

	// files
	born     time.Time // creation (Birth); copies keep it
	data     []byte    // volatile content
	durable  []byte    // content as of the last Sync
	prealloc int64     // end of the region reserved with Preallocate

	// directories
	entries    map[string]*node // volatile
	durEntries map[string]*node // as of the last SyncDir
}

func newDir(mode os.FileMode) *node {
	return &node{dir: true, mode: mode | os.ModeDir, entries: map[string]*node{}, durEntries: map[string]*node{}}
}

// FS is an in-memory file system with a durability model. The zero value is
// not usable; call New.
type FS struct {
	mu      sync.Mutex
	root    *node
	locks   map[*node]bool
	gen     uint64 // bumped by every change
	durGen  uint64 // bumped by every change to durable state
	syncs   int
	dirSync int
}

var _ vfs.FS = (*FS)(nil)

// New returns an empty file system holding only the root directory "/".
// Relative names are taken relative to "/".
func New() *FS {
	return &FS{root: newDir(0o755), locks: map[*node]bool{}}
}

// Generation is bumped by every change to the file system, durable or not.
func (m *FS) Generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

// DurableGeneration is bumped by every change to the durable state (a Sync,
// a SyncDir, a directory made by MkdirAll). Two equal readings mean a crash
// clone taken at either point would be the same.
func (m *FS) DurableGeneration() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.durGen
}

func split(name string) []string {
	name = path.Clean("/" + filepath.ToSlash(name))
	if name == "/" {
		return nil
	}
	return strings.Split(name[1:], "/")
}

func pathErr(op, name string, err error) error { return &os.PathError{Op: op, Path: name, Err: err} }

// lookup walks volatile entries. It returns the node, or an error.
func (m *FS) lookup(op, name string) (*node, error) {
	n := m.root
	for _, c := range split(name) {
		if !n.dir {
			return nil, pathErr(op, name, syscall.ENOTDIR)
		}
		next, ok := n.entries[c]
		if !ok {
			return nil, pathErr(op, name, fs.ErrNotExist)
		}
		n = next
	}
	return n, nil
}

// parent returns the directory holding name and name's last element.
func (m *FS) parent(op, name string) (*node, string, error) {
	parts := split(name)
	if len(parts) == 0 {
		return nil, "", pathErr(op, name, syscall.EINVAL)
	}
	d, err := m.lookup(op, "/"+strings.Join(parts[:len(parts)-1], "/"))
	if err != nil {
		return nil, "", err
	}
	if !d.dir {
		return nil, "", pathErr(op, name, syscall.ENOTDIR)
	}
	return d, parts[len(parts)-1], nil
}

// Create implements vfs.FS: O_CREATE|O_EXCL, read-write.
func (m *FS) Create(name string, perm os.FileMode) (vfs.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.parent("open", name)
	if err != nil {
		return nil, err
	}
	if _, ok := d.entries[base]; ok {
		return nil, pathErr("open", name, fs.ErrExist)
	}
	n := &node{mode: perm, born: time.Now()}
	d.entries[base] = n
	m.gen++
	return &file{fs: m, n: n, name: name, write: true}, nil
}

func (m *FS) open(name string, write bool) (vfs.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup("open", name)
	if err != nil {
		return nil, err
	}
	if n.dir && write {
		return nil, pathErr("open", name, syscall.EISDIR)
	}
	return &file{fs: m, n: n, name: name, write: write}, nil
}

// OpenReadWrite implements vfs.FS.
func (m *FS) OpenReadWrite(name string) (vfs.File, error) { return m.open(name, true) }

// Open implements vfs.FS.
func (m *FS) Open(name string) (vfs.File, error) { return m.open(name, false) }

// Rename implements vfs.FS. Only volatile entries change; the rename is
// durable once both directories have been synced.
func (m *FS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	od, ob, err := m.parent("rename", oldname)
	if err != nil {
		return err
	}
	n, ok := od.entries[ob]
	if !ok {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	nd, nb, err := m.parent("rename", newname)
	if err != nil {
		return err
	}
	if t, ok := nd.entries[nb]; ok && t != n {
		if t.dir != n.dir || (t.dir && len(t.entries) > 0) {
			return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.EEXIST}
		}
	}
	delete(od.entries, ob)
	nd.entries[nb] = n
	m.gen++
	return nil
}

// Remove implements vfs.FS.
func (m *FS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.parent("remove", name)
	if err != nil {
		return err
	}
	n, ok := d.entries[base]
	if !ok {
		return pathErr("remove", name, fs.ErrNotExist)
	}
	if n.dir && len(n.entries) > 0 {
		return pathErr("remove", name, syscall.ENOTEMPTY)
	}
	delete(d.entries, base)
	m.gen++
	return nil
}

// MkdirAll implements vfs.FS. Like the real one, it syncs the parent of
// every directory it creates.
func (m *FS) MkdirAll(dir string, perm os.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.root
	for _, c := range split(dir) {
		next, ok := n.entries[c]
		if !ok {
			next = newDir(perm)
			n.entries[c] = next
			m.syncDir(n)
			m.gen++
		} else if !next.dir {
			return pathErr("mkdir", dir, syscall.ENOTDIR)
		}
		n = next
	}
	return nil
}

// ReadDir implements vfs.FS: volatile entries, sorted.
func (m *FS) ReadDir(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.lookup("readdir", dir)
	if err != nil {
		return nil, err
	}
	if !d.dir {
		return nil, pathErr("readdir", dir, syscall.ENOTDIR)
	}
	names := make([]string, 0, len(d.entries))
	for name := range d.entries {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// Stat implements vfs.FS.
func (m *FS) Stat(name string) (os.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup("stat", name)
	if err != nil {
		return nil, err
	}
	return info(name, n), nil
}

func (m *FS) syncDir(d *node) {
	d.durEntries = make(map[string]*node, len(d.entries))
	for k, v := range d.entries {
		d.durEntries[k] = v
	}
	m.durGen++
	m.dirSync++
}

// SyncDir implements vfs.FS: the directory's current entries become its
// durable entries.
func (m *FS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.lookup("sync", dir)
	if err != nil {
		return err
	}
	if !d.dir {
		return pathErr("sync", dir, syscall.ENOTDIR)
	}
	m.syncDir(d)
	return nil
}

type lock struct {
	m    *FS
	n    *node
	once sync.Once
}

func (l *lock) Close() error {
	l.once.Do(func() {
		l.m.mu.Lock()
		delete(l.m.locks, l.n)
		l.m.mu.Unlock()
	})
	return nil
}

// Lock implements vfs.FS. The lock file is created if needed (like a plain
// create, its entry is not durable until its directory is synced). A held
// lock makes Lock fail with an error wrapping vfs.ErrLocked. Clones carry no
// locks.
func (m *FS) Lock(name string) (io.Closer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup("open", name)
	if errors.Is(err, fs.ErrNotExist) {
		d, base, perr := m.parent("open", name)
		if perr != nil {
			return nil, perr
		}
		n = &node{mode: 0o600, born: time.Now()}
		d.entries[base] = n
		m.gen++
	} else if err != nil {
		return nil, err
	}
	if m.locks[n] {
		return nil, fmt.Errorf("lock %s: %w", name, vfs.ErrLocked)
	}
	m.locks[n] = true
	return &lock{m: m, n: n}, nil
}

// Held reports whether the named file is locked.
func (m *FS) Held(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup("stat", name)
	return err == nil && m.locks[n]
}

// Syncs is how many file Syncs and directory syncs have succeeded.
func (m *FS) Syncs() (files, dirs int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.syncs, m.dirSync
}

// IsDurable reports whether the named file or directory would survive a
// power loss now: every directory entry on its path is durable and, for a
// file, its durable content equals its volatile content.
func (m *FS) IsDurable(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.root
	for _, c := range split(name) {
		if !n.dir {
			return false
		}
		next, ok := n.entries[c]
		if !ok || n.durEntries[c] != next {
			return false
		}
		n = next
	}
	return n.dir || slices.Equal(n.data, n.durable)
}

// EntryDurable reports whether every directory entry on the path to name
// is durable (whatever the file's content).
func (m *FS) EntryDurable(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.root
	for _, c := range split(name) {
		if !n.dir {
			return false
		}
		next, ok := n.entries[c]
		if !ok || n.durEntries[c] != next {
			return false
		}
		n = next
	}
	return true
}

// ---- crash clones ----

// CrashMode says what becomes of data written since the last Sync.
type CrashMode int

const (
	// CrashDropUnsynced: every file holds exactly its durable content.
	CrashDropUnsynced CrashMode = iota
	// CrashKeepPrefix: a file whose volatile content extends its durable
	// content keeps a random-length prefix of the unsynced tail; any other
	// difference is dropped.
	CrashKeepPrefix
	// CrashTornPages: the file's size is anywhere between its durable and
	// volatile sizes, and every page where the two differ is the old page,
	// the new page, or new sectors followed by old ones. Bytes past the
	// durable size that are not new are zero or, with Junk, random.
	CrashTornPages
	// CrashKeepAll: a process crash. Volatile state survives as it is (and
	// durable state stays what it was); only locks and descriptors die.
	CrashKeepAll
)

func (c CrashMode) String() string {
	switch c {
	case CrashDropUnsynced:
		return "drop"
	case CrashKeepPrefix:
		return "prefix"
	case CrashTornPages:
		return "torn"
	case CrashKeepAll:
		return "keepall"
	}
	return fmt.Sprintf("CrashMode(%d)", int(c))
}

// ParseCrashMode reads a CrashMode's String.
func ParseCrashMode(s string) (CrashMode, error) {
	for c := CrashDropUnsynced; c <= CrashKeepAll; c++ {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("memfs: unknown crash mode %q", s)
}

// CrashOptions configure CrashClone.
type CrashOptions struct {
	Mode CrashMode
	// Rand drives CrashKeepPrefix and CrashTornPages (required for them).
	Rand rand.Source
	// PageSize and SectorSize for CrashTornPages; 4096 and 512 when zero.
	PageSize, SectorSize int
	// Junk fills lost bytes past the durable size with random bytes
	// instead of zeros (stale blocks instead of fresh ones).
	Junk bool
}

// CrashClone returns the file system as it would be found after a crash at
// this instant (see CrashMode). The receiver is not changed and may go on
// being used; the clone shares nothing with it.
func (m *FS) CrashClone(o CrashOptions) *FS {
	if o.Mode != CrashDropUnsynced && o.Mode != CrashKeepAll && o.Rand == nil {
		panic("memfs: CrashClone: Rand is required for mode " + o.Mode.String())
	}
	if o.PageSize <= 0 {
		o.PageSize = 4096
	}
	if o.SectorSize <= 0 || o.SectorSize > o.PageSize {
		o.SectorSize = min(512, o.PageSize)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := &cloner{o: o, memo: map[*node]*node{}}
	out := &FS{locks: map[*node]bool{}}
	if o.Mode == CrashKeepAll {
		out.root = c.keepAll(m.root)
	} else {
		out.root = c.power(m.root)
	}
	return out
}

type cloner struct {
	o    CrashOptions
	memo map[*node]*node
}

func sortedKeys(m map[string]*node) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// keepAll copies volatile and durable state as they are.
func (c *cloner) keepAll(n *node) *node {
	if x, ok := c.memo[n]; ok {
		return x
	}
	x := &node{dir: n.dir, mode: n.mode, prealloc: n.prealloc, born: n.born}
	c.memo[n] = x
	if !n.dir {
		x.data = slices.Clone(n.data)
		x.durable = slices.Clone(n.durable)
		return x
	}
	x.entries = make(map[string]*node, len(n.entries))
	x.durEntries = make(map[string]*node, len(n.durEntries))
	for _, k := range sortedKeys(n.entries) {
		x.entries[k] = c.keepAll(n.entries[k])
	}
	for _, k := range sortedKeys(n.durEntries) {
		x.durEntries[k] = c.keepAll(n.durEntries[k])
	}
	return x
}

// power rebuilds the tree from durable entries; the result is fully
// durable.
func (c *cloner) power(n *node) *node {
	if x, ok := c.memo[n]; ok {
		return x
	}
	x := &node{dir: n.dir, mode: n.mode, born: n.born}
	c.memo[n] = x
	if !n.dir {
		x.data = c.content(n)
		x.durable = slices.Clone(x.data)
		return x
	}
	x.entries = make(map[string]*node, len(n.durEntries))
	for _, k := range sortedKeys(n.durEntries) {
		x.entries[k] = c.power(n.durEntries[k])
	}
	x.durEntries = make(map[string]*node, len(x.entries))
	for k, v := range x.entries {
		x.durEntries[k] = v
	}
	return x
}

func (c *cloner) intn(n int) int {
	if n <= 0 {
		return 0
	}
	return int(c.o.Rand.Uint64() % uint64(n))
}

func (c *cloner) content(n *node) []byte {
	old, cur := n.durable, n.data
	switch c.o.Mode {
	case CrashKeepPrefix:
		if len(cur) > len(old) && slices.Equal(cur[:len(old)], old) {
			return slices.Clone(cur[:len(old)+c.intn(len(cur)-len(old)+1)])
		}
		return slices.Clone(old)
	case CrashTornPages:
		return c.torn(old, cur)
	}
	return slices.Clone(old)
}

func (c *cloner) torn(old, cur []byte) []byte {
	lo, hi := min(len(old), len(cur)), max(len(old), len(cur))
	size := lo + c.intn(hi-lo+1)
	out := make([]byte, size)
	at := func(b []byte, i int) (byte, bool) {
		if i < len(b) {
			return b[i], true
		}
		return 0, false
	}
	oldByte := func(i int) byte {
		if v, ok := at(old, i); ok {
			return v
		}
		if c.o.Junk {
			return byte(c.o.Rand.Uint64())
		}
		return 0
	}
	newByte := func(i int) byte {
		v, _ := at(cur, i)
		return v
	}
	ps, ss := c.o.PageSize, c.o.SectorSize
	for p := 0; p < size; p += ps {
		end := min(p+ps, size)
		same := true
		for i := p; i < end; i++ {
			ov, ook := at(old, i)
			nv, nok := at(cur, i)
			if ov != nv || ook != nok {
				same = false
				break
			}
		}
		if same {
			copy(out[p:end], old[p:end])
			continue
		}
		// 0: old page, 1: new page, 2: new sectors then old ones.
		split := p
		switch c.intn(3) {
		case 1:
			split = end
		case 2:
			sectors := (end - p + ss - 1) / ss
			split = min(end, p+ss*c.intn(sectors+1))
		}
		for i := p; i < end; i++ {
			if i < split {
				out[i] = newByte(i)
			} else {
				out[i] = oldByte(i)
			}
		}
	}
	return out
}

// ---- files ----

type file struct {
	fs     *FS
	n      *node
	name   string
	write  bool
	off    int64
	closed bool
}

type fileInfo struct {
	name string
	size int64
	mode os.FileMode
}

func (i fileInfo) Name() string       { return i.name }
func (i fileInfo) Size() int64        { return i.size }
func (i fileInfo) Mode() os.FileMode  { return i.mode }
func (i fileInfo) ModTime() time.Time { return time.Time{} }
func (i fileInfo) IsDir() bool        { return i.mode.IsDir() }
func (i fileInfo) Sys() any           { return nil }

func info(name string, n *node) os.FileInfo {
	return fileInfo{name: path.Base("/" + filepath.ToSlash(name)), size: int64(len(n.data)), mode: n.mode}
}

func (f *file) check(op string, write bool) error {
	if f.closed {
		return pathErr(op, f.name, os.ErrClosed)
	}
	if write && !f.write {
		return pathErr(op, f.name, syscall.EBADF)
	}
	if f.n.dir && op != "stat" && op != "close" {
		return pathErr(op, f.name, syscall.EISDIR)
	}
	return nil
}

func (f *file) Read(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	if f.off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[f.off:])
	f.off += int64(n)
	return n, nil
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("read", f.name, syscall.EINVAL)
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *file) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	end := f.off + int64(len(p))
	if end > int64(len(f.n.data)) {
		f.n.data = append(f.n.data, make([]byte, end-int64(len(f.n.data)))...)
	}
	copy(f.n.data[f.off:], p)
	f.off = end
	f.fs.gen++
	return len(p), nil
}

func (f *file) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("close", f.name, os.ErrClosed)
	}
	f.closed = true
	return nil
}

// Sync makes the file's content (and size) durable.
func (f *file) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("sync", false); err != nil {
		return err
	}
	f.n.durable = slices.Clone(f.n.data)
	f.fs.durGen++
	f.fs.gen++
	f.fs.syncs++
	return nil
}

func (f *file) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return pathErr("truncate", f.name, syscall.EINVAL)
	}
	if size <= int64(len(f.n.data)) {
		f.n.data = f.n.data[:size:size]
	} else {
		f.n.data = append(f.n.data, make([]byte, size-int64(len(f.n.data)))...)
	}
	f.fs.gen++
	return nil
}

// Preallocate records the reservation; it does not change the size.
func (f *file) Preallocate(off, n int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("fallocate", true); err != nil {
		return err
	}
	if off < 0 || n < 0 {
		return pathErr("fallocate", f.name, syscall.EINVAL)
	}
	f.n.prealloc = max(f.n.prealloc, off+n)
	return nil
}

func (f *file) Seek(offset int64, whence int) (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("seek", false); err != nil {
		return 0, err
	}
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = f.off
	case io.SeekEnd:
		base = int64(len(f.n.data))
	default:
		return 0, pathErr("seek", f.name, syscall.EINVAL)
	}
	if base+offset < 0 {
		return 0, pathErr("seek", f.name, syscall.EINVAL)
	}
	f.off = base + offset
	return f.off, nil
}

func (f *file) Stat() (os.FileInfo, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("stat", false); err != nil {
		return nil, err
	}
	return info(f.name, f.n), nil
}

func (f *file) Name() string { return f.name }

// Birth is when the file was created in this file system.
func (f *file) Birth() time.Time {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.n.born
}
