// Package server accepts producer connections and turns wire-protocol push
// frames into write-ahead-buffer requests. The accept loop is per transport
// (a hardened Unix socket; TCP with mutual TLS); everything below it — the
// TLS handshake where there is one, framing, deadlines, the in-flight
// window, ordered acks — is one connection handler shared by every
// transport.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weir-io/weir/internal/backoff"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/wab"
	"github.com/weir-io/weir/wire"
)

// Backend is where accepted records go: the write-ahead buffer. Submit
// and SubmitInline are wab.Log's: SubmitInline, which the reader uses for
// a lone frame, may write the request on the reader's goroutine (an idle
// shard) and complete it before it returns.
type Backend interface {
	Shards() int
	ShardErr(shard int) error
	Submit(ctx context.Context, shard int, req *wab.Request, wait time.Duration) error
	SubmitInline(ctx context.Context, shard int, req *wab.Request, wait time.Duration) error
}

// Observer receives the server's counts. Methods must be cheap and safe for
// concurrent use. A nil Observer is allowed.
type Observer interface {
	ConnOpened()
	ConnClosed()
	// ConnRejected counts a connection refused at accept (reason:
	// "max_connections" or "shutting_down").
	ConnRejected(reason string)
	// Received counts decoded push frames of tier d: frames frames holding
	// records records and bytes payload bytes in all. A connection reports
	// the frames it read together in one call, not one call per frame (each
	// call writes counters shared by every connection).
	Received(d wire.Durability, frames, records, bytes int)
	// Acked counts acknowledged push frames of tier d, as Received: a
	// connection reports the acks it writes together in one call.
	Acked(d wire.Durability, frames, records, bytes int)
	// Nacked counts a frame refused with code.
	Nacked(d wire.Durability, code wire.Code, records int)
}

// Options configure a Server. Zero durations disable the matching timeout,
// except QueueTimeout: zero there means no wait at all.
type Options struct {
	MaxConnections   int // connections open at once; see slotWait
	MaxFrameBytes    int
	FrameReadTimeout time.Duration // a started frame must arrive within this
	IdleTimeout      time.Duration // a connection with no new frame is closed after this
	WriteTimeout     time.Duration // writing responses must progress within this
	QueueTimeout     time.Duration // longest wait for space in a shard's queue; 0: a full queue is refused at once
	ConnMaxInflight  int           // requests in flight per connection
	Logger           *slog.Logger
	Observer         Observer

	// Budget, when set, is the node's memory budget: every push frame
	// reserves the memory its connection holds for it before it is
	// submitted, and gives it back once answered (see admission.go). nil:
	// no reservations, and no byte cap per connection.
	Budget *flow.Budget
	// ConnMaxInflightBytes caps the memory one connection's unanswered
	// frames hold (with a Budget); 0 takes DefaultConnMaxInflightBytes.
	ConnMaxInflightBytes int64
	// AdmissionWait is the longest a frame waits for memory before it is
	// answered Overloaded; 0 does not wait.
	AdmissionWait time.Duration
	// RetryAfter is the hint an Overloaded answer carries; 0 takes
	// DefaultRetryAfter.
	RetryAfter time.Duration
	// Throttle, when set, reports that flow control throttles producers
	// (the Critical state): push frames are answered Overloaded at once.
	Throttle interface{ Throttled() bool }
}

// Server serves producer connections.
type Server struct {
	opts    Options
	backend Backend
	log     *slog.Logger
	obs     Observer

	chunk    int64         // credit a connection takes from Budget at once
	slots    chan struct{} // one per open connection (max_connections)
	freed    atomic.Uint64 // slots given back so far
	nextConn atomic.Uint64
	closing  atomic.Bool
	stop     chan struct{} // closed when Shutdown starts
	stopOnce sync.Once

	ctx    context.Context // cancelled when Shutdown gives up waiting
	cancel context.CancelFunc

	mu        sync.Mutex
	listeners map[net.Listener]io.Closer
	conns     map[*conn]struct{}
	wg        sync.WaitGroup // connection goroutines
	acceptWG  sync.WaitGroup
}

