package server

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
)

func TestListenUnixHardened(t *testing.T) {
	type check func(t *testing.T, path string)
	cases := []struct {
		name string
		// setup prepares base (a fresh directory) and returns the socket
		// path and a check that what must be untouched is untouched.
		setup   func(t *testing.T, base string) (string, check)
		wantErr string // "" means ListenUnix must succeed
	}{
		{
			name: "missing directory is created 0700",
			setup: func(t *testing.T, base string) (string, check) {
				path := filepath.Join(base, "a", "b", "s.sock")
				return path, func(t *testing.T, path string) {
					for _, d := range []string{filepath.Join(base, "a"), filepath.Dir(path)} {
						fi, err := os.Stat(d)
						if err != nil {
							t.Fatal(err)
						}
						if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
							t.Errorf("%s: mode %v, want a 0700 directory", d, fi.Mode())
						}
					}
				}
			},
		},
		{
			name: "stale socket is replaced",
			setup: func(t *testing.T, base string) (string, check) {
				path := filepath.Join(base, "s.sock")
				ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
				if err != nil {
					t.Fatal(err)
				}
				ln.SetUnlinkOnClose(false)
				ln.Close() // what a crashed daemon leaves behind
				if c, err := net.Dial("unix", path); !errors.Is(err, syscall.ECONNREFUSED) {
					if c != nil {
						c.Close()
					}
					t.Fatalf("dialing the stale socket: %v, want ECONNREFUSED", err)
				}
				// The check after ListenUnix dials the path: it serves again.
				return path, func(t *testing.T, path string) {}
			},
		},
		{
			name: "regular file is refused",
			setup: func(t *testing.T, base string) (string, check) {
				path := filepath.Join(base, "s.sock")
				writeFile(t, path, "precious")
				return path, func(t *testing.T, path string) { wantFile(t, path, "precious") }
			},
			wantErr: "is not a socket (a regular file)",
		},
		{
			name: "directory is refused",
			setup: func(t *testing.T, base string) (string, check) {
				path := filepath.Join(base, "s.sock")
				if err := os.Mkdir(path, 0o755); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(path, "inside"), "x")
				return path, func(t *testing.T, path string) {
					fi, err := os.Lstat(path)
					if err != nil || !fi.IsDir() {
						t.Fatalf("directory gone: %v %v", fi, err)
					}
					wantFile(t, filepath.Join(path, "inside"), "x")
				}
			},
			wantErr: "is not a socket (a directory)",
		},
		{
			name: "symlink to a live socket is refused",
			setup: func(t *testing.T, base string) (string, check) {
				target := filepath.Join(base, "other.sock")
				ln, err := net.Listen("unix", target)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ln.Close() })
				path := filepath.Join(base, "s.sock")
				if err := os.Symlink(target, path); err != nil {
					t.Fatal(err)
				}
				return path, func(t *testing.T, path string) {
					wantLink(t, path, target)
					fi, err := os.Lstat(target)
					if err != nil || fi.Mode().Type() != os.ModeSocket {
						t.Fatalf("target socket gone: %v %v", fi, err)
					}
					c, err := net.Dial("unix", target)
					if err != nil {
						t.Fatalf("target socket no longer serves: %v", err)
					}
					c.Close()
				}
			},
			wantErr: "is not a socket (a symbolic link)",
		},
		{
			name: "symlink to a file is refused",
			setup: func(t *testing.T, base string) (string, check) {
				target := filepath.Join(base, "target")
				writeFile(t, target, "precious")
				path := filepath.Join(base, "s.sock")
				if err := os.Symlink(target, path); err != nil {
					t.Fatal(err)
				}
				return path, func(t *testing.T, path string) {
					wantLink(t, path, target)
					wantFile(t, target, "precious")
				}
			},
			wantErr: "is not a socket (a symbolic link)",
		},
		{
			name: "dangling symlink is refused",
			setup: func(t *testing.T, base string) (string, check) {
				target := filepath.Join(base, "nowhere")
				path := filepath.Join(base, "s.sock")
				if err := os.Symlink(target, path); err != nil {
					t.Fatal(err)
				}
				return path, func(t *testing.T, path string) {
					wantLink(t, path, target)
					if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("link target created: %v", err)
					}
				}
			},
			wantErr: "is not a socket (a symbolic link)",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := shortDir(t)
			path, chk := tc.setup(t, base)
			// A permissive umask must not leak into the socket's mode.
			old := syscall.Umask(0)
			srv := New(Options{Logger: discardLogger()}, &fakeBackend{shards: 1})
			err := srv.ListenUnix(path)
			syscall.Umask(old)
			defer srv.Shutdown(context.Background())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ListenUnix: %v, want an error containing %q", err, tc.wantErr)
				}
				chk(t, path)
				// The lock was released: the path is free for a retry once
				// the obstacle is gone.
				lk, err := vfs.OS.Lock(path + ".lock")
				if err != nil {
					t.Fatalf("lock still held after a refused ListenUnix: %v", err)
				}
				lk.Close()
				return
			}
			if err != nil {
				t.Fatalf("ListenUnix: %v", err)
			}
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
				t.Errorf("socket mode %v, want a 0600 socket", fi.Mode())
			}
			chk(t, path)
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatalf("dial the new socket: %v", err)
			}
			c.Close()
		})
	}
}

func TestListenUnixSecondListenerFailsOnLock(t *testing.T) {
	path := filepath.Join(shortDir(t), "s.sock")
	a := New(Options{Logger: discardLogger()}, &fakeBackend{shards: 1})
	if err := a.ListenUnix(path); err != nil {
		t.Fatal(err)
	}
	before, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	b := New(Options{Logger: discardLogger()}, &fakeBackend{shards: 1})
	err = b.ListenUnix(path)
	if err == nil {
		b.Shutdown(context.Background())
		t.Fatal("second ListenUnix on the same path succeeded")
	}
	if !errors.Is(err, vfs.ErrLocked) || !strings.Contains(err.Error(), path+".lock") {
		t.Errorf("error %q does not name the lock %s.lock (or is not ErrLocked)", err, path)
	}
	// The first daemon's socket is untouched and still serves.
	after, err := os.Lstat(path)
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("first socket replaced or removed: %v", err)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("first socket no longer serves: %v", err)
	}
	c.Close()
	b.Shutdown(context.Background())

	// Once the first one shuts down the path can be taken again.
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	c2 := New(Options{Logger: discardLogger()}, &fakeBackend{shards: 1})
	if err := c2.ListenUnix(path); err != nil {
		t.Fatalf("ListenUnix after the first server shut down: %v", err)
	}
	c2.Shutdown(context.Background())
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func wantFile(t *testing.T, path, content string) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Errorf("%s: mode changed to %v", path, fi.Mode())
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != content {
		t.Errorf("%s: content %q (%v), want %q", path, b, err, content)
	}
}

func wantLink(t *testing.T, path, target string) {
	t.Helper()
	got, err := os.Readlink(path)
	if err != nil || got != target {
		t.Errorf("%s: link %q (%v), want it still pointing at %q", path, got, err, target)
	}
}
