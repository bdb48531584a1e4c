package dedup

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/weir-io/weir/sink"
)

// Defaults of RedisOptions.
const (
	DefaultRedisPrefix  = "weir:dedup:"
	DefaultRedisTimeout = 250 * time.Millisecond
)

// RedisOptions configures NewRedis.
type RedisOptions struct {
	// URL is the server, as redis://[user:password@]host:port[/db]
	// (rediss:// for TLS).
	URL string
	// Prefix begins every key (DefaultRedisPrefix when empty). A key is
	// the prefix and the claim key's 32 raw bytes; its value is the
	// record id's 16 raw bytes.
	Prefix string
	// Window is how long a claim is held (DefaultWindow when zero or
	// less); it is the key's TTL.
	Window time.Duration
	// Timeout bounds each call — its round trip, dialling and the one
	// retry on a new connection included — as one deadline on the
	// connection (DefaultRedisTimeout when zero or less).
	Timeout time.Duration
	// Logger receives the start-up probe's result (slog.Default when nil).
	Logger *slog.Logger
}

// Redis is a seen-set shared by every daemon that points at the same server
// and prefix. A claim is SET key id NX GET PX window (Redis ≥ 7.0): a nil
// reply means the key was free and is now claimed (Claimed); the record's own
// id back means Redelivery; any other id, Duplicate. Every claim of a call
// goes in one pipeline: one write, then every reply read, one round trip.
// Safe for concurrent use.
//
// The store speaks RESP2 itself (resp.go) over a small pool of connections:
// the commands of a batch are written by hand into the connection's one
// reused buffer and the replies parsed in place, so a claim allocates
// nothing. go-redis is used only for its URL parsing (redis.ParseURL), so
// the URL means what it means to every go-redis client: address, unix://
// sockets, username and password (AUTH), database (SELECT), rediss:// for
// TLS, client_name (CLIENT SETNAME); its other query options (pool and
// timeout knobs, protocol) are accepted and ignored.
type Redis struct {
	network, addr string
	tls           *tls.Config // nil: plain TCP
	hello         []byte      // AUTH, SELECT, CLIENT SETNAME: sent on every new connection
	helloReplies  int
	prefix        string
	window        time.Duration
	timeout       time.Duration
	recent        recentCount

	// claimHead, claimMid and claimTail frame a claim's key and id:
	// head, 32-byte key, mid, 16-byte id, tail.
	claimHead, claimMid, claimTail []byte

	mu     sync.Mutex
	idle   []*redisConn
	closed bool

	// roundTrips counts pipelines written and answered (a test's and a
	// benchmark's figure).
	roundTrips atomic.Int64
}

// maxIdleConns bounds the pool: concurrent claims beyond it dial their own
// connections, closed once used.
const maxIdleConns = 8

// redisConn is one connection and its buffers.
type redisConn struct {
	nc  net.Conn
	out []byte
	in  respReader
}

// NewRedis connects to the server at o.URL. It fails only on a malformed
// URL: a server that is down at start is logged (after one ping bounded by
// o.Timeout) and the store is returned all the same, so that the pipeline
// starts and runs without dedup; Claim returns the error until the server
// answers.
func NewRedis(ctx context.Context, o RedisOptions) (*Redis, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultRedisPrefix
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultRedisTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	opt, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("dedup: redis url: %w", err)
	}
	r := &Redis{
		network: opt.Network,
		addr:    opt.Addr,
		tls:     opt.TLSConfig,
		prefix:  o.Prefix,
		window:  o.Window,
		timeout: o.Timeout,
	}
	if opt.Password != "" {
		if opt.Username != "" {
			r.hello = appendCommand(r.hello, "AUTH", opt.Username, opt.Password)
		} else {
			r.hello = appendCommand(r.hello, "AUTH", opt.Password)
		}
		r.helloReplies++
	}
	if opt.DB != 0 {
		r.hello = appendCommand(r.hello, "SELECT", strconv.Itoa(opt.DB))
		r.helloReplies++
	}
	if opt.ClientName != "" {
		r.hello = appendCommand(r.hello, "CLIENT", "SETNAME", opt.ClientName)
		r.helloReplies++
	}
	// *7 $3 SET $len(key) prefix‖key $16 id $2 NX $3 GET $2 PX $n window
	r.claimHead = fmt.Appendf(nil, "*7\r\n$3\r\nSET\r\n$%d\r\n%s", len(o.Prefix)+len(Key{}), o.Prefix)
	r.claimMid = fmt.Appendf(nil, "\r\n$%d\r\n", len(sink.RecordID{}))
	r.claimTail = appendBulk([]byte("\r\n$2\r\nNX\r\n$3\r\nGET\r\n$2\r\nPX\r\n"),
		strconv.AppendInt(nil, o.Window.Milliseconds(), 10))
	r.recent.init(o.Window)
	if err := r.ping(ctx); err != nil {
		o.Logger.Warn("dedup: redis not reachable at start; records pass without dedup until it answers",
			"addr", opt.Addr, "err", err)
	} else {
		o.Logger.Info("dedup: redis reachable", "addr", opt.Addr, "prefix", o.Prefix, "window", o.Window)
	}
	return r, nil
}

