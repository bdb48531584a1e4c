package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/wab"
	"github.com/weir-io/weir/wire"
)

func TestClientRoundTrip(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	c, err := client.Dial(ctx, e.sock, client.WithLogger(discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := c.Push(ctx, []byte("one"), client.Durable); err != nil {
		t.Fatalf("durable push: %v", err)
	}
	if err := c.PushBatch(ctx, [][]byte{[]byte("a"), []byte("b"), []byte("c")}, client.Buffered); err != nil {
		t.Fatalf("buffered batch: %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Add(1)
		d := client.Durable
		if i%2 == 1 {
			d = client.Buffered
		}
		if err := c.PushAsync(ctx, [][]byte{fmt.Appendf(nil, "r%d", i)}, d, func(err error) {
			errs <- err
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("async push: %v", err)
		}
	}
	if got := e.obs.acked.Load(); got != 102 {
		t.Errorf("observer counted %d acks, want 102", got)
	}
}

func TestMaxConnections(t *testing.T) {
	e := newEnv(t, envConfig{opts: Options{MaxConnections: 2}})
	a, b := e.dial(), e.dial()
	a.push(1, wire.Durable, []byte("a"))
	a.expectAck(1, 1)
	b.push(1, wire.Durable, []byte("b"))
	b.expectAck(1, 1)

	c := e.dial()
	c.expectClosed(answerTimeout)
	if got := e.obs.rejectedFor("max_connections"); got != 1 {
		t.Errorf("rejected for max_connections: %d, want 1", got)
	}
	// The first two are unaffected.
	a.push(2, wire.Buffered, []byte("a2"))
	a.expectAck(2, 1)
	b.push(2, wire.Buffered, []byte("b2"))
	b.expectAck(2, 1)

	// Closing one frees its slot.
	a.nc.Close()
	waitFor(t, "the closed connection to release its slot", func() bool { return e.obs.closed.Load() == 1 })
	d := e.dial()
	d.push(7, wire.Durable, []byte("d"))
	d.expectAck(7, 1)
	b.push(3, wire.Durable, []byte("b3"))
	b.expectAck(3, 1)
}

// TestReconnectStorm: max_connections counts connections open at once.
// Producers that connect and close one after another — bare, or after
// pushing a frame whose answer they do not wait for — never have more than
// one connection open, so neither they nor a producer right after them may
// be refused, however far the daemon lags behind in noticing the closes.
func TestReconnectStorm(t *testing.T) {
	for _, tc := range []struct {
		name string
		push wire.Durability
	}{{"connect and close", 0}, {"push buffered and close", wire.Buffered}, {"push durable and close", wire.Durable}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{opts: Options{MaxConnections: 2}})
			for i := range 200 {
				nc, err := net.Dial("unix", e.sock)
				if err != nil {
					t.Fatalf("dial %d: %v", i, err)
				}
				if tc.push != 0 {
					_, _ = nc.Write(pushFrame(nil, 1, tc.push, []byte("storm")))
				}
				nc.Close()
			}
			// Every storm connection is closed on the server's side too —
			// none leaks a slot — before the live one dials (a Durable
			// push's fdatasync can outlast slotWait on a busy machine).
			deadline := time.Now().Add(5 * time.Second)
			for e.obs.closed.Load() < e.obs.opened.Load() {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d storm connections still open on the server after 5s", e.obs.opened.Load()-e.obs.closed.Load(), e.obs.opened.Load())
				}
				time.Sleep(5 * time.Millisecond)
			}
			live := e.dial()
			live.push(1, wire.Durable, []byte("after the storm"))
			live.expectAck(1, 1)
			if got := e.obs.rejectedFor("max_connections"); got != 0 {
				t.Errorf("%d connections refused for max_connections; at most one was open at a time", got)
			}
		})
	}
}

