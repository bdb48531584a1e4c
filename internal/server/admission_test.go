package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/wab"
	"github.com/weir-io/weir/wire"
)

// holdBackend holds the requests whose first payload starts with a held
// prefix until release; it answers the others at once.
type holdBackend struct {
	mu        sync.Mutex
	prefixes  []string
	held      []*wab.Request
	submitted atomic.Int64
}

func (b *holdBackend) Shards() int        { return 1 }
func (b *holdBackend) ShardErr(int) error { return nil }

func (b *holdBackend) SubmitInline(ctx context.Context, shard int, r *wab.Request, wait time.Duration) error {
	return b.Submit(ctx, shard, r, wait)
}

func (b *holdBackend) Submit(_ context.Context, _ int, r *wab.Request, _ time.Duration) error {
	b.submitted.Add(1)
	b.mu.Lock()
	for _, p := range b.prefixes {
		if len(r.Payloads) > 0 && bytes.HasPrefix(r.Payloads[0], []byte(p)) {
			b.held = append(b.held, r)
			b.mu.Unlock()
			return nil
		}
	}
	b.mu.Unlock()
	r.Done(nil)
	return nil
}

func (b *holdBackend) heldCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.held)
}

// release stops holding and answers what was held with err.
func (b *holdBackend) release(err error) {
	b.mu.Lock()
	held := b.held
	b.held, b.prefixes = nil, nil
	b.mu.Unlock()
	for _, r := range held {
		r.Done(err)
	}
}

