package drain

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// gateFS holds the creation of confirmed sidecars while armed is set,
// until gate is closed: the drain is then stuck on its own I/O.
type gateFS struct {
	vfs.FS
	armed atomic.Bool
	gate  chan struct{}
}

func (g *gateFS) Create(name string, perm os.FileMode) (vfs.File, error) {
	if g.armed.Load() && strings.Contains(name, ".confirmed") {
		<-g.gate
	}
	return g.FS.Create(name, perm)
}

// TestBusy checks the drain's heartbeat: zero while idle and while a sink
// call is in progress (however long), growing while the drain itself is
// held on its own I/O.
func TestBusy(t *testing.T) {
	dir := t.TempDir()
	fs := &gateFS{FS: vfs.OS, gate: make(chan struct{})}
	inCommit := make(chan struct{}, 1)
	unblockSink := make(chan struct{})
	s := &scriptSink{max: 10, script: func(ctx context.Context, call int, b sink.Batch) (sink.CommitResult, error) {
		if call == 0 {
			inCommit <- struct{}{}
			select {
			case <-unblockSink:
			case <-ctx.Done():
			}
		}
		return sink.CommitResult{}, nil
	}}
	src := newDirSource(dir)
	d, err := New(Options{FS: fs, WABDir: dir, Source: src, Sink: s, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Busy(); got != 0 {
		t.Fatalf("before Run: Busy = %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		if fs.armed.Swap(false) {
			close(fs.gate)
		}
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		if got := d.Busy(); got != 0 {
			t.Errorf("after Run: Busy = %v", got)
		}
	}()

	writeSegment(t, dir, 0, 1, payloads("a", 3)...)
	<-inCommit
	time.Sleep(50 * time.Millisecond)
	if got := d.Busy(); got != 0 {
		t.Fatalf("during a slow Sink.Commit: Busy = %v, want 0", got)
	}
	fs.armed.Store(true)
	close(unblockSink)
	waitFor(t, "drain held on its sidecar write to count as busy", func() bool { return d.Busy() >= 50*time.Millisecond })
	fs.armed.Store(false)
	close(fs.gate)
	waitFor(t, "segment delivered", func() bool { return len(s.got()) == 1 && !exists(src.dir+"/shard-000/00000000000000000001.wab.sealed") })
	waitFor(t, "idle drain to count as not busy", func() bool { return d.Busy() == 0 })
}
