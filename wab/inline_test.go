package wab

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
)

// TestSubmitInlineOnIdleShard: on an idle shard SubmitInline writes the
// request itself — Done has been called when it returns, after the
// fdatasync for Durable — and on a busy one it queues behind what the
// flusher holds.
func TestSubmitInlineOnIdleShard(t *testing.T) {
	requireInline(t)
	for _, d := range []Durability{Durable, Buffered} {
		t.Run(fmt.Sprint("durability=", d), func(t *testing.T) {
			dir := t.TempDir()
			fs := errorfs.New(vfs.OS)
			rec := &recorder{}
			o := testOpts(dir)
			o.FS, o.Observer = fs, rec
			l := mustOpen(t, o)
			seg := filepath.Join(dir, "shard-000", SegmentName(1))
			waitIdle(t, l)
			syncs := fs.CallsOn(errorfs.OpSync, seg)
			var done atomic.Int32
			req := &Request{Durability: d, Payloads: [][]byte{[]byte("lone")}, Received: 1, Done: func(err error) {
				if err != nil {
					t.Errorf("Done(%v)", err)
				}
				done.Add(1)
			}}
			if err := l.SubmitInline(context.Background(), 0, req, time.Second); err != nil {
				t.Fatal(err)
			}
			if done.Load() != 1 {
				t.Fatal("SubmitInline on an idle shard returned before Done")
			}
			wantSyncs := 0
			if d == Durable {
				wantSyncs = 1
			}
			if n := fs.CallsOn(errorfs.OpSync, seg) - syncs; n != wantSyncs {
				t.Fatalf("%d fdatasyncs of the segment before SubmitInline returned, want %d", n, wantSyncs)
			}
			if got := l.FlusherBusy(0); got != 0 {
				t.Fatalf("FlusherBusy = %v after the inline batch", got)
			}
			mustClose(t, l)
			if got := payloads(readAllSealed(t, nil, dir)); len(got) != 1 || got[0] != "lone" {
				t.Fatalf("sealed: %q", got)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.batches) != 1 || rec.batches[0] != 1 || rec.syncs != wantSyncs {
				t.Fatalf("observed batches %v with %d syncs, want one of 1 record with %d", rec.batches, rec.syncs, wantSyncs)
			}
		})
	}
}

// TestSubmitInlineQueuesBehindBusyFlusher: while the flusher is held in a
// batch's fdatasync, SubmitInline queues (it returns without Done) and its
// request is written after the held one.
func TestSubmitInlineQueuesBehindBusyFlusher(t *testing.T) {
	dir := t.TempDir()
	fs := &gateFS{FS: vfs.OS, gate: make(chan struct{})}
	o := testOpts(dir)
	o.FS = fs
	l := mustOpen(t, o)
	waitIdle(t, l)
	release := func() {
		if fs.armed.Swap(false) {
			close(fs.gate)
		}
	}
	defer release()
	fs.armed.Store(true)
	first := make(chan error, 1)
	if err := l.Submit(context.Background(), 0, &Request{Durability: Durable, Payloads: [][]byte{[]byte("first")}, Received: 1,
		Done: func(err error) { first <- err }}, time.Second); err != nil {
		t.Fatal(err)
	}
	waitBusy(t, l)
	second := make(chan error, 1)
	if err := l.SubmitInline(context.Background(), 0, &Request{Durability: Durable, Payloads: [][]byte{[]byte("second")}, Received: 2,
		Done: func(err error) { second <- err }}, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-second:
		t.Fatalf("SubmitInline on a busy shard answered (%v) while the flusher's fdatasync is held", err)
	default:
	}
	release()
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, l)
	if got := strings.Join(payloads(readAllSealed(t, nil, dir)), ","); got != "first,second" {
		t.Fatalf("sealed: %s", got)
	}
}

