package server

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/weir-io/weir/internal/vfs"
)

// umaskMu serialises the process-wide umask change around bind(2).
var umaskMu sync.Mutex

// listenUnix binds a Unix socket at path the safe way:
//
//  1. the socket's directory is created mode 0700 if missing;
//  2. an exclusive lock on path+".lock" is taken and kept for the
//     listener's lifetime, so a second daemon on the same path fails here;
//  3. whatever is at path is examined with Lstat (links are not followed):
//     a leftover socket is removed (we hold the lock, so nobody serves it);
//     anything else — a regular file, a directory, a symlink — is refused and
//     left untouched;
//  4. the socket is created with a umask of 0177, so its inode is mode 0600
//     from the moment it exists: there is no chmod after listen and no window
//     in which another user could connect.
func listenUnix(path string) (*net.UnixListener, io.Closer, error) {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, nil, fmt.Errorf("create socket directory %s: %w", dir, err)
		}
	}
	lockPath := path + ".lock"
	lock, err := vfs.OS.Lock(lockPath)
	if err != nil {
		if errors.Is(err, vfs.ErrLocked) {
			return nil, nil, fmt.Errorf("socket %s is in use by another weir daemon (it holds %s): %w", path, lockPath, err)
		}
		return nil, nil, fmt.Errorf("lock socket path: %w", err)
	}
	fail := func(err error) (*net.UnixListener, io.Closer, error) {
		lock.Close()
		return nil, nil, err
	}
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode().Type() == fs.ModeSocket:
		if err := os.Remove(path); err != nil {
			return fail(fmt.Errorf("remove stale socket %s: %w", path, err))
		}
	case err == nil:
		return fail(fmt.Errorf("socket path %s exists and is not a socket (%s); refusing to remove it", path, describeMode(fi.Mode())))
	case !errors.Is(err, fs.ErrNotExist):
		return fail(fmt.Errorf("inspect socket path %s: %w", path, err))
	}

	umaskMu.Lock()
	old := syscall.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	umaskMu.Unlock()
	if err != nil {
		return fail(fmt.Errorf("listen on %s: %w", path, err))
	}
	return ln, lock, nil
}

func describeMode(m fs.FileMode) string {
	switch m.Type() {
	case 0:
		return "a regular file"
	case fs.ModeDir:
		return "a directory"
	case fs.ModeSymlink:
		return "a symbolic link"
	case fs.ModeNamedPipe:
		return "a named pipe"
	case fs.ModeDevice, fs.ModeDevice | fs.ModeCharDevice:
		return "a device"
	default:
		return m.Type().String()
	}
}
