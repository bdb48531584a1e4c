package wab

import (
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs"
)

// gateFS holds every fdatasync of a file it created while armed is set,
// until gate is closed.
type gateFS struct {
	vfs.FS
	armed atomic.Bool
	gate  chan struct{}
}

type gateFile struct {
	vfs.File
	fs *gateFS
}

func (g *gateFS) Create(name string, perm os.FileMode) (vfs.File, error) {
	f, err := g.FS.Create(name, perm)
	if err != nil {
		return nil, err
	}
	return gateFile{File: f, fs: g}, nil
}

func (f gateFile) Sync() error {
	if f.fs.armed.Load() {
		<-f.fs.gate
	}
	return f.File.Sync()
}

func TestFlusherBusy(t *testing.T) {
	fs := &gateFS{FS: vfs.OS, gate: make(chan struct{})}
	o := testOpts(t.TempDir())
	o.FS = fs
	l := mustOpen(t, o)
	defer mustClose(t, l)
	release := func() {
		if fs.armed.Swap(false) {
			close(fs.gate)
		}
	}
	defer release() // before Close, even when the test fails

	waitIdle := func(what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for l.FlusherBusy(0) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: FlusherBusy = %v, want 0", what, l.FlusherBusy(0))
			}
			time.Sleep(time.Millisecond)
		}
	}
	// The flusher prepares its first segment as it starts.
	waitIdle("idle flusher")
	if got := l.FlusherBusy(7); got != 0 {
		t.Fatalf("out-of-range shard: FlusherBusy = %v, want 0", got)
	}

	fs.armed.Store(true)
	done := make(chan error, 1)
	req := &Request{Durability: Durable, Payloads: [][]byte{[]byte("x")}, Received: 1, Done: func(err error) { done <- err }}
	if err := l.Submit(t.Context(), 0, req, time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for l.FlusherBusy(0) < 50*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("flusher held in fdatasync: FlusherBusy = %v", l.FlusherBusy(0))
		}
		time.Sleep(5 * time.Millisecond)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitIdle("flusher done with its batch")
}
