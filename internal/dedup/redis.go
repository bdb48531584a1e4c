package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
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
	// Timeout bounds each round trip, dialling included
	// (DefaultRedisTimeout when zero or less).
	Timeout time.Duration
	// Logger receives the start-up probe's result (slog.Default when nil).
	Logger *slog.Logger
}

// Redis is a seen-set shared by every daemon that points at the same server
// and prefix. A claim is SET key id NX GET PX window (Redis ≥ 7.0): a nil
// reply means the key was free and is now claimed (Claimed); the record's own
// id back means Redelivery; any other id, Duplicate. Every claim of a call
// goes in one pipeline: one round trip. Safe for concurrent use.
type Redis struct {
	client  *redis.Client
	prefix  string
	window  time.Duration
	timeout time.Duration
	recent  recentCount
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
	opt, err := redisOptions(o)
	if err != nil {
		return nil, err
	}
	r := &Redis{
		client:  redis.NewClient(opt),
		prefix:  o.Prefix,
		window:  o.Window,
		timeout: o.Timeout,
	}
	r.recent.init(o.Window)
	pctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := r.client.Ping(pctx).Err(); err != nil {
		o.Logger.Warn("dedup: redis not reachable at start; records pass without dedup until it answers",
			"addr", opt.Addr, "err", err)
	} else {
		o.Logger.Info("dedup: redis reachable", "addr", opt.Addr, "prefix", o.Prefix, "window", o.Window)
	}
	return r, nil
}

// redisOptions are the client options of o (its Timeout set).
func redisOptions(o RedisOptions) (*redis.Options, error) {
	opt, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("dedup: redis url: %w", err)
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = o.Timeout, o.Timeout, o.Timeout
	opt.ContextTimeoutEnabled = true
	opt.DialerRetries = 1 // a refused dial fails now; the next batch tries again
	opt.MaxRetries = 1    // within the one Timeout
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return opt, nil
}

// PingRedis connects to the server at o.URL with the store's client
// options — authenticating as the URL says — and sends PING, bounded by
// o.Timeout (DefaultRedisTimeout when 0) and ctx; it reads and writes no
// key (weir validate --connect).
func PingRedis(ctx context.Context, o RedisOptions) error {
	if o.Timeout <= 0 {
		o.Timeout = DefaultRedisTimeout
	}
	opt, err := redisOptions(o)
	if err != nil {
		return err
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("dedup: redis %s: %w", opt.Addr, err)
	}
	return nil
}

// Claim sends every claim in one pipeline, bounded by the store's Timeout.
func (r *Redis) Claim(ctx context.Context, claims []Claim, out []Answer) error {
	if len(out) < len(claims) {
		return fmt.Errorf("dedup: redis claim: %d answers for %d claims", len(out), len(claims))
	}
	if len(claims) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	px := r.window.Milliseconds()
	pipe := r.client.Pipeline()
	cmds := make([]*redis.Cmd, len(claims))
	width := len(r.prefix) + len(Key{})
	keys := make([]byte, len(claims)*width)
	for i := range claims {
		key := keys[i*width : (i+1)*width]
		copy(key[copy(key, r.prefix):], claims[i].Key[:])
		cmds[i] = pipe.Do(ctx, "set", key, claims[i].ID[:], "nx", "get", "px", px)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("dedup: redis claim: %w", err)
	}
	fresh := 0
	for i, cmd := range cmds {
		a, err := answer(cmd, claims[i])
		if err != nil {
			return err
		}
		if out[i] = a; a == Claimed {
			fresh++
		}
	}
	r.recent.add(fresh)
	return nil
}

// answer reads one SET NX GET reply.
func answer(cmd *redis.Cmd, c Claim) (Answer, error) {
	v, err := cmd.Text()
	switch {
	case errors.Is(err, redis.Nil):
		return Claimed, nil
	case err != nil:
		return 0, fmt.Errorf("dedup: redis claim: %w", err)
	case v == string(c.ID[:]):
		return Redelivery, nil
	default:
		return Duplicate, nil
	}
}

// Held reports the keys this process claimed (answered Claimed) within the
// last window, counted in sixteenths of the window: a cheap approximation
// of its share of the shared set, not the set's size, which only the
// server knows (it would take a SCAN of the prefix). Keys other daemons
// claimed are not counted, and a key evicted early by the server's own
// maxmemory policy still is. Bytes are -1: the server's per-key cost is
// not known here (MEMORY USAGE tells it for one key).
func (r *Redis) Held() (keys, bytes int64) { return r.recent.sum(), -1 }

// Close closes the client's connections.
func (r *Redis) Close() error { return r.client.Close() }

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

// RouteClientLogs sends the Redis client's own log lines (a failed dial,
// a pool error) to log at debug level instead of the process's standard
// error: the store's failures are already reported, once per change, by
// the Deduper. The client's logger is process-wide, so the daemon calls
// this once.
func RouteClientLogs(log *slog.Logger) { redis.SetLogger(clientLog{log}) }

type clientLog struct{ log *slog.Logger }

func (l clientLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
}
