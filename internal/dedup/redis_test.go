package dedup

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/weir-io/weir/internal/testenv"
)

// roundTrips counts what a go-redis client sends: pipelines (one round
// trip each) and single commands, and the commands of each pipeline.
type roundTrips struct {
	mu        sync.Mutex
	pipelines int
	singles   int
	commands  []string // names of every pipelined command
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.singles++
		h.commands = append(h.commands, "single:"+cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.pipelines++
		for _, c := range cmds {
			h.commands = append(h.commands, c.Name())
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *roundTrips) counts() (pipelines, singles int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pipelines, h.singles
}

// newRedisStore opens a Redis store on url under a prefix of its own, and
// deletes the prefix's keys and closes the store when t ends.
func newRedisStore(t testing.TB, url string, window time.Duration) *Redis {
	t.Helper()
	prefix := "weir:test:dedup:" + testenv.Suffix() + ":"
	r, err := NewRedis(context.Background(), RedisOptions{URL: url, Prefix: prefix, Window: window, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer r.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := deletePrefix(ctx, url, prefix); err != nil {
			t.Logf("cleaning up %s*: %v", prefix, err)
		}
	})
	return r
}

// deletePrefix deletes every key beginning with prefix (test clean-up:
// the store itself never scans).
func deletePrefix(ctx context.Context, url, prefix string) error {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	c := redis.NewClient(opt)
	defer c.Close()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			if err := c.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		if err := c.Unlink(ctx, batch...).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

// quiet discards a store's or Deduper's log.
var quiet = slog.New(slog.DiscardHandler)

func sharedRedisURL(t testing.TB) string { return "redis://" + testenv.Redis(t) }

func TestRedisAnswers(t *testing.T) {
	r := newRedisStore(t, sharedRedisURL(t), time.Minute)
	storeAnswers(t, r)
	// Held counts this process's claims (a, b, c, b2) in the window.
	if keys, bytes := r.Held(); keys != 4 || bytes != -1 {
		t.Fatalf("Held() = %d, %d; want 4, -1", keys, bytes)
	}
}

// TestRedisClaimSetsWindow: a claimed key holds the record id with the
// window as its TTL, and answers neither renew nor overwrite it.
func TestRedisClaimSetsWindow(t *testing.T) {
	url := sharedRedisURL(t)
	r := newRedisStore(t, url, 90*time.Second)
	claimAll(t, r, claimOf("a", 1))
	k := key("a")
	name := r.prefix + string(k[:])
	opt, _ := redis.ParseURL(url)
	c := redis.NewClient(opt)
	defer c.Close()
	ctx := context.Background()
	pttl, err := c.PTTL(ctx, name).Result()
	if err != nil || pttl <= 80*time.Second || pttl > 90*time.Second {
		t.Fatalf("PTTL = %v, %v; want in (80s, 90s]", pttl, err)
	}
	if err := c.PExpire(ctx, name, 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if got := claimAll(t, r, claimOf("a", 2), claimOf("a2", 2)); got[0] != Duplicate {
		t.Fatalf("other id answered %v", got[0])
	}
	v, err := c.Get(ctx, name).Result()
	id := rid(1)
	if err != nil || v != string(id[:]) {
		t.Fatalf("value = %x, %v; want the claimant's id %x", v, err, id)
	}
	if pttl, _ := c.PTTL(ctx, name).Result(); pttl > 5*time.Second {
		t.Fatalf("a duplicate renewed the key: PTTL %v", pttl)
	}
}

// TestRedisOneRoundTrip: a Claim of 256 keys is one pipeline of 256 SETs
// and nothing else (once connected: a new connection's handshake, HELLO,
// is one more, once per connection).
func TestRedisOneRoundTrip(t *testing.T) {
	r := newRedisStore(t, sharedRedisURL(t), time.Minute)
	claimAll(t, r, claimOf("warm-up", 1))
	h := &roundTrips{}
	r.client.AddHook(h)
	claims := make([]Claim, 256)
	for i := range claims {
		claims[i] = claimOf(fmt.Sprint(i), i)
	}
	for round, want := range []Answer{Claimed, Redelivery} {
		for i, a := range claimAll(t, r, claims...) {
			if a != want {
				t.Fatalf("round %d claim %d: %v, want %v", round, i, a, want)
			}
		}
		if p, s := h.counts(); p != round+1 || s != 0 {
			t.Fatalf("after %d claims: %d pipelines, %d single commands; want %d, 0 (%v)", round+1, p, s, round+1, h.commands[len(h.commands)-3:])
		}
	}
	if len(h.commands) != 2*len(claims) {
		t.Fatalf("pipelined %d commands, want %d", len(h.commands), 2*len(claims))
	}
	for _, name := range h.commands {
		if !strings.EqualFold(name, "set") {
			t.Fatalf("pipelined %q besides SET", name)
		}
	}
}

// TestRedisDownAtStart: NewRedis succeeds with the server down, Claim
// fails fast while it is, and works once it is up.
func TestRedisDownAtStart(t *testing.T) {
	srv := testenv.StartRedis(t)
	srv.Stop()
	r, err := NewRedis(context.Background(), RedisOptions{URL: srv.URL(), Timeout: 200 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatalf("NewRedis with the server down: %v", err)
	}
	defer r.Close()
	start := time.Now()
	out := make([]Answer, 1)
	if err := r.Claim(context.Background(), []Claim{claimOf("a", 1)}, out); err == nil {
		t.Fatal("Claim succeeded with the server down")
	} else if took := time.Since(start); took > time.Second {
		t.Fatalf("failed Claim took %v, past its 200ms timeout", took)
	}
	srv.Start()
	if got := claimAll(t, r, claimOf("a", 1)); got[0] != Claimed {
		t.Fatalf("after start: %v", got[0])
	}
}

func TestRedisBadURL(t *testing.T) {
	if _, err := NewRedis(context.Background(), RedisOptions{URL: "http://nowhere"}); err == nil {
		t.Fatal("NewRedis accepted an http URL")
	}
}

// TestRecentCount: Held's approximation forgets claims a window old.
func TestRecentCount(t *testing.T) {
	var c recentCount
	c.init(160 * time.Millisecond)
	c.add(3)
	time.Sleep(50 * time.Millisecond)
	c.add(2)
	if n := c.sum(); n != 5 {
		t.Fatalf("sum = %d, want 5", n)
	}
	time.Sleep(200 * time.Millisecond)
	if n := c.sum(); n != 0 {
		t.Fatalf("sum a window later = %d, want 0", n)
	}
}