// TestMaxConnectionsRefusesBurstAtOnce: with the limit reached by open
// connections, a burst of newcomers costs one slotWait, not one each.
func TestMaxConnectionsRefusesBurstAtOnce(t *testing.T) {
	e := newEnv(t, envConfig{opts: Options{MaxConnections: 2}})
	for _, c := range []*rawConn{e.dial(), e.dial()} {
		c.push(1, wire.Buffered, []byte("hold"))
		c.expectAck(1, 1)
	}
	const burst = 20
	start := time.Now()
	for range burst {
		e.dial().expectClosed(answerTimeout)
	}
	took := time.Since(start)
	if got := e.obs.rejectedFor("max_connections"); got != burst {
		t.Errorf("refused %d, want %d", got, burst)
	}
	if took > burst/2*slotWait {
		t.Errorf("refusing %d connections took %v; only the first should wait (%v)", burst, took, slotWait)
	}
}

// timedBackend records how long each Submit took and what it returned.
// timedBackend times each Submit. It embeds the Backend interface, not the
// *wab.Log, so that it is not a BatchBackend: every frame is submitted on
// its own, through it.
type timedBackend struct {
	Backend
	mu    sync.Mutex
	calls []submitCall
}

type submitCall struct {
	took time.Duration
	err  error
}

func (b *timedBackend) Submit(ctx context.Context, shard int, req *wab.Request, wait time.Duration) error {
	return b.time(ctx, b.Backend.Submit, shard, req, wait)
}

func (b *timedBackend) SubmitInline(ctx context.Context, shard int, req *wab.Request, wait time.Duration) error {
	return b.time(ctx, b.Backend.SubmitInline, shard, req, wait)
}

func (b *timedBackend) time(ctx context.Context, submit func(context.Context, int, *wab.Request, time.Duration) error,
	shard int, req *wab.Request, wait time.Duration) error {
	t0 := time.Now()
	err := submit(ctx, shard, req, wait)
	b.mu.Lock()
	b.calls = append(b.calls, submitCall{time.Since(t0), err})
	b.mu.Unlock()
	return err
}

func TestQueueFullNacksAfterBoundedWait(t *testing.T) {
	const (
		syncDelay    = 300 * time.Millisecond
		queueTimeout = 50 * time.Millisecond
		n            = 24
		slack        = 250 * time.Millisecond // shared machine, race detector
	)
	sfs := newSlowFS()
	var tb *timedBackend
	e := newEnv(t, envConfig{
		fs:   sfs,
		opts: Options{QueueTimeout: queueTimeout},
		wab:  wab.Options{QueueCapacity: 1},
		wrap: func(l *wab.Log) Backend { tb = &timedBackend{Backend: l}; return tb },
	})
	c := e.dial()
	c.push(1000, wire.Durable, []byte("warm-up")) // segment created before syncs slow down
	c.expectAck(1000, 1)
	sfs.setDelay(syncDelay)

	var frames []byte
	for i := range n {
		frames = pushFrame(frames, uint64(i+1), wire.Durable, fmt.Appendf(nil, "record %d", i))
	}
	start := time.Now()
	c.send(frames)
	acked, nacked := 0, 0
	last := start
	for i := range n {
		resp, err := c.read()
		if err != nil {
			t.Fatalf("response %d: %v", i+1, err)
		}
		now := time.Now()
		if gap := now.Sub(last); gap > queueTimeout+syncDelay+slack {
			t.Errorf("response %d came %v after the previous one: more than a queue wait and one sync", i+1, gap)
		}
		last = now
		if resp.RequestID != uint64(i+1) {
			t.Fatalf("response %d answers request %d: out of order", i+1, resp.RequestID)
		}
		switch {
		case resp.Type == wire.TypeAck:
			acked++
		case resp.Type == wire.TypeNack && resp.Code == wire.CodeQueueTimeout:
			nacked++
		default:
			t.Fatalf("response %d: %+v, want Ack or Nack QueueTimeout", i+1, resp)
		}
	}
	if acked == 0 || nacked == 0 {
		t.Fatalf("%d acked, %d nacked: want both with a full queue", acked, nacked)
	}
	// Every frame was submitted once; the refused ones waited about one
	// QueueTimeout, not longer.
	tb.mu.Lock()
	defer tb.mu.Unlock()
	timeouts := 0
	for _, call := range tb.calls[1:] { // [0] is the warm-up
		if errors.Is(call.err, wab.ErrQueueTimeout) {
			timeouts++
			if call.took < queueTimeout || call.took > queueTimeout+slack {
				t.Errorf("a refused Submit took %v, want about %v", call.took, queueTimeout)
			}
		}
	}
	if len(tb.calls) != n+1 || timeouts != nacked {
		t.Errorf("%d submits (%d timed out) for %d frames (%d nacked)", len(tb.calls)-1, timeouts, n, nacked)
	}
	t.Logf("%d acked, %d nacked QueueTimeout in %v", acked, nacked, time.Since(start))
}

