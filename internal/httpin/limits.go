package httpin

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/weir-io/weir/internal/flow"
)

// Defaults of Options.
const (
	DefaultAddr              = "127.0.0.1:9186"
	DefaultStream            = "http"
	DefaultMaxBodyBytes      = 16 << 20
	DefaultMaxDecodedBytes   = 32 << 20
	DefaultMaxRecords        = 10000
	DefaultMaxConcurrent     = 256
	DefaultMaxConnections    = 1024
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxHeaderBytes    = 16 << 10
	DefaultRetryAfter        = time.Second
	// MaxIdempotencyKeyBytes bounds an Idempotency-Key header's value.
	MaxIdempotencyKeyBytes = 255
)

// Throttle is flow control's verdict on producers (flow.Controller).
type Throttle interface{ Throttled() bool }

// Observer receives the listener's counts (metrics.HTTP). Methods must
// be cheap and safe for concurrent use; nil is allowed.
type Observer interface {
	// Request counts one answered request: its route, status code and
	// duration in seconds.
	Request(route string, code int, seconds float64)
	// Received counts the body bytes read (as sent, before
	// decompression) and records decoded of an accepted request.
	Received(bytes, records int)
	// InFlight moves the gauge of requests being served by delta.
	InFlight(delta int)
	// Refused counts a request refused for reason (a Reason).
	Refused(reason string)
}

// Options configure an Ingress. Zero fields take the Default* constants.
type Options struct {
	// Stream is the source's name: in logs, metrics, the records' source
	// field, and what a [[contract]] names.
	Stream string
	// Addr is the TCP address to listen on.
	Addr string
	// TLS, when set, serves HTTPS (HTTP/2 offered by ALPN).
	TLS *tls.Config
	// H2C serves HTTP/2 without TLS (prior knowledge or Upgrade) as well.
	H2C bool
	// Tokens, when set, requires a bearer token it knows on every request.
	Tokens *Tokens

	MaxBodyBytes    int64 // a body as sent (compressed or not)
	MaxDecodedBytes int64 // a body once decompressed
	MaxRecords      int   // records per request
	MaxRecordBytes  int   // one payload (the buffer's max record size)
	MaxConcurrent   int   // requests served at once; more are answered 429
	MaxConnections  int   // connections open at once; more are closed at accept
	// StreamInflightBytes is what one stream's unanswered messages may
	// hold (of Budget); the stream stops reading beyond it.
	StreamInflightBytes int64
	ReadHeaderTimeout   time.Duration
	ReadTimeout         time.Duration // whole request, body included
	WriteTimeout        time.Duration // from the end of the headers to the answer
	IdleTimeout         time.Duration // keep-alive between requests
	MaxHeaderBytes      int

	// Budget is flow control's memory budget: every body is held in it
	// before it is read (nil: admission off).
	Budget *flow.Budget
	// AdmissionWait is how long a body waits for memory before 429.
	AdmissionWait time.Duration
	// Throttle, when it says so, refuses requests with 429 at once.
	Throttle Throttle
	// RetryAfter is the Retry-After of 429 and 503 answers.
	RetryAfter time.Duration
	// QueueTimeout is how long a request waits for room in a shard queue.
	QueueTimeout time.Duration
	// StopTimeout bounds the graceful shutdown.
	StopTimeout time.Duration

	Observer Observer
	Logger   *slog.Logger
}

func (o Options) withDefaults() Options {
	def := func(p *time.Duration, d time.Duration) {
		if *p <= 0 {
			*p = d
		}
	}
	if o.Stream == "" {
		o.Stream = DefaultStream
	}
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxDecodedBytes <= 0 {
		o.MaxDecodedBytes = DefaultMaxDecodedBytes
	}
	if o.MaxRecords <= 0 {
		o.MaxRecords = DefaultMaxRecords
	}
	if o.MaxRecordBytes <= 0 {
		o.MaxRecordBytes = 4 << 20
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.StreamInflightBytes <= 0 {
		o.StreamInflightBytes = DefaultStreamInflightBytes
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	def(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&o.ReadTimeout, DefaultReadTimeout)
	def(&o.WriteTimeout, DefaultWriteTimeout)
	def(&o.IdleTimeout, DefaultIdleTimeout)
	def(&o.RetryAfter, DefaultRetryAfter)
	def(&o.QueueTimeout, time.Second)
	def(&o.StopTimeout, 30*time.Second)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	return o
}

type nopObserver struct{}

func (nopObserver) Request(string, int, float64) {}
func (nopObserver) Received(int, int)            {}
func (nopObserver) InFlight(int)                 {}
func (nopObserver) Refused(string)               {}
