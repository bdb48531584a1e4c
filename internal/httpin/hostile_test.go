package httpin

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Hostile clients get their documented answer (or their connection
// closed) within the timeout that bounds them.
func TestHostileClients(t *testing.T) {
	opts := Options{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 400 * time.Millisecond, IdleTimeout: 300 * time.Millisecond, MaxHeaderBytes: 4 << 10}
	_, url := start(t, &fakeBackend{}, opts)
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), RouteRecords)
	dial := func(t *testing.T) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// answer reads the status of the answer, or "closed".
	answer := func(t *testing.T, c net.Conn, within time.Duration) (string, time.Duration) {
		start := time.Now()
		c.SetReadDeadline(start.Add(within))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("no answer and the connection still open after %v", within)
			}
			return "closed", time.Since(start)
		}
		resp.Body.Close()
		return fmt.Sprint(resp.StatusCode), time.Since(start)
	}
	head := "POST " + RouteRecords + " HTTP/1.1\r\nHost: x\r\n"

	t.Run("slow headers", func(t *testing.T) {
		c := dial(t)
		io.WriteString(c, head) // and never the end of the headers
		if got, took := answer(t, c, 3*time.Second); got != "closed" && got != "408" {
			t.Fatalf("answered %s after %v", got, took)
		}
	})
	t.Run("slow body", func(t *testing.T) {
		c := dial(t)
		io.WriteString(c, head+"Content-Length: 100\r\n\r\n0123456789")
		got, took := answer(t, c, 3*time.Second)
		if got != "408" {
			t.Fatalf("answered %s after %v", got, took)
		}
		t.Logf("a body stalled mid-way: %s after %v", got, took.Round(time.Millisecond))
	})
	t.Run("truncated body", func(t *testing.T) {
		c := dial(t)
		io.WriteString(c, head+"Content-Length: 100\r\n\r\n0123456789")
		c.(*net.TCPConn).CloseWrite()
		got, _ := answer(t, c, 3*time.Second)
		if got != "400" {
			t.Fatalf("answered %s", got)
		}
		t.Logf("a body cut short: %s", got)
	})
	t.Run("huge headers", func(t *testing.T) {
		c := dial(t)
		io.WriteString(c, head+"X-Junk: "+strings.Repeat("j", 64<<10)+"\r\nContent-Length: 1\r\n\r\nx")
		if got, _ := answer(t, c, 3*time.Second); got != "431" {
			t.Fatalf("64 KiB of headers answered %s, want 431", got)
		}
	})
	t.Run("idle connections", func(t *testing.T) {
		const n = 200
		conns := make([]net.Conn, n)
		for i := range conns {
			conns[i] = dial(t)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		open := 0
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.SetReadDeadline(time.Now().Add(3 * time.Second))
				if _, err := c.Read(make([]byte, 1)); err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						mu.Lock()
						open++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		if open > 0 {
			t.Fatalf("%d of %d connections that never sent a request are still open after 3 s", open, n)
		}
	})
	t.Run("a well-behaved client meanwhile", func(t *testing.T) {
		start := time.Now()
		decodeAnswer(t, post(t, url, "fine"))
		if d := time.Since(start); d > time.Second {
			t.Errorf("a well-behaved request took %v", d)
		}
	})
}

// Connections beyond MaxConnections are closed at accept; a slot freed
// is taken again.
func TestMaxConnections(t *testing.T) {
	refused := &countingObserver{}
	_, url := start(t, &fakeBackend{}, Options{MaxConnections: 2, Observer: refused})
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), RouteRecords)
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	time.Sleep(50 * time.Millisecond) // both accepted
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	third.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := third.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
		t.Fatalf("a third connection over a limit of 2 was not closed: %v", err)
	}
	if n := refused.refusals(RefusedConnections); n != 1 {
		t.Errorf("%d refusals counted, want 1", n)
	}
	held[0].Close()
	time.Sleep(50 * time.Millisecond)
	decodeAnswer(t, post(t, url, "after a slot freed"))
}

type countingObserver struct {
	nopObserver
	mu sync.Mutex
	by map[string]int
}

func (o *countingObserver) Refused(r string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.by == nil {
		o.by = map[string]int{}
	}
	o.by[r]++
}

func (o *countingObserver) refusals(r string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.by[r]
}
