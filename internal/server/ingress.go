package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/weir-io/weir/source"
)

// ErrIngressGate is returned by Ingress.Run when its gate is not a
// write-ahead buffer: producers choose a durability tier per request and
// are answered per request, which only the buffer's group commit serves.
var ErrIngressGate = errors.New("server: the socket ingress needs the write-ahead buffer as its gate")

// IngressOptions configure an Ingress.
type IngressOptions struct {
	// Name is the source's name in logs and metrics; empty means "socket".
	Name string
	// Server configures each Server the ingress runs.
	Server Options
	// SocketPath is the Unix socket to bind (see listenUnix for how).
	SocketPath string
	// Extra binds further listeners on a fresh server (TCP with mutual
	// TLS) and returns what to call once the server has shut down; nil
	// means none.
	Extra func(*Server) (stop func(), err error)
	// StopTimeout bounds the graceful shutdown when Run's context ends:
	// in-flight requests are answered, then connections close.
	StopTimeout time.Duration
}

// Ingress is the daemon's producer listeners seen as one source among
// others. Its regime is producer-managed: a producer keeps every record
// until it is acknowledged and resends what was not, so the Ack is the
// position commit, and it is sent only once the record is durable to the
// tier the producer asked for. Its origin is not replayable — once a
// producer has moved on nothing upstream holds the record — so it can never
// be its own raw: it always writes through the write-ahead buffer.
//
// Listen binds (so that a socket in use fails the start, not a retry
// loop); Run serves until its context ends and then shuts down gracefully.
// A Run after a Run that returned binds again.
type Ingress struct {
	opts IngressOptions

	mu   sync.Mutex
	srv  *Server
	stop func()
}

var _ source.Source = (*Ingress)(nil)

// NewIngress returns an ingress that has bound nothing yet.
func NewIngress(opts IngressOptions) *Ingress {
	if opts.Name == "" {
		opts.Name = "socket"
	}
	return &Ingress{opts: opts}
}

// Name implements source.Source.
func (in *Ingress) Name() string { return in.opts.Name }

// Regime implements source.Source: producer-managed.
func (in *Ingress) Regime() source.Regime { return source.ProducerManaged }

// Replayable implements source.Source: a socket feed cannot be re-read.
func (in *Ingress) Replayable() bool { return false }

// Listen binds the listeners on a new server submitting to gate's buffer.
// It is a no-op while listening.
func (in *Ingress) Listen(gate source.Gate) error {
	b, ok := gate.(Backend)
	if !ok {
		return fmt.Errorf("%w (got %T)", ErrIngressGate, gate)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.srv != nil {
		return nil
	}
	srv := New(in.opts.Server, b)
	if err := srv.ListenUnix(in.opts.SocketPath); err != nil {
		return err
	}
	stop := func() {}
	if in.opts.Extra != nil {
		s, err := in.opts.Extra(srv)
		if err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), in.opts.StopTimeout)
			defer cancel()
			return errors.Join(err, srv.Shutdown(ctx))
		}
		stop = s
	}
	in.srv, in.stop = srv, stop
	return nil
}

// Run implements source.Source: it listens (if Listen was not called),
// serves until ctx ends, then shuts the server down within StopTimeout:
// listeners close, requests already read are answered, connections close.
// cursors is unused: the producer keeps its own position.
func (in *Ingress) Run(ctx context.Context, gate source.Gate, _ source.CursorStore) error {
	if err := in.Listen(gate); err != nil {
		return err
	}
	<-ctx.Done()
	return in.shutdown()
}

func (in *Ingress) shutdown() error {
	in.mu.Lock()
	srv, stop := in.srv, in.stop
	in.srv, in.stop = nil, nil
	in.mu.Unlock()
	if srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), in.opts.StopTimeout)
	defer cancel()
	err := srv.Shutdown(ctx)
	stop()
	return err
}

// Shutdown stops a server that Listen started and Run never served (a
// daemon whose start failed later on).
func (in *Ingress) Shutdown() error { return in.shutdown() }
