// Package lifecycle runs a node as a stack of named parts: each part is
// started in order, and the parts are stopped in reverse order under one
// deadline — the node's shutdown_timeout — however many there are and
// however each of them behaves.
//
// The promise Stop keeps is a bound on time, not on politeness: a part
// whose stop has not returned when the deadline passes is abandoned (its
// goroutine is left to finish or to die with the process) and named in
// the error, and the parts below it are still stopped, with the expired
// context, all of them within one short straggle (DefaultStraggle). So a hung sink commit,
// a coordination store that no longer answers and a broker read that
// never returns together cost the deadline plus a little, never the sum
// of their own timeouts. Nothing weir acknowledged depends on a stop
// finishing: acknowledgements follow durability, and what a stop cut
// short is replayed at the next start.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// DefaultStraggle is how long, in all, the parts still to stop are given
// once the deadline has passed.
const DefaultStraggle = 500 * time.Millisecond

// StopFunc stops a started part. It should return once ctx ends, whether
// or not it finished.
type StopFunc func(ctx context.Context) error

// Stack is the parts of a node, started in the order they were pushed.
// Its zero value is not usable: use New.
type Stack struct {
	log      *slog.Logger
	straggle time.Duration

	mu      sync.Mutex
	parts   []part
	stopped bool
}

type part struct {
	name string
	stop StopFunc
}

// New returns an empty stack that logs to log (nil: discard).
func New(log *slog.Logger) *Stack {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Stack{log: log, straggle: DefaultStraggle}
}

// Push adds a started part: stop runs before every part pushed earlier.
// A nil stop is a part with nothing to stop (kept for the log's sake).
func (s *Stack) Push(name string, stop StopFunc) {
	if stop == nil {
		stop = func(context.Context) error { return nil }
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		panic(fmt.Sprintf("lifecycle: part %q pushed after Stop", name))
	}
	s.parts = append(s.parts, part{name: name, stop: stop})
}

// PushClose adds a part whose stop takes no context (an io.Closer's
// Close): it is bounded by the deadline all the same, by being abandoned.
func (s *Stack) PushClose(name string, closeFn func() error) {
	s.Push(name, func(context.Context) error { return closeFn() })
}

// Start runs start, naming the part in its error, and pushes the stop it
// returns when it succeeds.
func (s *Stack) Start(name string, start func() (StopFunc, error)) error {
	stop, err := start()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	s.Push(name, stop)
	return nil
}

// Names is the parts in start order.
func (s *Stack) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.parts))
	for i, p := range s.parts {
		out[i] = p.name
	}
	return out
}

// ErrAbandoned is wrapped by Stop's error for each part whose stop did
// not return in time.
var ErrAbandoned = errors.New("did not stop before the shutdown deadline; abandoned")

// Stop stops every part in reverse start order, all under ctx's
// deadline, and returns every stop's error joined. Once ctx has ended,
// each remaining part is still asked to stop (with the ended ctx), and
// all of them together are waited for at most the straggle. Stop may be called once; the stack
// takes no parts afterwards.
func (s *Stack) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return errors.New("lifecycle: stopped twice")
	}
	s.stopped = true
	parts := s.parts
	s.mu.Unlock()
	var errs []error
	late := lateTimer{ctx: ctx, straggle: s.straggle}
	defer late.stop()
	for i := len(parts) - 1; i >= 0; i-- {
		p := parts[i]
		start := time.Now()
		if err := late.wait(p); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", p.name, err))
			s.log.Error("stopping part of the node", "part", p.name, "err", err, "took", time.Since(start).Round(time.Millisecond))
			continue
		}
		s.log.Debug("stopped", "part", p.name, "took", time.Since(start).Round(time.Millisecond))
	}
	return errors.Join(errs...)
}

// lateTimer waits for stops: each until ctx ends — the part still
// stopping then is abandoned at once — and after that, one straggle for
// all the stops left.
type lateTimer struct {
	ctx      context.Context
	straggle time.Duration
	t        *time.Timer // started when the first part is abandoned
}

// wait runs p's stop and waits for it.
func (l *lateTimer) wait(p part) error {
	done := make(chan error, 1)
	go func() { done <- p.stop(l.ctx) }()
	select {
	case err := <-done:
		return err
	case <-l.ctx.Done():
	}
	select {
	case err := <-done: // finished as the deadline passed
		return err
	default:
	}
	if l.t == nil { // p was stopping when the deadline passed
		l.t = time.NewTimer(l.straggle)
		return ErrAbandoned
	}
	select {
	case err := <-done:
		return err
	case <-l.t.C:
		l.t.Reset(0) // every later wait finds it run out too
		return ErrAbandoned
	}
}

func (l *lateTimer) stop() {
	if l.t != nil {
		l.t.Stop()
	}
}
