// Package vfs is the file-system seam of weir. Every byte the write-ahead
// buffer, the drain and the file sink put on disk goes through an FS, so that
// tests can inject faults (package errorfs) or simulate crashes without
// touching the code under test.
//
// The interface is deliberately small and durability-explicit: Sync on a File
// is fdatasync(2); SyncDir makes directory entries (create, rename, unlink)
// durable. Nothing in weir assumes that a rename or a create is durable until
// SyncDir on the parent directory has returned nil.
package vfs

import (
	"io"
	"os"
	"time"
)

// WritebackStarter is implemented by files that can start writing a range
// of their dirty pages to disk without waiting for it
// (sync_file_range(SYNC_FILE_RANGE_WRITE) on Linux). It promises nothing
// about durability — only Sync does — it only spreads the work of a later
// Sync out in time. Callers use it where available and skip it elsewhere.
type WritebackStarter interface {
	StartWriteback(off, n int64) error
}

// StartWriteback starts writeback of [off, off+n) of f if f can (see
// WritebackStarter), else does nothing.
func StartWriteback(f File, off, n int64) error {
	if w, ok := f.(WritebackStarter); ok && n > 0 {
		return w.StartWriteback(off, n)
	}
	return nil
}

// File is an open file. Implementations must keep one descriptor from write
// to sync: weir never closes and reopens a file between a write and the sync
// that makes it durable.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.Closer

	// Sync flushes the file's data (and the metadata needed to read it back,
	// such as its size) to stable storage: fdatasync(2). After Sync returns an
	// error the file's state on disk is unknown and Sync must not be retried.
	Sync() error
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Preallocate reserves [off, off+n) on disk without changing the file's
	// size (fallocate with FALLOC_FL_KEEP_SIZE). It may be a no-op where the
	// platform cannot do it. ENOSPC surfaces here rather than mid-write.
	// A call that runs out of space (ENOSPC, EDQUOT) may release every
	// reservation past the end of the file, earlier ones included: the
	// real one does, since ext4 keeps what a failed fallocate found, by
	// truncating the file to its size — so nothing may write the file
	// while Preallocate runs.
	Preallocate(off, n int64) error
	// Seek sets the offset for the next Read or Write.
	Seek(offset int64, whence int) (int64, error)
	// Stat describes the file.
	Stat() (os.FileInfo, error)
	// Birth is when the file (its inode) was created, where the file
	// system records it (statx's btime: ext4, xfs, btrfs, tmpfs), else
	// the zero time. It never changes while the file exists.
	Birth() time.Time
	// Name is the path the file was opened with.
	Name() string
}

// FS is a file system.
type FS interface {
	// Create creates a new file for reading and writing with the given
	// permissions; it fails if the file exists (O_CREATE|O_EXCL).
	Create(name string, perm os.FileMode) (File, error)
	// OpenReadWrite opens an existing file for reading and writing.
	OpenReadWrite(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	// Rename renames oldname to newname, replacing newname if it exists.
	// The rename is durable only after SyncDir on both parent directories.
	Rename(oldname, newname string) error
	// Remove removes a file or an empty directory. Durable only after SyncDir.
	Remove(name string) error
	// MkdirAll creates a directory and its parents. New directories are
	// synced (and their parents) so that the directory itself survives a
	// crash.
	MkdirAll(dir string, perm os.FileMode) error
	// ReadDir lists the names in dir, sorted.
	ReadDir(dir string) ([]string, error)
	// Stat describes the named file, following symbolic links.
	Stat(name string) (os.FileInfo, error)
	// SyncDir fsyncs a directory so that entries created, renamed or removed
	// in it are durable.
	SyncDir(dir string) error
	// Lock takes an exclusive advisory lock (flock) on the named file,
	// creating it if needed. It fails at once, without waiting, if another
	// process holds the lock. Closing the returned Closer releases it.
	Lock(name string) (io.Closer, error)
}
