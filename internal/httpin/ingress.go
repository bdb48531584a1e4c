package httpin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/weir-io/weir/internal/server"
	"github.com/weir-io/weir/source"
)

// ErrGate is returned by Listen and Run when the gate is not the
// write-ahead buffer: each request is answered once its own tier's
// promise holds, which only the buffer's group commit serves.
var ErrGate = errors.New("httpin: the HTTP ingress needs the write-ahead buffer as its gate")

// Ingress is the HTTP listener seen as a source. Like the socket's, its
// regime is producer-managed (the 2xx is the position commit: the client
// keeps what was not answered 2xx and sends it again) and its origin is
// not replayable, so it always writes through the write-ahead buffer.
//
// Listen binds and serves; Run serves until its context ends, then shuts
// down within StopTimeout: the listener closes, requests being served are
// answered (their records' promise holds or they are refused), idle
// connections close. A request whose connection dies before its answer
// may or may not have been stored (docs/http.md: Idempotency-Key).
type Ingress struct {
	opts  Options
	slots chan struct{}

	mu      sync.Mutex
	srv     *http.Server
	addr    net.Addr
	backend server.Backend
	served  chan struct{} // closed when Serve returned
	streams *streamSet    // the open WebSocket streams

	ready atomic.Bool
	turn  atomic.Uint32 // round-robin over the shards
}

var _ source.Source = (*Ingress)(nil)

// New returns an ingress that has bound nothing yet.
func New(opts Options) *Ingress {
	opts = opts.withDefaults()
	return &Ingress{opts: opts, slots: make(chan struct{}, opts.MaxConcurrent)}
}

// Name implements source.Source: the stream's name.
func (in *Ingress) Name() string { return in.opts.Stream }

// Regime implements source.Source: producer-managed.
func (in *Ingress) Regime() source.Regime { return source.ProducerManaged }

// Replayable implements source.Source: an HTTP request cannot be re-read.
func (in *Ingress) Replayable() bool { return false }

// Addr is the bound address (nil before Listen).
func (in *Ingress) Addr() net.Addr {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.addr
}

// Listen binds the listener and serves it in the background, submitting
// to gate's buffer. It is a no-op while listening.
func (in *Ingress) Listen(gate source.Gate) error {
	b, ok := gate.(server.Backend)
	if !ok {
		return fmt.Errorf("%w (got %T)", ErrGate, gate)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.srv != nil {
		return nil
	}
	ln, err := net.Listen("tcp", in.opts.Addr)
	if err != nil {
		return fmt.Errorf("http listen on %s: %w", in.opts.Addr, err)
	}
	o := in.opts
	srv := &http.Server{
		Handler:           in.Handler(),
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		WriteTimeout:      o.WriteTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(o.Logger.Handler(), slog.LevelDebug),
	}
	var p http.Protocols
	p.SetHTTP1(true)
	if o.TLS != nil {
		p.SetHTTP2(true)
		srv.TLSConfig = withALPN(o.TLS)
	}
	if o.H2C {
		p.SetUnencryptedHTTP2(true)
	}
	srv.Protocols = &p
	ln = limitListen(ln, o.MaxConnections, func() { o.Observer.Refused(RefusedConnections) })
	in.srv, in.addr, in.backend, in.streams = srv, ln.Addr(), b, newStreamSet()
	in.served = make(chan struct{})
	in.ready.Store(true)
	served := in.served
	go func() {
		defer close(served)
		var err error
		if o.TLS != nil {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.Logger.Error("http listener stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	transport := "http"
	if o.TLS != nil {
		transport = "https"
	}
	o.Logger.Info("listening", "transport", transport, "addr", ln.Addr().String(), "stream", o.Stream,
		"auth_tokens", o.Tokens != nil, "h2c", o.H2C)
	return nil
}

// withALPN offers HTTP/2 and HTTP/1.1 by ALPN on a configuration whose
// per-handshake configuration (tlsconf's, reloaded) would offer neither.
func withALPN(cfg *tls.Config) *tls.Config {
	c := cfg.Clone()
	c.NextProtos = []string{"h2", "http/1.1"}
	if get := cfg.GetConfigForClient; get != nil {
		c.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			cc, err := get(h)
			if err != nil || cc == nil {
				return cc, err
			}
			cc = cc.Clone()
			cc.NextProtos = []string{"h2", "http/1.1"}
			return cc, nil
		}
	}
	return c
}

// streamSet is the open streams of the current Listen.
func (in *Ingress) streamSet() *streamSet {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.srv == nil {
		return nil
	}
	return in.streams
}

// Run implements source.Source: it listens (if Listen was not called),
// serves until ctx ends, then shuts down within StopTimeout.
func (in *Ingress) Run(ctx context.Context, gate source.Gate, _ source.CursorStore) error {
	if err := in.Listen(gate); err != nil {
		return err
	}
	<-ctx.Done()
	return in.Shutdown()
}

// Shutdown stops the listener: new requests are refused, those being
// served are answered within StopTimeout, then every connection closes;
// the WebSocket streams stop reading, answer what they read, and close.
func (in *Ingress) Shutdown() error {
	in.mu.Lock()
	srv, served, streams := in.srv, in.served, in.streams
	in.srv = nil
	in.mu.Unlock()
	if srv == nil {
		return nil
	}
	in.ready.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), in.opts.StopTimeout)
	defer cancel()
	err := srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(fmt.Errorf("http listener: %w", err), srv.Close())
	}
	<-served
	// Shutdown neither waits for nor closes the streams (hijacked).
	return errors.Join(err, streams.close(ctx))
}