// serveBackend serves backend on a fresh Unix socket; the server is shut
// down at the end of the test (before its budget is checked by the test's
// own cleanups, which run first).
func serveBackend(t *testing.T, opts Options, backend Backend) (*Server, string) {
	t.Helper()
	sock := filepath.Join(shortDir(t), "weir.sock")
	srv := New(opts, backend)
	if err := srv.ListenUnix(sock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if hb, ok := backend.(*holdBackend); ok {
			hb.release(nil)
		}
		ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return srv, sock
}

func dialSock(t *testing.T, sock string) *rawConn {
	t.Helper()
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func newBudget(t *testing.T, limit int64, warmup float64) *flow.Budget {
	b := flow.NewBudget(flow.BudgetOptions{Limit: limit, WarmupFraction: warmup})
	t.Cleanup(b.Close)
	return b
}

// waitInUse polls until the budget holds want bytes.
func waitInUse(t *testing.T, b *flow.Budget, want int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("budget in use to be %d", want), func() bool {
		st := b.Stats()
		return st.InUse == want && st.Waiting == 0
	})
}

// payloadOf is a payload of n bytes starting with prefix.
func payloadOf(prefix string, n int) []byte {
	return append([]byte(prefix), bytes.Repeat([]byte{'.'}, n-len(prefix))...)
}

func expectOverloaded(t *testing.T, resp wire.Response, id uint64, hint time.Duration) {
	t.Helper()
	if resp.Type != wire.TypeNack || resp.Code != wire.CodeOverloaded || resp.RequestID != id {
		t.Fatalf("want Nack Overloaded for %d, got %+v", id, resp)
	}
	d, rest, ok := wire.ParseRetryAfter(resp.Message)
	if !ok || d != hint || rest == "" {
		t.Fatalf("Overloaded message %q: hint %v, %v; want %v", resp.Message, d, ok, hint)
	}
}

func TestFrameMemory(t *testing.T) {
	if got, want := frameMemory(1, 100, false), pendingOverhead+256; got != want {
		t.Errorf("one 100-byte record: %d, want %d", got, want)
	}
	if got, want := frameMemory(3, 300, false), pendingOverhead+320+3*sliceHeaderSize; got != want {
		t.Errorf("three records: %d, want %d", got, want)
	}
	if got, want := frameMemory(3, 300, true), pendingOverhead+320+6*sliceHeaderSize; got != want {
		t.Errorf("three records with metadata: %d, want %d", got, want)
	}
	if got, want := frameMemory(1, 1<<20, false), pendingOverhead+1<<20; got != want {
		t.Errorf("unpooled: %d, want %d", got, want)
	}
	// The reservation covers what getBuf gives.
	for _, n := range []int{0, 1, 255, 257, 4000, 65536, 65537} {
		b := getBuf(n)
		if int64(cap(b.bytes())) > frameMemory(1, n, false)-pendingOverhead {
			t.Errorf("buffer of %d bytes has capacity %d, more than reserved", n, cap(b.bytes()))
		}
		b.put()
	}
	for _, tc := range []struct{ limit, cap, want int64 }{
		{512 << 20, 64 << 20, 1 << 20},
		{4 << 20, 64 << 20, 64 << 10},
		{64 << 20, 64 << 20, 128 << 10},
		{512 << 20, 100 << 10, 100 << 10},
	} {
		if got := creditChunk(tc.limit, tc.cap); got != tc.want {
			t.Errorf("creditChunk(%d, %d) = %d, want %d", tc.limit, tc.cap, got, tc.want)
		}
	}
}

// TestOverloadedWithinAdmissionWait: with the budget held by one
// connection's frames (its backend blocked), another producer's frame is
// refused Overloaded, with the retry-after hint, about admission_wait
// after it arrived — not a hang; once the held frames are answered the
// budget is all back.
func TestOverloadedWithinAdmissionWait(t *testing.T) {
	const (
		wait  = 50 * time.Millisecond
		hint  = 30 * time.Millisecond
		slack = 2 * time.Second // shared machine, race detector
	)
	budget := newBudget(t, 256<<10, 1)
	hb := &holdBackend{prefixes: []string{"A"}}
	_, sock := serveBackend(t, Options{Budget: budget, AdmissionWait: wait, RetryAfter: hint}, hb)
	a := dialSock(t, sock)
	var frames []byte
	const n = 20
	for i := range n {
		frames = pushFrame(frames, uint64(i+1), wire.Buffered, payloadOf("A", 16<<10))
	}
	a.send(frames)
	waitFor(t, "the budget to fill", func() bool { return hb.heldCount() >= 14 })
	if st := budget.Stats(); st.InUse > st.Limit {
		t.Fatalf("budget in use %d over its limit %d", st.InUse, st.Limit)
	}

	b := dialSock(t, sock)
	start := time.Now()
	b.push(1, wire.Buffered, payloadOf("B", 16<<10))
	resp, err := b.read()
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	expectOverloaded(t, resp, 1, hint)
	if took < wait || took > wait+slack {
		t.Errorf("Overloaded after %v, want about flow.admission_wait %v", took, wait)
	}
	held := hb.heldCount()
	hb.release(nil)
	acked, overloaded := 0, 0
	for i := range n {
		resp, err := a.read()
		if err != nil {
			t.Fatalf("response %d: %v", i+1, err)
		}
		switch {
		case resp.Type == wire.TypeAck:
			acked++
		case resp.Type == wire.TypeNack && resp.Code == wire.CodeOverloaded:
			overloaded++
		default:
			t.Fatalf("response %d: %+v", i+1, resp)
		}
	}
	if acked < held || acked+overloaded != n {
		t.Errorf("%d acked, %d overloaded of %d (%d held)", acked, overloaded, n, held)
	}
	// Idle connections give their credit back.
	waitInUse(t, budget, 0)
	b.push(2, wire.Buffered, payloadOf("B", 100))
	b.expectAck(2, 1)
	waitInUse(t, budget, 0)
}

type throttle struct{ on atomic.Bool }

func (th *throttle) Throttled() bool { return th.on.Load() }

// TestThrottledShedsWithoutWaiting: while flow control is critical, a
// frame whose memory is not free at once is refused Overloaded at once —
// admission_wait (here a minute) does not apply — while a frame that fits
// goes through: nothing waits, and the node sheds only what it cannot
// hold.
func TestThrottledShedsWithoutWaiting(t *testing.T) {
	th := &throttle{}
	hb := &holdBackend{prefixes: []string{"hold"}}
	budget := newBudget(t, 1<<20, 1)
	_, sock := serveBackend(t, Options{Throttle: th, Budget: budget, AdmissionWait: time.Minute, RetryAfter: 250 * time.Millisecond}, hb)
	a, b := dialSock(t, sock), dialSock(t, sock)
	a.push(1, wire.Durable, append([]byte("hold"), make([]byte, 900<<10)...))
	waitFor(t, "the held frame", func() bool { return hb.heldCount() == 1 })
	th.on.Store(true)
	start := time.Now()
	b.push(1, wire.Durable, make([]byte, 200<<10))
	resp, err := b.read()
	if err != nil {
		t.Fatal(err)
	}
	expectOverloaded(t, resp, 1, 250*time.Millisecond)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("answered after %v: a throttled frame waited", d)
	}
	b.push(2, wire.Durable, []byte("small"))
	b.expectAck(2, 1)
	th.on.Store(false)
	hb.release(nil)
	a.expectAck(1, 1)
	waitInUse(t, budget, 0)
}