func TestPipelinedAnswersInOrder(t *testing.T) {
	e := newEnv(t, envConfig{opts: Options{ConnMaxInflight: 16}})
	c := e.dial()
	type want struct {
		id    uint64
		count uint32
		code  wire.Code
	}
	var (
		frames []byte
		wants  []want
	)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		id := rng.Uint64() // ids are the producer's business: answers follow arrival order
		switch {
		case i%50 == 25: // an invalid tier is refused in place, without closing
			frames = pushFrame(frames, id, wire.Durability(9), []byte("bad"))
			wants = append(wants, want{id: id, code: wire.CodeBadDurability})
		case i%3 == 0:
			frames = pushFrame(frames, id, wire.Durable, []byte("d"), []byte("dd"), []byte("ddd"))
			wants = append(wants, want{id: id, count: 3})
		default:
			frames = pushFrame(frames, id, wire.Buffered, fmt.Appendf(nil, "b%d", i))
			wants = append(wants, want{id: id, count: 1})
		}
	}
	go func() { c.nc.Write(frames) }() // more than the in-flight window: the writer must keep up
	for i, w := range wants {
		if w.code != 0 {
			c.expectNack(w.id, w.code)
			continue
		}
		resp, err := c.read()
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if resp.Type != wire.TypeAck || resp.RequestID != w.id || resp.Count != w.count {
			t.Fatalf("response %d: %+v, want Ack id=%d count=%d", i, resp, w.id, w.count)
		}
	}
}

func TestIdleTimeoutClosesIdleConnection(t *testing.T) {
	const idle = 150 * time.Millisecond
	e := newEnv(t, envConfig{opts: Options{IdleTimeout: idle, FrameReadTimeout: time.Second}})
	busy, quiet := e.dial(), e.dial()
	quiet.push(1, wire.Durable, []byte("x"))
	quiet.expectAck(1, 1)
	t0 := time.Now()

	// A connection sending a frame more often than the idle timeout stays.
	for i := range 8 {
		busy.push(uint64(i), wire.Buffered, []byte("keepalive"))
		busy.expectAck(uint64(i), 1)
		time.Sleep(idle / 3)
	}
	quiet.expectClosed(answerTimeout)
	if d := time.Since(t0); d < idle {
		t.Errorf("idle connection closed after %v, before the idle timeout %v", d, idle)
	}
	busy.push(100, wire.Durable, []byte("still here"))
	busy.expectAck(100, 1)
}

// With the idle timeout disabled, a connection must not inherit the frame
// read deadline of the frame before and be closed while idle.
func TestIdleTimeoutDisabledKeepsConnection(t *testing.T) {
	const frameTimeout = 80 * time.Millisecond
	e := newEnv(t, envConfig{opts: Options{FrameReadTimeout: frameTimeout}})
	c := e.dial()
	frame := pushFrame(nil, 1, wire.Durable, []byte("split across two writes"))
	c.send(frame[:5]) // a started frame arms the frame deadline
	time.Sleep(frameTimeout / 4)
	c.send(frame[5:])
	c.expectAck(1, 1)
	time.Sleep(3 * frameTimeout)
	c.push(2, wire.Durable, []byte("after a pause"))
	c.expectAck(2, 1)
}

