//go:build dst

package sim

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/internal/vfs/memfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

const (
	wabDir = "/node/wab"
	rawDir = "/node/raw"
)

var quiet = slog.New(slog.DiscardHandler)

// node is one incarnation of the weir process: everything it built on
// its disk, and the goroutines it runs.
type node struct {
	inc    int
	mem    *memfs.FS
	fs     *errorfs.FS
	log    *wab.Log
	raw    *filesink.Sink
	store  *engine.OffsetStore
	fan    *engine.Fanout
	budget *flow.Budget
	obs    *observer

	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stopped bool
	unsched func() // the flushers' scheduling
}

// flushers parks the buffer's flushers at the scheduler: each batch the
// buffer writes and syncs is one step.
type flushers struct {
	s   *sched
	inc int
}

func (f flushers) Park(shard int) { f.s.yield(f.inc, fmt.Sprintf("wab/%d", shard)) }
func (f flushers) Exited(int)     {}

// Inline lets a lone request be written on its producer's goroutine while
// the shard's flusher is parked — the state in which a real flusher waits
// for work.
func (f flushers) Inline(shard int) bool { return f.s.isParked(f.inc, fmt.Sprintf("wab/%d", shard)) }

// observer counts what the fan-out shed from each quarantine lane.
type observer struct {
	engine.NopObserver
	mu   sync.Mutex
	shed map[string]int
}

func (o *observer) QuarantineShed(sinkName string, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.shed[sinkName] += n
}

func (o *observer) shedOf(name string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.shed[name]
}

// rawView is raw as the fan-out sees it: every commit parks first.
type rawView struct {
	*filesink.Sink
	s   *sched
	inc int
}

func (r rawView) CommitRaw(ctx context.Context, b sink.Batch) (sink.CommitResult, uint64, error) {
	if !r.s.yield(r.inc, "raw") {
		return sink.CommitResult{}, 0, sink.Transient(errDead)
	}
	return r.Sink.CommitRaw(ctx, b)
}

// boot starts the next incarnation on mem. A start that an injected disk
// fault failed is retried, as a supervisor would, by the next
// incarnation on what the failed one left (the faults are armed in one
// incarnation each).
func (h *harness) boot(mem *memfs.FS) (*node, error) {
	for {
		n, err := h.bootOnce(mem, h.inc)
		if err == nil {
			return n, nil
		}
		if n.fs.Injected() == 0 {
			return n, err
		}
		h.s.note("%d start of incarnation %d failed: %v", h.steps, h.inc, err)
		h.inc++
		mem = mem.CrashClone(memfs.CrashOptions{Mode: memfs.CrashKeepAll})
	}
}

// bootOnce starts incarnation inc of the node on disk mem: the real open
// and recovery of the buffer, raw and the offset store, the fan-out and
// the drain, and one consumer per broker partition.
func (h *harness) bootOnce(mem *memfs.FS, inc int) (_ *node, err error) {
	n := &node{inc: inc, mem: mem, fs: errorfs.New(mem), obs: &observer{shed: map[string]int{}}, cancel: func() {}}
	defer func() {
		if err != nil { // a start that failed: what it opened dies with it
			h.s.kill(inc)
			n.stop()
		}
	}()
	for _, f := range h.spec.Faults {
		if f.Inc == inc {
			var rules []errorfs.Rule
			rules, err = errorfs.Parse(f.Rule)
			if err != nil {
				return n, err
			}
			for _, r := range rules {
				n.fs.Add(r)
			}
		}
	}
	ctx := context.Background()
	n.unsched = wab.SetDSTScheduler(n.fs, flushers{h.s, inc})
	n.budget = flow.NewBudget(flow.BudgetOptions{Limit: h.spec.Budget, WarmupFraction: 1})
	n.log, err = wab.Open(ctx, wab.Options{FS: n.fs, Dir: wabDir, Shards: 2, SegmentMaxBytes: h.spec.SegmentBytes,
		SegmentMaxAge: 50 * time.Millisecond, PreallocateBytes: -1, Logger: quiet})
	if err != nil {
		return n, fmt.Errorf("open the buffer: %w", err)
	}
	n.raw, err = filesink.New(ctx, filesink.Options{FS: n.fs, Dir: rawDir, Positions: true, MaxBytes: 16 << 10, Logger: quiet})
	if err != nil {
		return n, fmt.Errorf("open raw: %w", err)
	}
	n.store, err = engine.OpenOffsetStore(ctx, n.fs, rawDir)
	if err != nil {
		return n, fmt.Errorf("open the offset store: %w", err)
	}
	var secs []engine.SecondaryConfig
	for i, k := range h.sinks {
		secs = append(secs, engine.SecondaryConfig{Sink: k.view(inc), Name: k.name, Quarantine: h.lanes[i].view(inc),
			QueueBatches: h.spec.QueueBatches, QuarantineBuffer: 8, MaxAttempts: h.spec.MaxAttempts})
	}
	fo := engine.FanoutOptions{Raw: rawView{n.raw, h.s, inc}, Store: n.store, Secondaries: secs,
		WindowRecords: 48, RecoveryInterval: 20 * time.Millisecond, FlushInterval: 10 * time.Millisecond,
		RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond, Budget: n.budget, Observer: n.obs, Logger: quiet}
	if h.spec.Claims {
		fo.Claims, fo.ClaimPositions = h.claims.view(inc), 64
	}
	n.fan, err = engine.NewFanout(ctx, fo)
	if err != nil {
		return n, fmt.Errorf("start the fan-out: %w", err)
	}
	var gate *engine.WABGate
	gate, err = engine.NewWABGate(n.log, engine.GateOptions{})
	if err != nil {
		return n, err
	}
	var d *drain.Drain
	d, err = drain.New(drain.Options{FS: n.fs, WABDir: wabDir, Source: n.log, Sink: n.fan, Logger: quiet,
		RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond, MaxRetries: 3, DeadLetterCheckInterval: 5 * time.Millisecond,
		HealthInterval: time.Hour, PollInterval: 10 * time.Millisecond, Linger: time.Duration(h.spec.LingerMs) * time.Millisecond,
		Budget: n.budget})
	if err != nil {
		return n, fmt.Errorf("start the drain: %w", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	n.cancel = cancel
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		d.Run(rctx)
	}()
	for p := range h.spec.Partitions {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			h.consume(rctx, n, gate, p)
		}()
	}
	if h.spec.ProducerPct > 0 {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			h.produceFrames(rctx, n, gate, h.spec.Partitions)
		}()
	}
	return n, nil
}