// TestSubmitInlineKeepsOrder: submitters mixing Submit, SubmitBatch and
// SubmitInline on few shards find their records in the order they
// submitted them, each exactly once, and every Done is called once. A
// SubmitInline that wrote ahead of a request still on its way to the
// flusher (bytes still counted in the queue) would break the order. Seeded: WEIR_INLINE_SEED replays a run.
func TestSubmitInlineKeepsOrder(t *testing.T) {
	const (
		submitters = 6
		perSub     = 400
		shards     = 2
	)
	seed := time.Now().UnixNano()
	if s, err := strconv.ParseInt(os.Getenv("WEIR_INLINE_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (WEIR_INLINE_SEED=%d replays it)", seed, seed)
	dir := t.TempDir()
	o := testOpts(dir)
	o.Shards = shards
	l := mustOpen(t, o)

	var calls, errs atomic.Int64
	var wg sync.WaitGroup
	for g := range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(seed), uint64(g)))
			shard := g % shards
			var outstanding sync.WaitGroup
			mk := func(i int) *Request {
				outstanding.Add(1)
				d := Durable
				if rnd.IntN(3) == 0 {
					d = Buffered
				}
				return &Request{Durability: d, Payloads: [][]byte{fmt.Appendf(nil, "%d:%d", g, i)}, Received: int64(i),
					Done: func(err error) {
						if err != nil {
							errs.Add(1)
						}
						calls.Add(1)
						outstanding.Done()
					}}
			}
			for i := 0; i < perSub; {
				var err error
				switch k := rnd.IntN(4); {
				case k == 0 && i+3 <= perSub:
					err = l.SubmitBatch(context.Background(), shard, []*Request{mk(i), mk(i + 1), mk(i + 2)}, time.Second)
					i += 3
				case k == 1:
					err = l.Submit(context.Background(), shard, mk(i), time.Second)
					i++
				default:
					err = l.SubmitInline(context.Background(), shard, mk(i), time.Second)
					i++
				}
				if err != nil {
					t.Errorf("submitter %d: %v", g, err)
					return
				}
				if rnd.IntN(8) == 0 {
					outstanding.Wait() // sometimes a lone producer
				}
			}
			outstanding.Wait()
		}()
	}
	wg.Wait()
	mustClose(t, l)
	if n := calls.Load(); n != submitters*perSub || errs.Load() != 0 {
		t.Fatalf("%d Done calls (%d errors) for %d requests", n, errs.Load(), submitters*perSub)
	}
	next := make([]int, submitters)
	for _, p := range payloads(readAllSealed(t, nil, dir)) {
		var g, i int
		if _, err := fmt.Sscanf(p, "%d:%d", &g, &i); err != nil {
			t.Fatalf("payload %q: %v", p, err)
		}
		if i != next[g] {
			t.Fatalf("submitter %d: record %d stored where %d was due (seed %d)", g, i, next[g], seed)
		}
		next[g]++
	}
	for g, n := range next {
		if n != perSub {
			t.Fatalf("submitter %d: %d records stored, want %d", g, n, perSub)
		}
	}
}

// TestSubmitInlineSyncFailureIsSticky: an inline batch whose fdatasync
// fails fails the shard as the flusher's would: its Done gets the sticky
// error, later requests are refused, the file is never synced again.
func TestSubmitInlineSyncFailureIsSticky(t *testing.T) {
	requireInline(t)
	dir := t.TempDir()
	fs := errorfs.New(vfs.OS)
	o := testOpts(dir)
	o.FS = fs
	l := mustOpen(t, o)
	waitIdle(t, l)
	seg := filepath.Join(dir, "shard-000", SegmentName(1))
	fs.Add(errorfs.Rule{Op: errorfs.OpSync, Path: "*.wab", Once: true, Errno: syscall.EIO})
	syncs := fs.CallsOn(errorfs.OpSync, seg)
	var got error
	called := false
	err := l.SubmitInline(context.Background(), 0, &Request{Durability: Durable, Payloads: [][]byte{[]byte("doomed")}, Received: 1,
		Done: func(err error) { got, called = err, true }}, time.Second)
	if err != nil || !called {
		t.Fatalf("SubmitInline = %v, Done called %v: want nil and called", err, called)
	}
	if !errors.Is(got, ErrShardFailed) || !errors.Is(got, syscall.EIO) {
		t.Fatalf("Done(%v), want ErrShardFailed wrapping EIO", got)
	}
	err = l.SubmitInline(context.Background(), 0, &Request{Durability: Durable, Payloads: [][]byte{[]byte("later")}, Received: 2,
		Done: func(error) { t.Error("Done called for a request the failed shard refused") }}, time.Second)
	if !errors.Is(err, ErrShardFailed) {
		t.Fatalf("SubmitInline after the failure = %v, want ErrShardFailed", err)
	}
	if err := l.Close(context.Background()); !errors.Is(err, ErrShardFailed) {
		t.Fatalf("Close = %v, want the shard's error", err)
	}
	if n := fs.CallsOn(errorfs.OpSync, seg) - syncs; n != 1 {
		t.Fatalf("%d fdatasyncs of the failed segment, want the one that failed", n)
	}
}