func TestFrameReadTimeout(t *testing.T) {
	const frameTimeout = 150 * time.Millisecond
	e := newEnv(t, envConfig{opts: Options{FrameReadTimeout: frameTimeout, IdleTimeout: time.Minute}})
	other := e.dial()
	other.push(1, wire.Durable, []byte("before"))
	other.expectAck(1, 1)

	t.Run("stalled mid-frame", func(t *testing.T) {
		c := e.dial()
		c.t = t
		frame := pushFrame(nil, 1, wire.Durable, bytes.Repeat([]byte("s"), 100))
		c.send(frame[:wire.HeaderSize+20])
		t0 := time.Now()
		c.expectClosed(answerTimeout)
		if d := time.Since(t0); d < frameTimeout-20*time.Millisecond {
			t.Errorf("closed after %v, before the frame timeout %v", d, frameTimeout)
		}
	})
	t.Run("stalled inside the header", func(t *testing.T) {
		c := e.dial()
		c.t = t
		c.send(pushFrame(nil, 1, wire.Durable, []byte("x"))[:3])
		c.expectClosed(answerTimeout)
	})
	t.Run("trickling frame", func(t *testing.T) {
		// Each byte arrives well within the frame timeout, the frame as a
		// whole does not: the deadline is per frame, not per read.
		c := e.dial()
		c.t = t
		frame := pushFrame(nil, 1, wire.Durable, bytes.Repeat([]byte("t"), 30))
		t0 := time.Now()
		for i := range frame {
			if _, err := c.nc.Write(frame[i : i+1]); err != nil {
				break // closed by the server: what we want
			}
			time.Sleep(frameTimeout / 5)
			if time.Since(t0) > 4*frameTimeout {
				break
			}
		}
		c.expectClosed(answerTimeout)
		if d := time.Since(t0); d > 4*frameTimeout {
			t.Errorf("a trickling frame was kept open for %v (frame timeout %v)", d, frameTimeout)
		}
	})

	other.push(2, wire.Durable, []byte("after"))
	other.expectAck(2, 1)
}

// Answers written while the writer does not flush (the window holds more
// answered requests) must not run into a write deadline armed for an
// earlier flush.
func TestWriteDeadlineRearmedForEveryWrite(t *testing.T) {
	const writeTimeout = 50 * time.Millisecond
	sfs := newSlowFS()
	e := newEnv(t, envConfig{fs: sfs, opts: Options{WriteTimeout: writeTimeout}})
	c := e.dial()
	c.push(1000, wire.Durable, []byte("warm-up"))
	c.expectAck(1000, 1)
	sfs.setDelay(6 * writeTimeout)

	// An immediate Nack (flushed, arming the write deadline) and a
	// Durable push whose slow sync the writer waits for; while it syncs, a
	// second Durable push and thousands of Buffered ones queue up and make
	// one batch, whose Buffered requests complete before its sync, so that
	// the writer finds more answers ready than its buffer holds.
	syncs := sfs.syncs.Load()
	c.send(pushFrame(pushFrame(nil, 1, wire.Durability(9), []byte("bad")), 2, wire.Durable, []byte("slow")))
	c.expectNack(1, wire.CodeBadDurability)
	waitFor(t, "the first slow sync", func() bool { return sfs.syncs.Load() > syncs })
	const buffered = 4000
	frames := pushFrame(nil, 3, wire.Durable, []byte("slow too"))
	for i := range buffered {
		frames = pushFrame(frames, uint64(4+i), wire.Buffered, []byte("fast"))
	}
	go func() { c.nc.Write(frames) }()
	for id := uint64(2); id < 4+buffered; id++ {
		c.expectAck(id, 1)
	}
}

