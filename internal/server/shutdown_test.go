package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/weir-io/weir/wab"
	"github.com/weir-io/weir/wire"
)

func TestShutdownAnswersInFlight(t *testing.T) {
	sfs := newSlowFS()
	e := newEnv(t, envConfig{fs: sfs})
	conns := []*rawConn{e.dial(), e.dial()}
	for _, c := range conns {
		c.push(100, wire.Durable, []byte("warm-up"))
		c.expectAck(100, 1)
	}
	sfs.setDelay(200 * time.Millisecond)
	const perConn = 20
	for _, c := range conns {
		var frames []byte
		for i := range perConn {
			d := wire.Durable
			if i%2 == 1 {
				d = wire.Buffered
			}
			frames = pushFrame(frames, uint64(i+1), d, fmt.Appendf(nil, "r%d", i))
		}
		c.send(frames)
	}
	waitFor(t, "every frame to be received", func() bool { return e.obs.received.Load() == 2+2*perConn })
	time.Sleep(20 * time.Millisecond) // and submitted

	errc := make(chan error, 1)
	go func() { errc <- e.shutdown(context.Background()) }()
	for _, c := range conns {
		for i := range perConn {
			c.expectAck(uint64(i+1), 1)
		}
		c.expectClosed(answerTimeout)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func TestShutdownRefusesBufferedFrames(t *testing.T) {
	sfs := newSlowFS()
	e := newEnv(t, envConfig{fs: sfs, opts: Options{ConnMaxInflight: 1}})
	c := e.dial()
	c.push(100, wire.Durable, []byte("warm-up"))
	c.expectAck(100, 1)
	sfs.setDelay(200 * time.Millisecond)

	// One write, so the five frames arrive together in the reader's buffer.
	// With a window of one the reader stops with frame 2 decoded (1 is in
	// the window, 2 waits for room); 3 to 5 stay buffered.
	var frames []byte
	for i := range 5 {
		frames = pushFrame(frames, uint64(i+1), wire.Durable, fmt.Appendf(nil, "r%d", i))
	}
	c.send(frames)
	waitFor(t, "the reader to block on a full window", func() bool { return e.obs.received.Load() == 1+2 })
	time.Sleep(20 * time.Millisecond)
	if got := e.obs.received.Load(); got != 3 {
		t.Fatalf("reader decoded %d frames, want 2 (window of one)", got-1)
	}

	errc := make(chan error, 1)
	go func() { errc <- e.shutdown(context.Background()) }()
	for id := uint64(1); id <= 2; id++ {
		c.expectAck(id, 1)
	}
	for id := uint64(3); id <= 5; id++ {
		resp := c.expectNack(id, wire.CodeShuttingDown)
		if resp.Message == "" {
			t.Error("ShuttingDown Nack without a message")
		}
	}
	c.expectClosed(answerTimeout)
	if err := <-errc; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// queueOnly makes every lone frame go through the flusher (never written
// by the reader itself), so that a stuck fdatasync holds the flusher, not
// the connection's reader.
type queueOnly struct{ Backend }

func (b queueOnly) SubmitInline(ctx context.Context, shard int, req *wab.Request, wait time.Duration) error {
	return b.Submit(ctx, shard, req, wait)
}

// TestShutdownExpiredContextReturnsPromptly: with requests stuck behind
// the flusher's fdatasync, Shutdown with an expired context returns at
// once. (A lone frame a reader writes itself holds that reader in the
// storage call instead; Shutdown waits for it — see Server.Shutdown.)
func TestShutdownExpiredContextReturnsPromptly(t *testing.T) {
	sfs := newSlowFS()
	e := newEnv(t, envConfig{
		fs:   sfs,
		opts: Options{QueueTimeout: time.Minute},
		wab:  wab.Options{QueueCapacity: 1},
		wrap: func(l *wab.Log) Backend { return queueOnly{l} },
	})
	c := e.dial()
	c.push(100, wire.Durable, []byte("warm-up"))
	c.expectAck(100, 1)
	idle := e.dial()
	idle.push(1, wire.Buffered, []byte("idle"))
	idle.expectAck(1, 1)

	// Request 1 is stuck in fdatasync, 2 waits in the queue, 3 waits for
	// queue space: nothing will complete on its own.
	sfs.block()
	c.push(1, wire.Durable, []byte("stuck in sync"))
	waitFor(t, "the sync to start", func() bool { return sfs.syncs.Load() >= 2 })
	c.push(2, wire.Durable, []byte("queued"))
	c.push(3, wire.Durable, []byte("waiting for queue space"))
	waitFor(t, "every frame to be received", func() bool { return e.obs.received.Load() == 5 })

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errc := make(chan error, 1)
	t0 := time.Now()
	go func() { errc <- e.shutdown(ctx) }()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Shutdown: %v, want context.Canceled", err)
		}
		if d := time.Since(t0); d > time.Second {
			t.Errorf("Shutdown with an expired context took %v", d)
		}
	case <-time.After(3 * time.Second):
		sfs.release()
		<-errc
		t.Fatal("Shutdown with an expired context waited for the storage")
	}
	// The connections are closed; nothing stuck was acknowledged.
	for _, rc := range []*rawConn{c, idle} {
		for {
			resp, err := rc.read()
			if err != nil {
				break
			}
			if resp.Type == wire.TypeAck {
				t.Errorf("request %d acknowledged although its sync never finished", resp.RequestID)
			}
		}
	}
	sfs.release()
}

func TestNoConnectionsAfterShutdown(t *testing.T) {
	e := newEnv(t, envConfig{})
	c := e.dial()
	c.push(1, wire.Durable, []byte("x"))
	c.expectAck(1, 1)
	if err := e.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.expectClosed(answerTimeout)
	if nc, err := net.Dial("unix", e.sock); err == nil {
		nc.Close()
		t.Fatal("dial succeeded after Shutdown")
	}
	// Nor through a listener handed over after Shutdown.
	dir := shortDir(t)
	ln, err := net.Listen("unix", dir+"/late.sock")
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Serve(ln)
	nc, err := net.Dial("unix", dir+"/late.sock")
	if err == nil {
		late := &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
		late.push(1, wire.Durable, []byte("late"))
		late.expectClosed(answerTimeout)
		nc.Close()
	}
	if err := e.srv.ListenUnix(dir + "/late2.sock"); err == nil {
		t.Error("ListenUnix succeeded after Shutdown")
	}
	if got := e.obs.opened.Load(); got != 1 {
		t.Errorf("%d connections opened, want 1", got)
	}
}