// TestSubmitInlineSegmentAge: a segment written only inline is still
// sealed by age, by the flusher, with no further traffic.
func TestSubmitInlineSegmentAge(t *testing.T) {
	requireInline(t)
	dir := t.TempDir()
	o := testOpts(dir)
	o.SegmentMaxAge = 50 * time.Millisecond
	l := mustOpen(t, o)
	defer mustClose(t, l)
	waitIdle(t, l)
	called := false
	if err := l.SubmitInline(context.Background(), 0, &Request{Durability: Durable, Payloads: [][]byte{[]byte("aging")}, Received: 1,
		Done: func(err error) { called = err == nil }}, time.Second); err != nil || !called {
		t.Fatalf("SubmitInline = %v, acked inline %v", err, called)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		refs, err := l.Sealed()
		if err != nil {
			t.Fatal(err)
		}
		if len(refs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sealed segments 5s after an inline write with a 50ms segment age", len(refs))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSubmitInlineDuringClose: SubmitInline racing Close either refuses
// (ErrClosed, no Done) or is answered exactly once, and what was acked is
// sealed.
func TestSubmitInlineDuringClose(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, testOpts(dir))
	var acked sync.Map
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				p := fmt.Sprintf("%d:%d", g, i)
				var once atomic.Int32
				err := l.SubmitInline(context.Background(), 0, &Request{Durability: Durable, Payloads: [][]byte{[]byte(p)}, Received: int64(i),
					Done: func(err error) {
						if once.Add(1) != 1 {
							t.Errorf("%s: Done called twice", p)
						}
						if err == nil {
							acked.Store(p, true)
						}
					}}, time.Second)
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("%s: %v", p, err)
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	mustClose(t, l)
	wg.Wait()
	stored := map[string]bool{}
	for _, p := range payloads(readAllSealed(t, nil, dir)) {
		stored[p] = true
	}
	n := 0
	acked.Range(func(k, _ any) bool {
		n++
		if !stored[k.(string)] {
			t.Errorf("%s acked but not in a sealed segment", k)
		}
		return true
	})
	if n == 0 {
		t.Fatal("nothing acked before Close")
	}
}

// requireInline skips a test that needs SubmitInline to write inline: the
// simulation build never does.
func requireInline(t *testing.T) {
	if dstBuild {
		t.Skip("the simulation build (-tags dst) never writes inline")
	}
}

// waitIdle waits until every shard's flusher has prepared its segment and
// waits for work, not holding own: a SubmitInline now writes inline.
func waitIdle(t *testing.T, l *Log) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range l.shards {
		for {
			s.own.Lock()
			ready := s.seg != nil && !s.holding()
			s.own.Unlock()
			if ready {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("shard %d: no segment prepared after 10s", s.id)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

func waitBusy(t *testing.T, l *Log) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.FlusherBusy(0) < 10*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatal("flusher never held in its fdatasync")
		}
		time.Sleep(time.Millisecond)
	}
}