func TestShardFailedRouting(t *testing.T) {
	efs := errorfs.New(vfs.OS)
	e := newEnv(t, envConfig{fs: efs, wab: wab.Options{Shards: 2}})
	a := e.dial() // shard 0
	a.push(1, wire.Durable, []byte("a"))
	a.expectAck(1, 1)
	b := e.dial() // shard 1
	b.push(1, wire.Durable, []byte("b"))
	b.expectAck(1, 1)

	efs.Add(errorfs.Rule{Op: errorfs.OpSync, Path: "*/shard-000/*", Errno: syscall.EIO})
	a.push(2, wire.Durable, []byte("a2"))
	resp := a.expectNack(2, wire.CodeShardFailed)
	if resp.Message == "" {
		t.Error("ShardFailed Nack without a message")
	}
	if e.log.ShardErr(0) == nil {
		t.Fatal("shard 0 did not fail")
	}
	// The pinned connection keeps getting ShardFailed, without a hang.
	a.push(3, wire.Buffered, []byte("a3"))
	a.expectNack(3, wire.CodeShardFailed)

	// Round robin would give the next connection shard 0: it gets the
	// healthy shard instead, and so does the one after.
	for i := range 2 {
		before := e.conns()
		c := e.dial()
		c.push(1, wire.Durable, []byte("c"))
		c.expectAck(1, 1)
		if sh := e.newConn(t, before).shard; sh != 1 {
			t.Errorf("connection %d opened after shard 0 failed is pinned to shard %d", i, sh)
		}
	}
	b.push(2, wire.Durable, []byte("b2"))
	b.expectAck(2, 1)
}

// conns snapshots the server's open connections.
func (e *env) conns() map[*conn]bool {
	e.srv.mu.Lock()
	defer e.srv.mu.Unlock()
	m := make(map[*conn]bool, len(e.srv.conns))
	for c := range e.srv.conns {
		m[c] = true
	}
	return m
}