// PingRedis connects to the server at o.URL as the store does —
// authenticating and selecting the database as the URL says — and sends
// PING, bounded by o.Timeout (DefaultRedisTimeout when 0) and ctx; it
// reads and writes no key (weir validate --connect).
func PingRedis(ctx context.Context, o RedisOptions) error {
	o.Logger = slog.New(slog.DiscardHandler)
	r, err := NewRedis(ctx, o)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.ping(ctx); err != nil {
		return fmt.Errorf("dedup: redis %s: %w", r.addr, err)
	}
	return nil
}

// ping dials (or reuses) a connection and sends PING, bounded by Timeout.
func (r *Redis) ping(ctx context.Context) error {
	deadline := r.deadline(ctx)
	c, _, err := r.get(ctx, deadline)
	if err != nil {
		return err
	}
	err = c.nc.SetDeadline(deadline)
	if err == nil {
		c.out = appendCommand(c.out[:0], "PING")
		_, err = c.nc.Write(c.out)
	}
	if err == nil {
		err = c.in.statusReply("PONG")
	}
	r.done(c, err)
	return err
}

// deadline is the end of a call's one Timeout, or ctx's deadline if sooner.
func (r *Redis) deadline(ctx context.Context) time.Time {
	d := time.Now().Add(r.timeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		return cd
	}
	return d
}

// Claim sends every claim in one pipeline, bounded by the store's Timeout
// (dialling included). A pooled connection found broken (the server
// restarted, an idle connection timed out) is dropped and the batch sent
// once more on a new one within the same Timeout: a claim is idempotent
// (sent again, it finds its own id: Redelivery). Any other failure drops
// the connection and returns the error; the next call dials again.
func (r *Redis) Claim(ctx context.Context, claims []Claim, out []Answer) error {
	if len(out) < len(claims) {
		return fmt.Errorf("dedup: redis claim: %d answers for %d claims", len(out), len(claims))
	}
	if len(claims) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: redis claim: %w", err)
	}
	deadline := r.deadline(ctx)
	for {
		c, reused, err := r.get(ctx, deadline)
		if err != nil {
			return fmt.Errorf("dedup: redis claim: %w", err)
		}
		fresh, err := r.pipeline(ctx, c, deadline, claims, out)
		r.done(c, err)
		if err == nil {
			r.recent.add(fresh)
			return nil
		}
		if !reused || !retryable(err) || ctx.Err() != nil || !time.Now().Before(deadline) {
			return fmt.Errorf("dedup: redis claim: %w", err)
		}
	}
}

// pipeline writes every claim, then reads every reply, on c. It reads all
// the replies even after an error reply, so that c stays in step.
func (r *Redis) pipeline(ctx context.Context, c *redisConn, deadline time.Time, claims []Claim, out []Answer) (fresh int, err error) {
	if err := c.nc.SetDeadline(deadline); err != nil {
		return 0, err
	}
	if ctx.Done() != nil { // a cancelled caller ends the round trip now
		stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
		defer func() {
			// Cancelled: c's deadline is spoilt, or about to be (drop
			// c), and a timeout is the cancellation's doing.
			_, replied := err.(serverError)
			if !stop() && (err == nil || replied || errors.Is(err, os.ErrDeadlineExceeded)) {
				err = ctx.Err()
			}
		}()
	}
	b := c.out[:0]
	for i := range claims {
		b = append(b, r.claimHead...)
		b = append(b, claims[i].Key[:]...)
		b = append(b, r.claimMid...)
		b = append(b, claims[i].ID[:]...)
		b = append(b, r.claimTail...)
	}
	c.out = b
	if _, err := c.nc.Write(b); err != nil {
		return 0, err
	}
	r.roundTrips.Add(1)
	var replyErr error
	for i := range claims {
		a, err := c.in.claimReply(claims[i].ID[:])
		if err != nil {
			if _, ok := err.(serverError); ok && replyErr == nil {
				replyErr = err
				continue
			} else if ok {
				continue
			}
			return 0, err
		}
		if out[i] = a; a == Claimed {
			fresh++
		}
	}
	return fresh, replyErr
}