// TestConnByteCap: a connection holds at most conn_max_inflight_bytes of
// frames; the next one waits for its own frames to be answered (the
// budget has room to spare), and a frame larger than the cap is let in
// when it is alone.
func TestConnByteCap(t *testing.T) {
	const connCap = 64 << 10
	budget := newBudget(t, 64<<20, 1)
	hb := &holdBackend{prefixes: []string{"A"}}
	_, sock := serveBackend(t, Options{Budget: budget, ConnMaxInflightBytes: connCap, AdmissionWait: time.Minute}, hb)
	a := dialSock(t, sock)
	var frames []byte
	for i := range 4 {
		frames = pushFrame(frames, uint64(i+1), wire.Buffered, payloadOf("A", 16<<10))
	}
	a.send(frames)
	per := frameMemory(1, 16<<10, false)
	fit := int(connCap / per) // 3
	waitFor(t, "the capped frames to be submitted", func() bool { return hb.heldCount() == fit })
	// Another connection is not held back by A's cap.
	b := dialSock(t, sock)
	b.push(1, wire.Buffered, payloadOf("B", 16<<10))
	b.expectAck(1, 1)
	// B's writer gives its credit back just after writing the ack, so the
	// ack may arrive first; A's held frames keep theirs.
	waitFor(t, "the budget in use to drop to one capped connection's credit",
		func() bool { return budget.Stats().InUse <= connCap+per })
	time.Sleep(50 * time.Millisecond) // a negative check: the 4th frame stays out
	if got := hb.submitted.Load(); got != int64(fit)+1 {
		t.Fatalf("%d frames submitted, want %d of A's and B's one", got, fit+1)
	}
	hb.release(nil)
	for i := range 4 {
		a.expectAck(uint64(i+1), 1)
	}
	// Alone, a frame over the cap is admitted.
	a.push(5, wire.Buffered, payloadOf("A", 2*connCap))
	a.expectAck(5, 1)
	waitInUse(t, budget, 0)
}

// TestFrameOverBudget: a frame that needs more than the whole budget is
// refused FrameTooLarge and the connection stays open; one that fits the
// budget but not what warm-up grants yet is refused Overloaded.
func TestFrameOverBudget(t *testing.T) {
	budget := newBudget(t, 1<<20, 0.25)
	_, sock := serveBackend(t, Options{Budget: budget, AdmissionWait: 10 * time.Millisecond}, &holdBackend{})
	c := dialSock(t, sock)
	c.push(1, wire.Buffered, make([]byte, 2<<20))
	resp := c.expectNack(1, wire.CodeFrameTooLarge)
	if !strings.Contains(resp.Message, "memory_budget") {
		t.Errorf("message %q", resp.Message)
	}
	c.push(2, wire.Buffered, make([]byte, 512<<10))
	resp, err := c.read()
	if err != nil {
		t.Fatal(err)
	}
	expectOverloaded(t, resp, 2, DefaultRetryAfter)
	if !strings.Contains(resp.Message, "warming up") {
		t.Errorf("message %q", resp.Message)
	}
	c.push(3, wire.Buffered, make([]byte, 100<<10))
	c.expectAck(3, 1)
	waitInUse(t, budget, 0)
}

// TestShutdownReleasesBudget: a shutdown that gives up on frames the
// backend never answers still gives their memory back.
func TestShutdownReleasesBudget(t *testing.T) {
	budget := newBudget(t, 1<<20, 1)
	hb := &holdBackend{prefixes: []string{"A"}}
	srv, sock := serveBackend(t, Options{Budget: budget, AdmissionWait: 20 * time.Millisecond}, hb)
	c := dialSock(t, sock)
	var frames []byte
	for i := range 30 {
		frames = pushFrame(frames, uint64(i+1), wire.Durable, payloadOf("A", 40<<10))
	}
	c.send(frames)
	waitFor(t, "the budget to fill", func() bool { return hb.heldCount() >= 20 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want the deadline", err)
	}
	if st := budget.Stats(); st.InUse != 0 || st.Waiting != 0 {
		t.Fatalf("after shutdown: %+v", st)
	}
	hb.release(nil) // late completions touch nothing
	if st := budget.Stats(); st.InUse != 0 {
		t.Fatalf("after late completions: %+v", st)
	}
}

// randomBackend answers each request by one of the paths the server must
// account for: an ack, an error through Done (at once or later), a
// refusal from Submit.
type randomBackend struct {
	mu  sync.Mutex
	rnd *rand.Rand
	wg  sync.WaitGroup
}

func (b *randomBackend) Shards() int        { return 2 }
func (b *randomBackend) ShardErr(int) error { return nil }

func (b *randomBackend) SubmitInline(ctx context.Context, shard int, r *wab.Request, wait time.Duration) error {
	return b.Submit(ctx, shard, r, wait)
}

func (b *randomBackend) Submit(_ context.Context, _ int, r *wab.Request, _ time.Duration) error {
	b.mu.Lock()
	k, delay := b.rnd.IntN(10), time.Duration(b.rnd.IntN(3000))*time.Microsecond
	b.mu.Unlock()
	switch {
	case k == 0:
		return wab.ErrQueueTimeout
	case k == 1:
		r.Done(wab.ErrDiskFull)
	case k < 5:
		r.Done(nil)
	default:
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			time.Sleep(delay)
			if k == 9 {
				r.Done(errors.New("late failure"))
			} else {
				r.Done(nil)
			}
		}()
	}
	return nil
}

