package enginetest

import (
	"context"
	"testing"
	"time"

	"github.com/weir-io/weir/source"
)

// Running is a source's Run in a goroutine, for tests.
type Running struct {
	cancel context.CancelFunc
	done   chan error
}

// Start runs src.Run(ctx, gate, cursors) until Stop.
func Start(ctx context.Context, src source.Source, gate source.Gate, cursors source.CursorStore) *Running {
	ctx, cancel := context.WithCancel(ctx)
	r := &Running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- src.Run(ctx, gate, cursors) }()
	return r
}

// Stop cancels the run and fails the test if Run returned an error or did
// not return within 30 seconds.
func (r *Running) Stop(t testing.TB) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("source did not stop")
	}
}

// Done yields Run's result once it returns (for tests that expect it to
// stop by itself).
func (r *Running) Done() <-chan error { return r.done }

// Cancel cancels the run without waiting (after Done has yielded).
func (r *Running) Cancel() { r.cancel() }