// retryable reports whether err is a broken connection worth one more
// try on a new one: not a timeout, not the server's answer, not a reply
// out of step.
func retryable(err error) bool {
	var se serverError
	return !errors.Is(err, os.ErrDeadlineExceeded) && !errors.As(err, &se) &&
		!errors.Is(err, errProtocol) && !errors.Is(err, context.Canceled) &&
		!errors.Is(err, context.DeadlineExceeded)
}

// get takes an idle connection, or dials one (reused false).
func (r *Redis) get(ctx context.Context, deadline time.Time) (c *redisConn, reused bool, err error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, false, errStoreClosed
	}
	if n := len(r.idle); n > 0 {
		c = r.idle[n-1]
		r.idle[n-1] = nil
		r.idle = r.idle[:n-1]
		r.mu.Unlock()
		return c, true, nil
	}
	r.mu.Unlock()
	c, err = r.dial(ctx, deadline)
	return c, false, err
}

// done returns c to the pool after a call that left it in step (no error,
// or only error replies), and closes it otherwise.
func (r *Redis) done(c *redisConn, err error) {
	if _, ok := err.(serverError); err == nil || ok {
		r.mu.Lock()
		if !r.closed && len(r.idle) < maxIdleConns {
			r.idle = append(r.idle, c)
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
	}
	_ = c.nc.Close()
}

var errStoreClosed = errors.New("store closed")

// dial opens a connection by deadline: TCP or unix socket, TLS for
// rediss://, then AUTH, SELECT and CLIENT SETNAME in one round trip.
func (r *Redis) dial(ctx context.Context, deadline time.Time) (*redisConn, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, r.network, r.addr)
	if err != nil {
		return nil, err
	}
	if r.tls != nil {
		tc := tls.Client(nc, r.tls.Clone())
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, err
		}
		nc = tc
	}
	c := &redisConn{nc: nc, in: newRespReader(nc)}
	if len(r.hello) > 0 {
		err := nc.SetDeadline(deadline)
		if err == nil {
			_, err = nc.Write(r.hello)
		}
		for range r.helloReplies {
			if err == nil {
				err = c.in.statusReply("OK")
			}
		}
		if err != nil {
			_ = nc.Close()
			return nil, fmt.Errorf("connection set-up: %w", err)
		}
	}
	return c, nil
}

// Held reports the keys this process claimed (answered Claimed) within the
// last window, counted in sixteenths of the window: a cheap approximation
// of its share of the shared set, not the set's size, which only the
// server knows (it would take a SCAN of the prefix). Keys other daemons
// claimed are not counted, and a key evicted early by the server's own
// maxmemory policy still is. Bytes are -1: the server's per-key cost is
// not known here (MEMORY USAGE tells it for one key).
func (r *Redis) Held() (keys, bytes int64) { return r.recent.sum(), -1 }

// Close closes the idle connections; one in use is closed when its call
// ends. Claim fails after Close.
func (r *Redis) Close() error {
	r.mu.Lock()
	idle := r.idle
	r.idle, r.closed = nil, true
	r.mu.Unlock()
	for _, c := range idle {
		_ = c.nc.Close()
	}
	return nil
}

// recentCount counts events over a sliding window in 16 buckets.
type recentCount struct {
	mu     sync.Mutex
	width  time.Duration
	counts [16]int64
	start  time.Time // start of the current bucket
	cur    int
}

func (c *recentCount) init(window time.Duration) {
	c.width = max(window/time.Duration(len(c.counts)), time.Millisecond)
	c.start = time.Now()
}

// advance moves the current bucket up to now, emptying the buckets passed.
func (c *recentCount) advance() {
	now := time.Now()
	for i := 0; i < len(c.counts) && now.Sub(c.start) >= c.width; i++ {
		c.cur = (c.cur + 1) % len(c.counts)
		c.counts[c.cur] = 0
		c.start = c.start.Add(c.width)
	}
	if now.Sub(c.start) >= c.width { // idle for a whole window
		c.start = now
	}
}

func (c *recentCount) add(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advance()
	c.counts[c.cur] += int64(n)
}

func (c *recentCount) sum() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advance()
	var n int64
	for _, v := range c.counts {
		n += v
	}
	return n
}
