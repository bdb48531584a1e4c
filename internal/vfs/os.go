package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// OS is the real file system.
var OS FS = osFS{}

type osFS struct{}

type osFile struct{ *os.File }

// call makes a system call again for as long as it is interrupted
// (EINTR); it returns nil, or the error as an *os.PathError naming op and
// the file, except the errnos in unsupported, which mean "not here" and
// also return nil.
func (f osFile) call(op string, fn func() error, unsupported ...unix.Errno) error {
	for {
		err := fn()
		switch {
		case err == nil:
			return nil
		case err == unix.EINTR:
			continue
		}
		for _, u := range unsupported {
			if err == u {
				return nil
			}
		}
		return &os.PathError{Op: op, Path: f.File.Name(), Err: err}
	}
}

func (f osFile) Sync() error {
	return f.call("fdatasync", func() error { return unix.Fdatasync(int(f.Fd())) })
}

func (f osFile) Birth() time.Time { return Birth(f.File) }

// Birth is f's creation time (statx's btime) where the file system
// records it, else the zero time.
func Birth(f *os.File) time.Time {
	var st unix.Statx_t
	for {
		err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_BTIME, &st)
		if err == unix.EINTR {
			continue
		}
		if err != nil || st.Mask&unix.STATX_BTIME == 0 {
			return time.Time{}
		}
		return time.Unix(st.Btime.Sec, int64(st.Btime.Nsec))
	}
}

func (f osFile) Preallocate(off, n int64) error {
	if n <= 0 {
		return nil
	}
	// Not supported here (EOPNOTSUPP, ENOSYS): growing on write still works.
	err := f.call("fallocate", func() error {
		return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
	}, unix.EOPNOTSUPP, unix.ENOSYS)
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		// ext4 keeps the blocks a fallocate found before it ran out of
		// space: left there, they would fill the disk for everything
		// else. A truncate to the file's own size frees every block past
		// its end and leaves its content as it is.
		if fi, serr := f.File.Stat(); serr == nil {
			f.File.Truncate(fi.Size())
		}
	}
	return err
}

// StartWriteback implements WritebackStarter.
func (f osFile) StartWriteback(off, n int64) error {
	return f.call("sync_file_range", func() error {
		return unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
	}, unix.EOPNOTSUPP, unix.ENOSYS)
}

func (osFS) Create(name string, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) OpenReadWrite(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (osFS) Remove(name string) error             { return os.Remove(name) }
func (osFS) Stat(name string) (os.FileInfo, error) {
	return os.Stat(name)
}

func (fs osFS) MkdirAll(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return &os.PathError{Op: "mkdir", Path: dir, Err: unix.ENOTDIR}
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := fs.MkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return fs.SyncDir(parent)
}

func (osFS) ReadDir(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

type flock struct{ f *os.File }

func (l flock) Close() error {
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	return l.f.Close()
}

// ErrLocked is returned by Lock when another process holds the lock.
var ErrLocked = errors.New("locked by another process")

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, fmt.Errorf("lock %s: %w", name, ErrLocked)
		}
		return nil, &os.PathError{Op: "flock", Path: name, Err: err}
	}
	return flock{f}, nil
}