// TestBudgetAccountingRandom pushes random frames (sizes, batches, wire
// versions) over several connections into a small, warming-up budget,
// answered along every path — ack, Nack through Done, refusal at Submit,
// Overloaded, FrameTooLarge, a connection the producer drops mid-stream,
// a shutdown — and checks that the budget never holds more than its
// limit, never goes negative (it panics if released more than granted)
// and holds nothing once every connection is gone.
func TestBudgetAccountingRandom(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{} // answers by kind, over every seed
	note := func(kind string) {
		mu.Lock()
		seen[kind]++
		mu.Unlock()
	}
	defer func() {
		t.Logf("answers: %v", seen)
		for _, kind := range []string{"Ack", "HelloAck", "Overloaded", "FrameTooLarge", "QueueTimeout", "DiskFull", "Internal", "dropped"} {
			if seen[kind] == 0 {
				t.Errorf("no %s among the answers: the test does not cover that path", kind)
			}
		}
	}()
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			budget := newBudget(t, 512<<10, 0.5)
			rb := &randomBackend{rnd: rand.New(rand.NewPCG(seed, 12))}
			srv, sock := serveBackend(t, Options{Budget: budget, AdmissionWait: 5 * time.Millisecond,
				ConnMaxInflightBytes: 128 << 10, QueueTimeout: time.Millisecond}, rb)
			var peak atomic.Int64
			stop := make(chan struct{})
			var mon sync.WaitGroup
			mon.Add(1)
			go func() {
				defer mon.Done()
				for {
					st := budget.Stats()
					if st.InUse > peak.Load() {
						peak.Store(st.InUse)
					}
					select {
					case <-stop:
						return
					case <-time.After(200 * time.Microsecond):
					}
				}
			}()
			var wg sync.WaitGroup
			for conn := range 4 {
				wg.Add(1)
				crnd := rand.New(rand.NewPCG(seed, uint64(100+conn)))
				go func() {
					defer wg.Done()
					nc, err := net.Dial("unix", sock)
					if err != nil {
						t.Error(err)
						return
					}
					defer nc.Close()
					v2 := crnd.IntN(2) == 0
					var buf []byte
					if v2 {
						buf = wire.AppendHello(buf, wire.Hello{MaxVersion: 2, Flags: wire.FlagIdempotent, Producer: testProducer})
					}
					frames := 20 + crnd.IntN(60)
					dropAt := -1
					if crnd.IntN(3) == 0 {
						dropAt = crnd.IntN(frames)
					}
					answers := 0
					if v2 {
						answers++
					}
					for i := range frames {
						if i == dropAt {
							nc.Write(buf)
							note("dropped")
							return // the producer goes away with frames in flight
						}
						records := 1 + crnd.IntN(8)
						payloads := make([][]byte, records)
						for j := range payloads {
							size := crnd.IntN(2000)
							if crnd.IntN(20) == 0 {
								size = 100<<10 + crnd.IntN(700<<10) // some fit only alone, some never
							}
							payloads[j] = make([]byte, size)
						}
						p := wire.Push{RequestID: uint64(i + 1), Durability: wire.Buffered, Payloads: payloads}
						if v2 {
							p.Version, p.FirstSeq, p.EventTime = 2, uint64(i*8), 1
						}
						buf = wire.AppendPush(buf, p)
						answers++
					}
					nc.Write(buf)
					br := bufio.NewReader(nc)
					nc.SetReadDeadline(time.Now().Add(answerTimeout))
					for range answers {
						resp, err := wire.ReadResponse(br)
						if err != nil {
							t.Errorf("reading answers: %v", err)
							return
						}
						switch resp.Type {
						case wire.TypeNack:
							note(resp.Code.String())
						default:
							note(resp.Type.String())
						}
					}
				}()
			}
			wg.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			rb.wg.Wait()
			close(stop)
			mon.Wait()
			if st := budget.Stats(); st.InUse != 0 || st.Waiting != 0 {
				t.Fatalf("after every connection ended: %+v", st)
			}
			if p := peak.Load(); p > 512<<10 {
				t.Fatalf("peak in use %d over the limit", p)
			}
			t.Logf("peak in use %d of %d", peak.Load(), 512<<10)
		})
	}
}