// New makes a server that submits to backend.
func New(opts Options, backend Backend) *Server {
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = 1024
	}
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = wire.DefaultMaxFrameBytes
	}
	if opts.ConnMaxInflight <= 0 {
		opts.ConnMaxInflight = 4096
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ConnMaxInflightBytes <= 0 {
		opts.ConnMaxInflightBytes = DefaultConnMaxInflightBytes
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	var chunk int64
	if opts.Budget != nil {
		chunk = creditChunk(opts.Budget.Stats().Limit, opts.ConnMaxInflightBytes)
	}
	obs := opts.Observer
	if obs == nil {
		obs = nopObserver{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		opts:      opts,
		chunk:     chunk,
		backend:   backend,
		log:       opts.Logger,
		obs:       obs,
		slots:     make(chan struct{}, opts.MaxConnections),
		stop:      make(chan struct{}),
		ctx:       ctx,
		cancel:    cancel,
		listeners: make(map[net.Listener]io.Closer),
		conns:     make(map[*conn]struct{}),
	}
}

// ListenUnix binds the hardened Unix socket at path (see listenUnix) and
// serves it in the background until Shutdown.
func (s *Server) ListenUnix(path string) error {
	if s.closing.Load() {
		return errors.New("server: ListenUnix after Shutdown")
	}
	ln, lock, err := listenUnix(path)
	if err != nil {
		return err
	}
	s.serve(ln, lock, true)
	s.log.Info("listening", "transport", "unix", "socket", path)
	return nil
}

// Serve serves an already-bound listener (any transport) in the background
// until Shutdown. The server closes it; after Shutdown it is closed at once.
// Its connections are never granted replay: only the Unix socket that
// ListenUnix binds (owner-only) is trusted with it.
func (s *Server) Serve(ln net.Listener) { s.serve(ln, nil, false) }

// serve runs ln's accept loop; replay says whether its connections may be
// granted replay fields (docs/wire_protocol.md, "Replay fields").
func (s *Server) serve(ln net.Listener, extra io.Closer, replay bool) {
	s.mu.Lock()
	if s.closing.Load() { // Shutdown has closed the listeners already
		s.mu.Unlock()
		ln.Close()
		if extra != nil {
			extra.Close()
		}
		return
	}
	s.listeners[ln] = extra
	s.mu.Unlock()
	s.acceptWG.Add(1)
	go func() {
		defer s.acceptWG.Done()
		s.acceptLoop(ln, replay)
	}()
}

// slotWait is how long a connection that finds every max_connections slot
// taken waits for one before it is refused. A connection gives its slot
// back once its reader has seen the peer's close and everything the peer
// sent has been answered; when producers connect and close in quick
// succession, the accept loop takes the next connections off the backlog
// before the readers of the closed ones have run, and would refuse
// producers while fewer than max_connections peers are connected. (The
// max_connections knob's help in internal/config states this wait.)
const slotWait = 100 * time.Millisecond

// takeSlot takes a connection slot for a new connection, or says why not.
// At the limit it waits up to slotWait for a slot, unless the last such
// wait (whose freed count is *full) found none and no slot has been freed
// since: the limit really is reached, and a burst of connections is
// refused at once rather than at one per slotWait.
func (s *Server) takeSlot(full *uint64) (refused string) {
	select {
	case s.slots <- struct{}{}:
		return ""
	default:
	}
	freed := s.freed.Load()
	if freed == *full {
		return "max_connections"
	}
	t := time.NewTimer(slotWait)
	defer t.Stop()
	select {
	case s.slots <- struct{}{}:
		return ""
	case <-t.C:
		*full = freed
		return "max_connections"
	case <-s.stop:
		return "shutting_down"
	}
}

// freeSlot gives a connection's slot back.
func (s *Server) freeSlot() {
	<-s.slots
	s.freed.Add(1)
}

func (s *Server) acceptLoop(ln net.Listener, replay bool) {
	pause := backoff.Backoff{Policy: backoff.Policy{Min: 5 * time.Millisecond, Max: time.Second}}
	full := ^uint64(0) // freed count when the limit was last found reached
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and friends: back off rather than spin.
			d := pause.Next()
			s.log.Warn("accept failed", "err", err, "retry_in", d)
			backoff.Sleep(s.ctx, d) // Shutdown ends the wait; the next Accept fails with ErrClosed
			continue
		}
		pause.Reset()
		if s.closing.Load() {
			s.obs.ConnRejected("shutting_down")
			nc.Close()
			continue
		}
		if reason := s.takeSlot(&full); reason != "" {
			s.obs.ConnRejected(reason)
			if reason == "max_connections" {
				s.log.Warn("connection refused: max_connections reached", "max_connections", s.opts.MaxConnections)
			}
			nc.Close()
			continue
		}
		c := s.newConn(nc, replay)
		s.mu.Lock()
		if s.closing.Load() {
			s.mu.Unlock()
			s.freeSlot()
			s.obs.ConnRejected("shutting_down")
			nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.obs.ConnOpened()
		go func() {
			defer s.wg.Done()
			c.run()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			s.freeSlot()
			s.obs.ConnClosed()
		}()
	}
}

// pickShard pins a new connection to the next shard round-robin, skipping
// shards that have failed while another one is healthy.
func (s *Server) pickShard() int {
	n := s.backend.Shards()
	first := int(s.nextConn.Add(1)-1) % n
	for i := 0; i < n; i++ {
		sh := (first + i) % n
		if s.backend.ShardErr(sh) == nil {
			return sh
		}
	}
	return first
}

// Shutdown stops accepting, stops reading new frames (frames already
// buffered are answered ShuttingDown), waits until every accepted request
// has been answered, and closes all connections. If ctx ends first the
// remaining connections are closed without their answers — those requests
// were never acked, so nothing acked is lost — and ctx's error is returned.
// A connection whose reader is writing a lone frame itself
// (Backend.SubmitInline) is closed once that write returns: a storage call
// that never returns holds Shutdown as it holds the buffer's Close (the
// daemon's stuck detector ends such a process).
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	s.stopOnce.Do(func() { close(s.stop) })
	s.mu.Lock()
	for ln, extra := range s.listeners {
		ln.Close()
		if extra != nil {
			extra.Close()
		}
	}
	s.listeners = map[net.Listener]io.Closer{}
	for c := range s.conns {
		c.stopReading()
	}
	s.mu.Unlock()
	s.acceptWG.Wait()

	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		s.cancel()
		return nil
	case <-ctx.Done():
		s.cancel()
		s.mu.Lock()
		for c := range s.conns {
			c.nc.Close()
		}
		s.mu.Unlock()
		<-done
		return fmt.Errorf("server shutdown: %w", ctx.Err())
	}
}

type nopObserver struct{}

func (nopObserver) ConnOpened()                             {}
func (nopObserver) ConnClosed()                             {}
func (nopObserver) ConnRejected(string)                     {}
func (nopObserver) Received(wire.Durability, int, int, int) {}
func (nopObserver) Acked(wire.Durability, int, int, int)    {}
func (nopObserver) Nacked(wire.Durability, wire.Code, int)  {}
