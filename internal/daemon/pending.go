package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/weir-io/weir/internal/backoff"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

// Opening a sink that is down is retried from the first to the cap,
// doubling — a dial every two seconds at most, so that a sink that
// returns is found within that — and the failure is logged at error
// the first time and then once every openLogEvery. The drain's and the
// fan-out's own retries take over once it is open.
var openRetry = backoff.Policy{Min: 100 * time.Millisecond, Max: 2 * time.Second}

const openLogEvery = time.Minute

// pendingSink is a sink opened in the background: the [sink], the
// raw-first fan-out or a [[secondary]]. A database that comes up after
// weir, a broker that is not there yet or a mount that is missing must
// not stop the node from starting — records wait in the write-ahead
// buffer (or, with gate = "raw", at the source) while opening is retried
// with openRetry — and a server that accepts and never answers must not
// delay the start by its timeout. Until it is open, every Commit fails
// transiently (the drain and the fan-out keep the batch and retry), and
// Health says Down with the last error, which the drain state, weir
// status and /ready show.
//
// Only a configuration error refuses the start, and configuration is
// checked before any part starts.
type pendingSink struct {
	name     string
	maxBatch int // MaxBatchSize until open
	log      *slog.Logger

	ready    chan struct{} // closed once s is set
	firstTry chan struct{} // closed when the first attempt has ended, either way
	s        sink.Sink
	cancel   context.CancelFunc
	done     chan struct{} // closed when the opener returns

	mu      sync.Mutex
	lastErr error
	since   time.Time // when it was first found down
}

// openPending starts opening a sink with open, retried until it succeeds
// or the sink is closed.
func openPending(name string, maxBatch int, open func(context.Context) (sink.Sink, error), log *slog.Logger) *pendingSink {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pendingSink{name: name, maxBatch: maxBatch, log: log, ready: make(chan struct{}), firstTry: make(chan struct{}), cancel: cancel, done: make(chan struct{}),
		lastErr: errors.New("opening"), since: time.Now()}
	go p.run(ctx, open)
	return p
}

