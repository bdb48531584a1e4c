package flightsrc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/httpin"
	"github.com/weir-io/weir/internal/tlsconf"
	"github.com/weir-io/weir/source"
)

// Options configure a Flight source.
type Options struct {
	Name    string   // the source's name: Record.Source, part of every id
	Listen  string   // host:port
	Streams []string // the stream names DoPut accepts
	Columns arrowrec.Columns
	// Tokens, when set, authenticate every call (a bearer token with the
	// push scope). TLS, when set, serves TLS (with client certificates
	// when it asks for them).
	Tokens *httpin.Tokens
	TLS    *tlsconf.Manager
	// TLSReload is how often the TLS material is re-read (also on SIGHUP,
	// with the token file).
	TLSReload time.Duration
	// MaxInflightBytes bounds each stream's bytes read but not yet
	// acknowledged; reading waits at it.
	MaxInflightBytes int64
	// MaxMessageBytes bounds one FlightData message.
	MaxMessageBytes int
	// RetryAfter is the retry hint of a DoPut refused in Critical.
	RetryAfter time.Duration
	// StopTimeout bounds a graceful stop; past it calls are cut.
	StopTimeout time.Duration
	Metrics     *Metrics
	Logger      *slog.Logger
	// OnAck is called after each PutResult sent (a position commit).
	OnAck func()
}

// Source is the Flight source: a Flight server whose DoPut writes through
// the gate.
type Source struct {
	opts    Options
	streams map[string]*streamState
	source.Pauser

	mu   sync.Mutex
	addr net.Addr
}

// streamState is what ListFlights and GetFlightInfo say of a stream.
type streamState struct {
	mu     sync.Mutex
	schema *arrowrec.Schema // the last DoPut's; nil before the first
	rows   int64
	bytes  int64
}

var (
	_ source.Source   = (*Source)(nil)
	_ source.Pausable = (*Source)(nil)
)

// New returns the source; it listens only in Run.
func New(o Options) (*Source, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		return nil, errors.New("flightsrc: Options.Metrics is required")
	}
	if o.OnAck == nil {
		o.OnAck = func() {}
	}
	s := &Source{opts: o, streams: map[string]*streamState{}}
	for _, n := range o.Streams {
		s.streams[n] = &streamState{}
	}
	return s, nil
}

func (s *Source) Name() string { return s.opts.Name }

// Regime: the producer keeps each batch until its PutResult and resends
// what was not acknowledged.
func (s *Source) Regime() source.Regime { return source.ProducerManaged }

// Replayable: a Flight stream cannot be read again.
func (s *Source) Replayable() bool { return false }

// Addr is the bound address once Run listens; nil before.
func (s *Source) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Run serves Flight on Options.Listen until ctx ends, then stops
// gracefully: calls in progress finish (their acknowledged batches are
// durable), within StopTimeout.
func (s *Source) Run(ctx context.Context, gate source.Gate, _ source.CursorStore) error {
	lis, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("flight source %s: listen: %w", s.opts.Name, err)
	}
	s.mu.Lock()
	s.addr = lis.Addr()
	s.mu.Unlock()
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.opts.MaxMessageBytes),
		grpc.ChainUnaryInterceptor(s.authUnary),
		grpc.ChainStreamInterceptor(s.authStream),
	}
	if s.opts.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.opts.TLS.ServerConfig())))
	}
	gs := grpc.NewServer(opts...)
	budget := flow.NewBudget(flow.BudgetOptions{Limit: s.opts.MaxInflightBytes, WarmupFraction: 1})
	defer budget.Close()
	flight.RegisterFlightServiceServer(gs, &service{src: s, gate: gate, budget: budget, stopping: ctx.Done()})
	defer httpin.ReloadOnHUP(s.opts.Tokens, s.opts.TLS, s.opts.TLSReload)()
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	scheme := "grpc"
	if s.opts.TLS != nil {
		scheme = "grpc+tls"
	}
	s.opts.Logger.Info("flight source listening", "addr", lis.Addr().String(), "scheme", scheme, "streams", s.opts.Streams,
		"auth", s.opts.Tokens != nil)
	select {
	case err := <-served:
		return fmt.Errorf("flight source %s: serve: %w", s.opts.Name, err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(s.opts.StopTimeout):
		s.opts.Logger.Warn("flight source: calls still running at the stop timeout are cut; their producers resend what was not acknowledged", "stop_timeout", s.opts.StopTimeout)
		gs.Stop()
		<-stopped
	}
	<-served
	return nil
}
