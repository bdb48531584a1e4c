package testenv

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer answers every byte it reads with the same byte.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// roundTrip writes msg and reads it back within timeout.
func roundTrip(c net.Conn, msg string, timeout time.Duration) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, len(msg))
	n, err := io.ReadFull(c, buf)
	return string(buf[:n]), err
}

// TestProxyStall: while stalled the connection stays open but nothing
// moves, on an open connection and on a new one; Resume delivers what was
// held, in order; Kill ends a stalled connection.
func TestProxyStall(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "a", time.Second); err != nil || got != "a" {
		t.Fatalf("before the stall: %q, %v", got, err)
	}
	// The echo's byte is counted just after it is written back, so the
	// client may read it first: wait for both bytes to be counted.
	for deadline := time.Now().Add(time.Second); p.Forwarded() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	p.Stall()
	before := p.Forwarded()
	if got, err := roundTrip(c, "b", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("stalled: read %q, %v; want a timeout", got, err)
	}
	fresh, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("a new connection while stalled is accepted: %v", err)
	}
	defer fresh.Close()
	if got, err := roundTrip(fresh, "c", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("new connection, stalled: read %q, %v; want a timeout", got, err)
	}
	if got := p.Forwarded(); got != before {
		t.Fatalf("%d bytes forwarded while stalled", got-before)
	}
	p.Resume()
	// What was held arrives, then the connections work as before.
	for _, cc := range []struct {
		c          net.Conn
		held, next string
	}{{c, "b", "d"}, {fresh, "c", "e"}} {
		buf := make([]byte, 1)
		cc.c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.ReadFull(cc.c, buf); err != nil || string(buf) != cc.held {
			t.Fatalf("after Resume: %q, %v; want the held %q", buf, err, cc.held)
		}
		if got, err := roundTrip(cc.c, cc.next, 2*time.Second); err != nil || got != cc.next {
			t.Fatalf("after Resume: %q, %v", got, err)
		}
	}

	p.Stall()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the proxy read it and hold it
	p.Kill()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a stalled connection after Kill: read err %v; want it closed", err)
	}
	p.Resume()
}

// TestUnixProxy: a proxy on a Unix socket forwards to a TCP server; Cut
// refuses connections and removes nothing a Restore cannot listen on
// again; PostgresUnixVia points a DSN of either form at the socket.
func TestUnixProxy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.sock")
	p := NewUnixProxy(t, path, echoServer(t))
	if p.Addr() != path {
		t.Fatalf("Addr %q, want %q", p.Addr(), path)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "a", time.Second); err != nil || got != "a" {
		t.Fatalf("through the socket: %q, %v", got, err)
	}
	p.Cut()
	if c2, err := net.Dial("unix", path); err == nil {
		c2.Close()
		t.Fatal("a connection while cut was accepted")
	}
	if err := p.Restore(); err != nil {
		t.Fatalf("Restore on the same path: %v", err)
	}
	c3, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, "b", time.Second); err != nil || got != "b" {
		t.Fatalf("after Restore: %q, %v", got, err)
	}

	for _, tc := range []struct{ dsn, want string }{
		{"postgres://u@127.0.0.1:5432/db?sslmode=disable", "/s/dir:5433 u db"},
		{"host=127.0.0.1 port=5432 user=u dbname=db sslmode=disable", "/s/dir:5433 u db"},
	} {
		via, err := PostgresUnixVia(tc.dsn, "/s/dir", 5433)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := pgx.ParseConfig(via)
		if err != nil {
			t.Fatalf("%q: %v", via, err)
		}
		if got := fmt.Sprintf("%s:%d %s %s", cfg.Host, cfg.Port, cfg.User, cfg.Database); got != tc.want {
			t.Errorf("PostgresUnixVia(%q) = %q: parsed as %q, want %q", tc.dsn, via, got, tc.want)
		}
	}
}
