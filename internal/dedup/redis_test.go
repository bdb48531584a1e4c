package dedup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/weir-io/weir/internal/testenv"
)

// wireCount watches a store's connections through a testenv.Proxy and
// counts, from the bytes on the wire, the commands sent and the round
// trips: a round trip begins when bytes come from the client while every
// command it sent before on that connection has been answered.
type wireCount struct {
	*testenv.Proxy

	mu       sync.Mutex
	commands []string // every command's name, lower case, in order
	trips    int
	links    map[int]*wireLink
}

type wireLink struct {
	sent, answered int
	cmds, replies  []byte // incomplete
}

func startWireCount(t testing.TB, target string) *wireCount {
	t.Helper()
	w := &wireCount{Proxy: testenv.NewProxy(t, target), links: map[int]*wireLink{}}
	w.Tap(w.chunk)
	return w
}

func (w *wireCount) url() string { return "redis://" + w.Addr() }

func (w *wireCount) counts() (trips int, commands []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.trips, slices.Clone(w.commands)
}

func (w *wireCount) chunk(link int, up bool, chunk []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.links[link]
	if l == nil {
		l = &wireLink{}
		w.links[link] = l
	}
	if !up {
		l.replies = append(l.replies, chunk...)
		for n := skipReply(l.replies); n > 0; n = skipReply(l.replies) {
			l.replies = l.replies[n:]
			l.answered++
		}
		return
	}
	if l.sent == l.answered && len(l.cmds) == 0 {
		w.trips++
	}
	l.cmds = append(l.cmds, chunk...)
	for {
		name, n := parseCommand(l.cmds)
		if n == 0 {
			return
		}
		l.cmds = l.cmds[n:]
		l.sent++
		w.commands = append(w.commands, name)
	}
}

// parseCommand reads one command (an array of bulk strings) at the start
// of b: its name and length, or 0 when b holds less than a command.
func parseCommand(b []byte) (name string, n int) {
	count, n := respLine(b, '*')
	if n == 0 {
		return "", 0
	}
	for i := 0; i < count; i++ {
		size, m := respLine(b[n:], '$')
		if m == 0 || len(b) < n+m+size+2 {
			return "", 0
		}
		if i == 0 {
			name = strings.ToLower(string(b[n+m : n+m+size]))
		}
		n += m + size + 2
	}
	return name, n
}

// skipReply measures one reply (RESP2 or RESP3: the tests' own go-redis
// clients speak RESP3) at the start of b (0 when incomplete).
func skipReply(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	switch b[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		if i := bytes.Index(b, []byte("\r\n")); i >= 0 {
			return i + 2
		}
		return 0
	case '$', '=', '!':
		size, n := respLine(b, b[0])
		if n == 0 || size < 0 {
			return n
		}
		if len(b) < n+size+2 {
			return 0
		}
		return n + size + 2
	case '*', '~', '>', '%', '|':
		count, n := respLine(b, b[0])
		if n == 0 {
			return 0
		}
		if b[0] == '%' || b[0] == '|' { // maps, attributes: pairs
			count *= 2
		}
		for range max(count, 0) {
			m := skipReply(b[n:])
			if m == 0 {
				return 0
			}
			n += m
		}
		return n
	}
	panic(fmt.Sprintf("proxy: unknown reply %q", b[:min(len(b), 32)]))
}

