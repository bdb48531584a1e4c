package wab

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

// TestQueueByteCap: a shard's queue holds at most QueueCapacityBytes of
// payload and meta bytes; a Submit that finds no room waits up to its wait
// (ErrQueueTimeout, its bytes given back) and is queued as soon as the
// flusher frees room; a request larger than the bound enters an empty
// queue; QueueFill reports the byte share.
func TestQueueByteCap(t *testing.T) {
	o := testOpts(t.TempDir())
	o.QueueCapacityBytes = 100
	l := mustOpen(t, o)
	defer mustClose(t, l)
	ctx := context.Background()
	var wg sync.WaitGroup
	req := func(n, meta int) *Request {
		wg.Add(1)
		r := &Request{Payloads: [][]byte{make([]byte, n)}, Done: func(err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("Done(%v)", err)
			}
		}}
		if meta > 0 {
			r.Metas = [][]byte{make([]byte, meta)}
		}
		return r
	}
	fill := func(want float64) {
		t.Helper()
		if got := l.QueueFill(0); math.Abs(got-want) > 1e-9 {
			t.Fatalf("QueueFill = %v, want %v", got, want)
		}
	}
	// Hold the flusher inside the first request's Done: what follows
	// stays queued.
	entered, release := make(chan struct{}), make(chan struct{})
	wg.Add(1)
	first := &Request{Payloads: [][]byte{make([]byte, 10)}, Done: func(error) { defer wg.Done(); close(entered); <-release }}
	if err := l.Submit(ctx, 0, first, time.Second); err != nil {
		t.Fatal(err)
	}
	<-entered
	fill(0)
	if err := l.Submit(ctx, 0, req(50, 10), time.Second); err != nil {
		t.Fatal(err)
	}
	fill(0.6)
	start := time.Now()
	r := &Request{Payloads: [][]byte{make([]byte, 50)}, Done: func(error) { t.Error("Done of a refused request") }}
	if err := l.Submit(ctx, 0, r, 20*time.Millisecond); !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("no room: %v, want ErrQueueTimeout", err)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("refused after %v, before its wait", d)
	}
	if err := l.Submit(ctx, 0, r, 0); !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("no room, no wait: %v, want ErrQueueTimeout", err)
	}
	fill(0.6)
	// A batch counts all its requests' bytes.
	if err := l.SubmitBatch(ctx, 0, []*Request{req(20, 0), req(20, 0)}, time.Second); err != nil {
		t.Fatal(err)
	}
	fill(1)
	// A waiting Submit is queued once the flusher frees room.
	waited := make(chan error, 1)
	go func() { waited <- l.Submit(ctx, 0, req(30, 0), 10*time.Second) }()
	waitFor(t, "the Submit to wait for room", func() bool { return l.shards[0].bytesWaiters.Load() == 1 })
	close(release)
	if err := <-waited; err != nil {
		t.Fatalf("waiting Submit: %v", err)
	}
	wg.Wait()
	waitFor(t, "the queue to empty", func() bool { return l.QueueFill(0) == 0 })
	// Larger than the bound: accepted into an empty queue.
	if err := l.Submit(ctx, 0, req(150, 0), 0); err != nil {
		t.Fatalf("oversized request into an empty queue: %v", err)
	}
	wg.Wait()
	waitFor(t, "the queue to empty", func() bool { return l.shards[0].queuedBytes.Load() == 0 })
}

// TestQueueByteWaitEndsAtClose: a Submit waiting for room returns
// ErrClosed when the log closes, and its bytes are not counted.
func TestQueueByteWaitEndsAtClose(t *testing.T) {
	o := testOpts(t.TempDir())
	o.QueueCapacityBytes = 10
	l := mustOpen(t, o)
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	if err := l.Submit(ctx, 0, &Request{Payloads: [][]byte{{1}}, Done: func(error) { close(entered); <-release }}, time.Second); err != nil {
		t.Fatal(err)
	}
	<-entered
	queued := make(chan error, 1)
	if err := l.Submit(ctx, 0, &Request{Payloads: [][]byte{make([]byte, 10)}, Done: func(err error) { queued <- err }}, time.Second); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		waited <- l.Submit(ctx, 0, &Request{Payloads: [][]byte{{2}}, Done: func(error) { t.Error("Done of a refused request") }}, time.Minute)
	}()
	waitFor(t, "the Submit to wait for room", func() bool { return l.shards[0].bytesWaiters.Load() == 1 })
	closed := make(chan error, 1)
	go func() { closed <- l.Close(ctx) }()
	if err := <-waited; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiting Submit at Close: %v, want ErrClosed", err)
	}
	close(release)
	if err := <-queued; err != nil {
		t.Fatalf("queued request: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if n := l.shards[0].queuedBytes.Load(); n != 0 {
		t.Fatalf("%d bytes still counted", n)
	}
}

// waitFor polls cond until it holds, failing after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
