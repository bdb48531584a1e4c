package filesink

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/weir-io/weir/internal/vfs"
)

// faultFS wraps a real FS, records operations, and fails Sync or Write on
// demand.
type faultFS struct {
	vfs.FS
	mu        sync.Mutex
	ops       []string
	failSync  int // fail the next n file syncs
	failWrite int // fail the next n writes
	failDir   int // fail the next n directory syncs
	failed    map[string]bool
	// syncAfterFail counts syncs of a file after one of its syncs failed.
	syncAfterFail int
}

func newFaultFS() *faultFS { return &faultFS{FS: vfs.OS, failed: map[string]bool{}} }

func (fs *faultFS) log(op, name string) {
	fs.mu.Lock()
	fs.ops = append(fs.ops, op+" "+filepath.Base(name))
	fs.mu.Unlock()
}

func (fs *faultFS) opList() []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]string(nil), fs.ops...)
}

func (fs *faultFS) Create(name string, perm os.FileMode) (vfs.File, error) {
	f, err := fs.FS.Create(name, perm)
	if err != nil {
		return nil, err
	}
	fs.log("create", name)
	return &faultFile{File: f, fs: fs}, nil
}

func (fs *faultFS) OpenReadWrite(name string) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: f, fs: fs}, nil
}

func (fs *faultFS) Rename(a, b string) error {
	fs.log("rename", filepath.Base(a)+" -> "+filepath.Base(b))
	return fs.FS.Rename(a, b)
}

func (fs *faultFS) SyncDir(dir string) error {
	fs.mu.Lock()
	fail := fs.failDir > 0
	if fail {
		fs.failDir--
	}
	fs.mu.Unlock()
	fs.log("syncdir", dir)
	if fail {
		return errors.New("injected directory sync failure")
	}
	return fs.FS.SyncDir(dir)
}

type faultFile struct {
	vfs.File
	fs *faultFS
}

func (f *faultFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	fail := f.fs.failWrite > 0
	if fail {
		f.fs.failWrite--
	}
	f.fs.mu.Unlock()
	f.fs.log("write", f.Name())
	if fail {
		n, _ := f.File.Write(p[:len(p)/2]) // a torn write
		return n, syscall.ENOSPC
	}
	return f.File.Write(p)
}

func (f *faultFile) Sync() error {
	f.fs.mu.Lock()
	name := f.Name()
	if f.fs.failed[name] {
		f.fs.syncAfterFail++
	}
	fail := f.fs.failSync > 0
	if fail {
		f.fs.failSync--
		f.fs.failed[name] = true
	}
	f.fs.mu.Unlock()
	f.fs.log("sync", name)
	if fail {
		return syscall.EIO
	}
	return f.File.Sync()
}