// respLine reads a line kind‖integer‖CRLF: the integer and the line's
// length, or 0 when incomplete.
func respLine(b []byte, kind byte) (v, n int) {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 0 {
		return 0, 0
	}
	if b[0] != kind {
		panic(fmt.Sprintf("proxy: want %c, got %q", kind, b[:i]))
	}
	v, err := strconv.Atoi(string(b[1:i]))
	if err != nil {
		panic(err)
	}
	return v, i + 2
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
// and nothing else, as seen on the wire by a proxy.
func TestRedisOneRoundTrip(t *testing.T) {
	p := startWireCount(t, testenv.Redis(t))
	r := newRedisStore(t, p.url(), time.Minute) // dials and PINGs: one trip
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
		trips, cmds := p.counts()
		if trips != round+2 || r.roundTrips.Load() != int64(round+1) {
			t.Fatalf("after %d claims: %d round trips on the wire (PING's included), %d counted; want %d, %d",
				round+1, trips, r.roundTrips.Load(), round+2, round+1)
		}
		if want := 1 + (round+1)*len(claims); len(cmds) != want {
			t.Fatalf("after %d claims: %d commands, want %d", round+1, len(cmds), want)
		}
	}
	_, cmds := p.counts()
	if cmds[0] != "ping" {
		t.Fatalf("first command %q, want ping", cmds[0])
	}
	for _, name := range cmds[1:] {
		if name != "set" {
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

// TestRedisAuthSelect: a URL's user, password and database reach the
// server (AUTH user password, SELECT), and a wrong password is a failing
// Claim, not a failing NewRedis.
func TestRedisAuthSelect(t *testing.T) {
	addr := testenv.Redis(t)
	admin := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	ctx := context.Background()
	user, pass := "weir-test-"+testenv.Suffix(), testenv.Suffix()
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">"+pass, "~weir:test:dedup:*", "+@all").Err(); err != nil {
		_ = admin.Close()
		t.Skipf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { // after newRedisStore's clean-up, which needs the user
		defer admin.Close()
		if err := admin.Do(context.Background(), "ACL", "DELUSER", user).Err(); err != nil {
			t.Errorf("ACL DELUSER %s: %v", user, err)
		}
	})
	url := fmt.Sprintf("redis://%s:%s@%s/3", user, pass, addr)
	r := newRedisStore(t, url, time.Minute)
	if got := claimAll(t, r, claimOf("a", 1)); got[0] != Claimed {
		t.Fatalf("claim: %v", got[0])
	}
	k := key("a")
	name := r.prefix + string(k[:])
	for db, want := range map[int]int64{3: 1, 0: 0} {
		c := redis.NewClient(&redis.Options{Addr: addr, DB: db, DisableIdentity: true})
		n, err := c.Exists(ctx, name).Result()
		_ = c.Close()
		if err != nil || n != want {
			t.Fatalf("EXISTS in db %d = %d, %v; want %d", db, n, err, want)
		}
	}
	bad, err := NewRedis(ctx, RedisOptions{URL: fmt.Sprintf("redis://%s:wrong@%s/3", user, addr), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := bad.Claim(ctx, []Claim{claimOf("b", 1)}, make([]Answer, 1)); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("Claim with a wrong password: %v, want WRONGPASS", err)
	}
}

// TestRedisErrorReply: an error reply fails the call with the server's
// words and leaves the connection in step: the next call uses it.
func TestRedisErrorReply(t *testing.T) {
	p := startWireCount(t, testenv.Redis(t))
	r := newRedisStore(t, p.url(), time.Minute)
	k := key("list")
	name := r.prefix + string(k[:])
	opt, _ := redis.ParseURL(sharedRedisURL(t))
	c := redis.NewClient(opt)
	defer c.Close()
	if err := c.RPush(context.Background(), name, "x").Err(); err != nil {
		t.Fatal(err)
	}
	out := make([]Answer, 3)
	err := r.Claim(context.Background(), []Claim{claimOf("x", 1), claimOf("list", 1), claimOf("y", 1)}, out)
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Claim over a list: %v, want WRONGTYPE", err)
	}
	if got := claimAll(t, r, claimOf("x", 1), claimOf("y", 2)); got[0] != Redelivery || got[1] != Duplicate {
		t.Fatalf("after the error: %v, want [redelivery duplicate]", got)
	}
	if n := p.Accepted(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

// TestRedisReconnect: connections broken by a server restart are dropped
// and the claim sent again on a new one, within the one call.
func TestRedisReconnect(t *testing.T) {
	srv := testenv.StartRedis(t)
	r, err := NewRedis(context.Background(), RedisOptions{URL: srv.URL(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	claimAll(t, r, claimOf("a", 1))
	srv.Stop()
	srv.Start() // empty: a restart without persistence
	if got := claimAll(t, r, claimOf("a", 1)); got[0] != Claimed {
		t.Fatalf("after restart: %v", got[0])
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Claim(context.Background(), []Claim{claimOf("b", 1)}, make([]Answer, 1)); err == nil {
		t.Fatal("Claim after Close succeeded")
	}
}

// TestRedisSilentServer: a server that never answers costs one Timeout,
// or less when the caller gives up first; the connection is dropped.
func TestRedisSilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Add(1)
	go func() { // accepts, reads, never answers
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = io.Copy(io.Discard, c); _ = c.Close() }()
		}
	}()
	r, err := NewRedis(context.Background(), RedisOptions{URL: "redis://" + ln.Addr().String(), Timeout: 300 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out := make([]Answer, 1)
	start := time.Now()
	if err := r.Claim(context.Background(), []Claim{claimOf("a", 1)}, out); err == nil || time.Since(start) < 250*time.Millisecond || time.Since(start) > 2*time.Second {
		t.Fatalf("Claim on a silent server: %v after %v, want a timeout after ~300ms", err, time.Since(start))
	}
	r.timeout = 10 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start = time.Now()
	if err := r.Claim(ctx, []Claim{claimOf("a", 1)}, out); !errors.Is(err, context.Canceled) || time.Since(start) > 2*time.Second {
		t.Fatalf("cancelled Claim: %v after %v, want context.Canceled soon after 100ms", err, time.Since(start))
	}
	if n := len(r.idle); n != 0 {
		t.Fatalf("%d connections kept after failures, want 0", n)
	}
}
