package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// RedisServerBin is where StartRedis looks for redis-server first (then on
// PATH).
const RedisServerBin = "/usr/bin/redis-server"

// RedisServer is a private redis-server started by StartRedis: its own
// process on its own loopback port, without persistence (--save ""
// --appendonly no), its directory in the test's temporary directory. A
// test may Stop it and Start it again; restarted, it is empty.
type RedisServer struct {
	// Addr is the server's host:port; it stays the same across restarts.
	Addr string

	t   testing.TB
	bin string
	dir string
	cmd *exec.Cmd // nil while stopped
}

// StartRedis starts a private redis-server for t and kills it when t ends.
// Without a redis-server binary the test is skipped (failed under
// WEIR_REQUIRE_SERVICES=1). Tests that stop Redis must use it, never the
// machine's shared server (Redis).
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	bin := RedisServerBin
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("redis-server"); err != nil {
			msg := fmt.Sprintf("no redis-server at %s or on PATH: %v", RedisServerBin, err)
			if Required() {
				t.Fatalf("%s (%s=1: a missing service is a failure)", msg, RequireEnv)
			}
			t.Skipf("\n*** SKIPPING: %s\n*** install redis-server, or set %s=1 to make this a failure", msg, RequireEnv)
		}
	}
	s := &RedisServer{t: t, bin: bin, dir: t.TempDir(), Addr: freeLoopback(t)}
	t.Cleanup(s.Stop)
	s.Start()
	return s
}

// URL is the server's URL for a client: redis://host:port.
func (s *RedisServer) URL() string { return "redis://" + s.Addr }

// Start starts the server on its port, if stopped, and waits until it
// answers PING.
func (s *RedisServer) Start() {
	s.t.Helper()
	if s.cmd != nil {
		return
	}
	_, port, _ := net.SplitHostPort(s.Addr)
	cmd := exec.Command(s.bin, "--port", port, "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("testenv: start %s: %v", s.bin, err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := dialable(s.Addr) // before PING: go-redis logs every failed dial
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err = pingRedis(ctx, s.Addr)
			cancel()
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("testenv: redis-server on %s did not answer in 10s: %v\n%s", s.Addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL: nothing is saved) and waits for it to
// exit. Stopping a stopped server does nothing.
func (s *RedisServer) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// pingRedis reports whether a Redis server answers PING at addr.
func pingRedis(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{
		Addr: addr, DialerRetries: 1, MaxRetries: -1, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping %s: %w", addr, err)
	}
	return nil
}

// dialable reports whether a TCP connection to addr opens.
func dialable(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// freeLoopback returns a loopback address with a port free at the time.
func freeLoopback(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: free port: %v", err)
	}
	defer ln.Close()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
}