// newConn returns the one connection open now that was not in before.
func (e *env) newConn(t *testing.T, before map[*conn]bool) *conn {
	t.Helper()
	var found []*conn
	for c := range e.conns() {
		if !before[c] {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d new connections, want 1", len(found))
	}
	return found[0]
}

func TestPickShard(t *testing.T) {
	failed := fmt.Errorf("%w: shard x: %w", wab.ErrShardFailed, syscall.EIO)
	cases := []struct {
		name   string
		shards int
		failed []int
		want   []int // shards of successive connections
	}{
		{"round robin", 3, nil, []int{0, 1, 2, 0, 1}},
		{"skips a failed shard", 3, []int{1}, []int{0, 2, 2, 0, 2}},
		{"single healthy shard", 3, []int{0, 2}, []int{1, 1, 1, 1}},
		{"all failed: round robin", 2, []int{0, 1}, []int{0, 1, 0}},
		{"one shard", 1, nil, []int{0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fb := &fakeBackend{shards: tc.shards}
			for _, sh := range tc.failed {
				fb.setErr(sh, failed)
			}
			s := New(Options{}, fb)
			var got []int
			for range tc.want {
				got = append(got, s.pickShard())
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("shards %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCodeFor(t *testing.T) {
	cases := []struct {
		err  error
		want wire.Code
	}{
		{wab.ErrQueueTimeout, wire.CodeQueueTimeout},
		{fmt.Errorf("shard 3: %w", wab.ErrQueueTimeout), wire.CodeQueueTimeout},
		{wab.ErrDiskFull, wire.CodeDiskFull},
		{fmt.Errorf("wab: shard 0: %w", fmt.Errorf("%w: write x: %w", wab.ErrDiskFull, syscall.ENOSPC)), wire.CodeDiskFull},
		{wab.ErrShardFailed, wire.CodeShardFailed},
		{fmt.Errorf("%w: shard 1: %w", wab.ErrShardFailed, syscall.EIO), wire.CodeShardFailed},
		// A shard that failed on a full disk (a torn write) is failed first
		// of all: it will not recover, so the producer must go elsewhere.
		{fmt.Errorf("%w: shard 1: %w", wab.ErrShardFailed, fmt.Errorf("%w: write: %w", wab.ErrDiskFull, syscall.ENOSPC)), wire.CodeShardFailed},
		{wab.ErrClosed, wire.CodeShuttingDown},
		{fmt.Errorf("submit: %w", wab.ErrClosed), wire.CodeShuttingDown},
		// The server's own context ends only when Shutdown gives up.
		{context.Canceled, wire.CodeShuttingDown},
		{fmt.Errorf("%w: 99 bytes, limit 10", wab.ErrRecordTooLarge), wire.CodeInternal},
		{errors.New("wab: shard 9 out of range [0, 2)"), wire.CodeInternal},
		{syscall.EIO, wire.CodeInternal},
	}
	for _, tc := range cases {
		if got := codeFor(tc.err); got != tc.want {
			t.Errorf("codeFor(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

// Storage faults reach the producer as the Nack the wire protocol
// documents for them.
func TestStorageFaultNackCodes(t *testing.T) {
	cases := []struct {
		name       string
		rule       errorfs.Rule
		want       wire.Code
		shardFails bool
	}{
		{"fdatasync EIO", errorfs.Rule{Op: errorfs.OpSync, Path: "*.wab", Errno: syscall.EIO}, wire.CodeShardFailed, true},
		// Larger than a sync mark: the mark the flusher writes when it
		// goes idle after the first push's fdatasync must not take the
		// fault meant for the second push's record.
		{"write ENOSPC, nothing written", errorfs.Rule{Op: errorfs.OpWrite, Path: "*.wab", Errno: syscall.ENOSPC, Once: true, Larger: wab.FrameOverhead}, wire.CodeDiskFull, false},
		{"write ENOSPC, torn", errorfs.Rule{Op: errorfs.OpWrite, Path: "*.wab", Errno: syscall.ENOSPC, Torn: true, Once: true, Larger: wab.FrameOverhead}, wire.CodeShardFailed, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			efs := errorfs.New(vfs.OS)
			e := newEnv(t, envConfig{fs: efs})
			c := e.dial()
			c.t = t
			c.push(1, wire.Durable, []byte("ok"))
			c.expectAck(1, 1)
			efs.Add(tc.rule)
			c.push(2, wire.Durable, []byte("fault"))
			c.expectNack(2, tc.want)
			c.push(3, wire.Durable, []byte("next"))
			if tc.shardFails {
				c.expectNack(3, wire.CodeShardFailed)
			} else {
				c.expectAck(3, 1)
			}
		})
	}
}

// batchCounter counts the requests a BatchBackend is handed per call.
type batchCounter struct {
	*wab.Log
	mu    sync.Mutex
	sizes []int
}

func (b *batchCounter) SubmitBatch(ctx context.Context, shard int, reqs []*wab.Request, wait time.Duration) error {
	b.mu.Lock()
	b.sizes = append(b.sizes, len(reqs))
	b.mu.Unlock()
	return b.Log.SubmitBatch(ctx, shard, reqs, wait)
}

// TestFramesReadTogetherSubmittedTogether: frames that arrive in one write
// are handed to a BatchBackend together (at most maxQueuedSubmits at a
// time), and answered in order.
func TestFramesReadTogetherSubmittedTogether(t *testing.T) {
	var bc *batchCounter
	e := newEnv(t, envConfig{wrap: func(l *wab.Log) Backend { bc = &batchCounter{Log: l}; return bc }})
	c := e.dial()
	const n = 3*maxQueuedSubmits + 5
	var frames []byte
	for i := range n {
		d := wire.Durable
		if i%3 == 0 {
			d = wire.Buffered
		}
		frames = pushFrame(frames, uint64(i+1), d, fmt.Appendf(nil, "r%d", i))
	}
	c.send(frames)
	for i := range n {
		c.expectAck(uint64(i+1), 1)
	}
	bc.mu.Lock()
	defer bc.mu.Unlock()
	total, most := 0, 0
	for _, k := range bc.sizes {
		total += k
		most = max(most, k)
	}
	if most < 2 || most > maxQueuedSubmits {
		t.Errorf("batches of %v: want frames read together submitted together, at most %d at a time", bc.sizes, maxQueuedSubmits)
	}
	if total > n {
		t.Errorf("batches of %v hold %d requests for %d frames", bc.sizes, total, n)
	}
}