func (p *pendingSink) run(ctx context.Context, open func(context.Context) (sink.Sink, error)) {
	defer close(p.done)
	var tried sync.Once
	defer tried.Do(func() { close(p.firstTry) })
	b := backoff.Backoff{Policy: openRetry}
	var logged time.Time
	for attempt := 1; ; attempt++ {
		s, err := open(ctx)
		if err == nil {
			if ctx.Err() != nil { // closed while it opened
				if cerr := s.Close(); cerr != nil {
					p.log.Warn("closing a sink opened during shutdown", "err", cerr)
				}
				return
			}
			p.s = s
			close(p.ready)
			tried.Do(func() { close(p.firstTry) })
			if attempt > 1 {
				p.log.Info("sink open; delivering what waited for it", "attempts", attempt, "down_for", time.Since(p.since).Round(time.Millisecond))
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		p.lastErr = err
		p.mu.Unlock()
		tried.Do(func() { close(p.firstTry) })
		d := b.Next()
		lvl := slog.LevelDebug
		if time.Since(logged) >= openLogEvery {
			lvl, logged = slog.LevelError, time.Now()
		}
		p.log.Log(ctx, lvl, "sink cannot be opened; records wait for it, retrying", "err", err, "attempt", attempt,
			"down_for", time.Since(p.since).Round(time.Millisecond), "retry_in", d)
		if !backoff.Sleep(ctx, d) {
			return
		}
	}
}

// open returns the sink once it is open, nil before.
func (p *pendingSink) open() sink.Sink {
	select {
	case <-p.ready:
		return p.s
	default:
		return nil
	}
}

// wait waits until the sink is open or ctx ends.
func (p *pendingSink) wait(ctx context.Context) error {
	select {
	case <-p.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s sink not open: %w", p.name, errors.Join(ctx.Err(), p.err()))
	}
}

func (p *pendingSink) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// Name implements sink.Sink.
func (p *pendingSink) Name() string {
	if s := p.open(); s != nil {
		return s.Name()
	}
	return p.name
}

// MaxBatchSize implements sink.Sink.
func (p *pendingSink) MaxBatchSize() int {
	if s := p.open(); s != nil {
		return s.MaxBatchSize()
	}
	return p.maxBatch
}

// Commit implements sink.Sink: transient until the sink is open.
func (p *pendingSink) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	s := p.open()
	if s == nil {
		return sink.CommitResult{}, sink.Transient(fmt.Errorf("%s sink not open yet: %w", p.name, p.err()))
	}
	return s.Commit(ctx, b)
}

// degraded is why the node is degraded by this sink ("" once open), for
// /ready and weir status.
func (p *pendingSink) degraded() string {
	if p.open() != nil {
		return ""
	}
	return fmt.Sprintf("sink down (%s, for %s): %v", p.name, time.Since(p.since).Round(time.Second), p.err())
}

// firstTryWait bounds how long Health waits for the first attempt to open
// the sink when its caller's context has no shorter deadline.
const firstTryWait = 2 * time.Second

// Health implements sink.Health: Down, with the reason, until open. A
// sink still in its first attempt has not been found down yet: Health
// waits for that attempt (within ctx and firstTryWait), so that a sink
// that opens in a few milliseconds at start is never reported, and
// logged, as down.
func (p *pendingSink) Health(ctx context.Context) sink.Health {
	if p.open() == nil {
		t := time.NewTimer(firstTryWait)
		select {
		case <-p.firstTry:
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if s := p.open(); s != nil {
		return s.Health(ctx)
	}
	return sink.Health{State: sink.Down, Reason: "sink down, not open yet: " + p.err().Error()}
}

// Close implements sink.Sink: it stops the opener, then closes the sink
// if it opened.
func (p *pendingSink) Close() error {
	p.cancel()
	<-p.done
	if s := p.open(); s != nil {
		return s.Close()
	}
	return nil
}

// pendingCursors is the cursor store of the store-managed sources when it
// lives beside raw (gate = "raw", or an offset store to adopt cursors
// from): it opens once raw does, and a source's Load waits for it, so the
// source starts reading only when it can commit its position.
type pendingCursors struct {
	ready chan struct{}
	cs    source.CursorStore
}

// openCursorsWhen opens the cursor store with open once ready is closed,
// retrying with openRetry; stop ends the attempts.
func openCursorsWhen(ctx context.Context, ready <-chan struct{}, open func(context.Context) (source.CursorStore, error), log *slog.Logger) *pendingCursors {
	p := &pendingCursors{ready: make(chan struct{})}
	go func() {
		select {
		case <-ready:
		case <-ctx.Done():
			return
		}
		b := backoff.Backoff{Policy: openRetry}
		for {
			cs, err := open(ctx)
			if err == nil {
				p.cs = cs
				close(p.ready)
				return
			}
			d := b.Next()
			log.Error("source cursor store cannot be opened; the store-managed sources wait for it", "err", err, "retry_in", d)
			if !backoff.Sleep(ctx, d) {
				return
			}
		}
	}()
	return p
}

func (p *pendingCursors) get(ctx context.Context) (source.CursorStore, error) {
	select {
	case <-p.ready:
		return p.cs, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("source cursor store not open: %w", ctx.Err())
	}
}

// Load implements source.CursorStore, waiting for the store to open.
func (p *pendingCursors) Load(ctx context.Context, src string) (source.Cursor, error) {
	cs, err := p.get(ctx)
	if err != nil {
		return nil, err
	}
	return cs.Load(ctx, src)
}

// Save implements source.CursorStore, waiting for the store to open.
func (p *pendingCursors) Save(ctx context.Context, src string, c source.Cursor) error {
	cs, err := p.get(ctx)
	if err != nil {
		return err
	}
	return cs.Save(ctx, src, c)
}