// consume is a broker consumer: it fetches from the partition's
// committed position, writes through the gate and commits the position
// only once the gate's Write returned (broken "cursor-early": before).
func (h *harness) consume(ctx context.Context, n *node, gate *engine.WABGate, p int) {
	rng := rand.New(rand.NewPCG(h.seed, uint64(n.inc)<<8|uint64(p)))
	label := fmt.Sprintf("src/%d", p)
	pos := h.broker.position(p)
	for ctx.Err() == nil {
		if !h.s.yield(n.inc, label) {
			return
		}
		recs := h.broker.fetch(p, pos, 1+rng.IntN(8))
		if len(recs) == 0 {
			sleep(ctx, 20*time.Millisecond)
			continue
		}
		early := h.spec.Broken == "cursor-early"
		if early {
			h.broker.commit(p, pos+len(recs))
		}
		if err := gate.Write(ctx, recs); err != nil {
			sleep(ctx, 5*time.Millisecond)
			continue
		}
		if !h.s.yield(n.inc, label+"/commit") {
			return
		}
		h.broker.commit(p, pos+len(recs))
		pos += len(recs)
	}
}

// produceFrames is a producer like the socket's: it sends partition p's
// records one frame at a time, each a buffer request of its own — written
// inline on an idle shard when the scheduler allows (SubmitInline) or
// queued (Submit), by the seed — and counts a record acknowledged (the
// broker's commit stands for the producer's ack) once its request is done.
// After a crash it resends everything not acknowledged.
func (h *harness) produceFrames(ctx context.Context, n *node, gate *engine.WABGate, p int) {
	rng := rand.New(rand.NewPCG(h.seed, uint64(n.inc)<<8|0xff))
	pos := h.broker.position(p)
	for ctx.Err() == nil {
		if !h.s.yield(n.inc, "producer") {
			return
		}
		recs := h.broker.fetch(p, pos, 1)
		if len(recs) == 0 {
			sleep(ctx, 20*time.Millisecond)
			continue
		}
		r := recs[0]
		m := record.Meta{ID: r.ID, HasID: true, Source: r.Source, OriginPos: r.OriginPos}
		done := make(chan error, 1)
		req := &wab.Request{Durability: wab.Durable, Payloads: [][]byte{r.Payload}, Metas: [][]byte{record.Encode(&m)},
			Received: time.Now().UnixNano(), Done: func(err error) { done <- err }}
		submit, inline := gate.Submit, rng.IntN(100) < h.spec.ProducerPct
		if inline {
			submit = gate.SubmitInline
		}
		if err := submit(ctx, rng.IntN(2), req, time.Second); err != nil {
			sleep(ctx, 5*time.Millisecond)
			continue
		}
		if inline && len(done) == 1 { // answered on this goroutine: written inline
			h.inlined.Add(1)
		}
		if err := <-done; err != nil {
			sleep(ctx, 5*time.Millisecond)
			continue
		}
		if !h.s.yield(n.inc, "producer/ack") {
			return
		}
		h.broker.commit(p, pos+1)
		pos++
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// stop ends the incarnation: its goroutines, the fan-out, the buffer
// (sealing what it holds), raw. Killed first (sched.kill), nothing it
// does reaches the world; its disk is no longer the node's.
func (n *node) stop() {
	if n.stopped {
		return
	}
	n.stopped = true
	n.cancel()
	n.wg.Wait()
	if n.fan != nil {
		n.fan.Close()
	}
	if n.log != nil {
		n.log.Close(context.Background())
	}
	if n.raw != nil {
		n.raw.Close()
	}
	n.budget.Close()
	n.unsched()
}
