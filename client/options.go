package client

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/weir-io/weir/wire"
)

// Defaults of the options.
const (
	// DefaultWindow is the default number of records in flight.
	DefaultWindow = 1024
	// DefaultDialTimeout bounds each dial attempt, the first one and every
	// redial.
	DefaultDialTimeout = 5 * time.Second
	// DefaultBackoffMin is the pause before the first redial.
	DefaultBackoffMin = 50 * time.Millisecond
	// DefaultBackoffMax caps the pause between redials.
	DefaultBackoffMax = 5 * time.Second
	// DefaultMaxFrameBytes is the largest frame body the client sends; it
	// matches the daemon's default cap.
	DefaultMaxFrameBytes = wire.DefaultMaxFrameBytes
	// DefaultOverloadMaxDelay caps the pause after an Overloaded Nack.
	DefaultOverloadMaxDelay = 5 * time.Second
	// DefaultOverloadRetries is how often a request refused Overloaded is
	// sent again: without limit (until Close gives up on it).
	DefaultOverloadRetries = -1
)

type options struct {
	window      int
	dialTimeout time.Duration
	backoffMin  time.Duration
	backoffMax  time.Duration
	maxFrame    int
	tls         *tls.Config
	logger      *slog.Logger
	maxVersion  uint8
	producer    *Producer
	// Overloaded Nacks: the longest pause, and how often one request is
	// sent again (< 0: without limit).
	overloadMax     time.Duration
	overloadRetries int
}

func defaultOptions() options {
	return options{
		window:      DefaultWindow,
		dialTimeout: DefaultDialTimeout,
		backoffMin:  DefaultBackoffMin,
		backoffMax:  DefaultBackoffMax,
		maxFrame:    DefaultMaxFrameBytes,
		maxVersion:  wire.MaxVersion,

		overloadMax:     DefaultOverloadMaxDelay,
		overloadRetries: DefaultOverloadRetries,
	}
}

// Option configures a Client.
type Option func(*options)

// WithWindow bounds the records that are pushed but not yet answered
// (default DefaultWindow, 1024). Pushes block while the window is full. A
// batch larger than the window occupies the whole window. Values below 1
// are ignored.
func WithWindow(records int) Option {
	return func(o *options) {
		if records >= 1 {
			o.window = records
		}
	}
}

// WithDialTimeout bounds each dial attempt, including the TLS handshake
// (default DefaultDialTimeout, 5s). Values of zero or less are ignored.
func WithDialTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.dialTimeout = d
		}
	}
}

// WithBackoff sets the pause between redials after a connection breaks: it
// starts at minDelay and doubles on every failed attempt up to maxDelay
// (defaults DefaultBackoffMin, 50ms, and DefaultBackoffMax, 5s), with
// random jitter of up to half the delay. It starts again from minDelay
// once a connection has carried a response. Values of zero or less, or
// maxDelay < minDelay, keep the defaults.
func WithBackoff(minDelay, maxDelay time.Duration) Option {
	return func(o *options) {
		if minDelay > 0 && maxDelay >= minDelay {
			o.backoffMin, o.backoffMax = minDelay, maxDelay
		}
	}
}

// WithMaxFrameBytes sets the largest frame body the client sends (default
// DefaultMaxFrameBytes, 4 MiB, the daemon's default). A push that does not
// fit fails at once with ErrFrameTooLarge. Set it to the daemon's
// configured cap. Values below 1 are ignored.
func WithMaxFrameBytes(n int) Option {
	return func(o *options) {
		if n >= 1 {
			o.maxFrame = n
		}
	}
}

// WithTLS sets the TLS configuration for tcp:// addresses (required for
// them; the daemon accepts TCP only with mutual TLS, so the config should
// carry a client certificate). The config is cloned; if its MinVersion is
// unset it is raised to TLS 1.3, and an empty ServerName is taken from the
// address.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		if cfg != nil {
			o.tls = cfg.Clone()
		}
	}
}

// WithLogger sets the logger for connection events (breaks, redials,
// protocol anomalies). The default discards them.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithProducer makes the client push as p: p's id, sequence numbers drawn
// from p's counter. Clients sharing one Producer are one producer on
// several connections; no two of them ever use the same sequence number.
// The default is a new Producer per Client. nil is ignored.
func WithProducer(p *Producer) Option {
	return func(o *options) {
		if p != nil {
			o.producer = p
		}
	}
}

// WithProtocolVersion caps the wire version the client speaks (default
// and highest 2). With 1 the client sends no Hello and speaks version 1
// only: no producer id, so a resend after a reconnect is stored as a new
// record, and no record metadata. Other values are ignored.
func WithProtocolVersion(v uint8) Option {
	return func(o *options) {
		if v >= wire.Version && v <= wire.MaxVersion {
			o.maxVersion = v
		}
	}
}

// WithOverloadRetries sets how many times the client sends a request again
// after the daemon refused it with Overloaded (default
// DefaultOverloadRetries, -1: without limit, until Close gives up on it).
// The daemon refuses Overloaded before it takes any of the request's
// records, so the client keeps the request, pauses its connection for the
// retry-after the daemon names and sends it again unchanged — same
// sequence numbers, so even a copy stored meanwhile would be the same
// record. With 0, or once the retries are used up, the request fails with
// a *NackError (ErrOverloaded) carrying the hint in its RetryAfter.
//
// The bound holds only for requests never stored. A request resent after
// a reconnect may have been stored by the broken connection; it is
// retried after every Overloaded answer until it is settled or the ctx of
// its push ends, and then fails with an *OutcomeUnknownError, never
// ErrOverloaded.
func WithOverloadRetries(n int) Option {
	return func(o *options) { o.overloadRetries = n }
}

// WithOverloadMaxDelay caps the pause after an Overloaded Nack (default
// DefaultOverloadMaxDelay, 5s). The pause is the daemon's retry-after hint
// (or the redial backoff's minimum when the Nack carries none), doubled
// for each further Overloaded answer to the same request, plus up to half
// again of random jitter, and never more than d. Values of zero or less
// are ignored.
func WithOverloadMaxDelay(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.overloadMax = d
		}
	}
}
