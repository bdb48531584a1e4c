package systest

import (
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/wire"
)

func rawDial(t *testing.T, socket string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

func readResponse(t *testing.T, c net.Conn) wire.Response {
	t.Helper()
	r, err := wire.ReadResponse(c)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	return r
}

// expectClosed checks the daemon closed the connection.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	if _, err := c.Read(b[:]); err != io.EOF {
		t.Fatalf("connection not closed by the daemon: read returned %v", err)
	}
}

func pushFrame(id uint64, d wire.Durability, payload string) []byte {
	return wire.AppendPush(nil, wire.Push{RequestID: id, Durability: d, Payloads: [][]byte{[]byte(payload)}})
}

// TestProtocolErrors sends malformed frames; each gets its Nack (and a close
// where the stream can't be trusted), and the daemon keeps serving others.
func TestProtocolErrors(t *testing.T) {
	d := newDaemon(t, "--max-frame-bytes", "4096")
	d.start()

	t.Run("oversized frame", func(t *testing.T) {
		c := rawDial(t, d.socket)
		hdr := wire.AppendHeader(nil, wire.TypePush, 1<<30) // 1 GiB claimed; never sent
		c.Write(hdr)
		r := readResponse(t, c)
		if r.Type != wire.TypeNack || r.Code != wire.CodeFrameTooLarge {
			t.Fatalf("got %+v, want Nack FrameTooLarge", r)
		}
		expectClosed(t, c)
	})
	t.Run("bad version", func(t *testing.T) {
		c := rawDial(t, d.socket)
		f := pushFrame(7, wire.Durable, "x")
		f[2] = 9
		c.Write(f)
		r := readResponse(t, c)
		if r.Type != wire.TypeNack || r.Code != wire.CodeBadVersion {
			t.Fatalf("got %+v, want Nack BadVersion", r)
		}
		expectClosed(t, c)
	})
	t.Run("bad magic", func(t *testing.T) {
		c := rawDial(t, d.socket)
		c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
		r := readResponse(t, c)
		if r.Type != wire.TypeNack || r.Code != wire.CodeBadFrame {
			t.Fatalf("got %+v, want Nack BadFrame", r)
		}
		expectClosed(t, c)
	})
	t.Run("bad durability then a good frame", func(t *testing.T) {
		c := rawDial(t, d.socket)
		bad := pushFrame(11, wire.Durable, "bad-durability")
		bad[wire.HeaderSize+8] = 0x7f
		c.Write(bad)
		c.Write(pushFrame(12, wire.Durable, "after-bad-durability"))
		r := readResponse(t, c)
		if r.Type != wire.TypeNack || r.Code != wire.CodeBadDurability || r.RequestID != 11 {
			t.Fatalf("got %+v, want Nack BadDurability for request 11", r)
		}
		r = readResponse(t, c)
		if r.Type != wire.TypeAck || r.RequestID != 12 || r.Count != 1 {
			t.Fatalf("got %+v, want Ack of request 12", r)
		}
	})
	t.Run("reserved durability decodes as durable", func(t *testing.T) {
		c := rawDial(t, d.socket)
		f := pushFrame(21, wire.Durable, "reserved-durability")
		f[wire.HeaderSize+8] = byte(wire.ReservedDurable)
		c.Write(f)
		r := readResponse(t, c)
		if r.Type != wire.TypeAck || r.RequestID != 21 {
			t.Fatalf("got %+v, want Ack", r)
		}
	})
	t.Run("partial frame then close", func(t *testing.T) {
		c := rawDial(t, d.socket)
		f := pushFrame(31, wire.Durable, "never-complete")
		c.Write(f[:len(f)-3])
		c.Close()
	})

	// The daemon still serves a well-behaved client.
	ctx := ctxTimeout(t, 20*time.Second)
	l := newLedger()
	produce(ctx, t, d.socket, "after-abuse", 200, 1, client.Durable, l, 10*time.Second)
	if l.ackedCount() != 200 {
		t.Fatalf("acked %d of 200 after the protocol errors", l.ackedCount())
	}
	want := l.snapshot()
	want["after-bad-durability"] = true
	want["reserved-durability"] = true
	got := waitDelivered(t, d, want, 30*time.Second)
	for _, p := range []string{"bad-durability", "never-complete"} {
		if got[p] != 0 {
			t.Errorf("refused record %q reached the sink", p)
		}
	}
}

// TestStalledClient: a client that stalls mid-frame is cut off after
// frame_read_timeout and blocks nobody meanwhile.
func TestStalledClient(t *testing.T) {
	d := newDaemon(t, "--frame-read-timeout", "500ms")
	d.start()
	stalled := rawDial(t, d.socket)
	f := pushFrame(1, wire.Durable, "stalled-record")
	stalled.Write(f[:wire.HeaderSize+4])

	ctx := ctxTimeout(t, 20*time.Second)
	l := newLedger()
	start := time.Now()
	produce(ctx, t, d.socket, "unblocked", 500, 1, client.Durable, l, 10*time.Second)
	if l.ackedCount() != 500 {
		t.Fatalf("well-behaved client acked %d of 500 beside a stalled one", l.ackedCount())
	}
	expectClosed(t, stalled)
	if waited := time.Since(start); waited > 8*time.Second {
		t.Fatalf("stalled connection closed only after %v", waited)
	}
}

// TestSocketTakeover: a regular file at the socket path is never removed,
// and a second daemon on a live socket path refuses to start.
func TestSocketTakeover(t *testing.T) {
	t.Run("regular file is kept", func(t *testing.T) {
		d := newDaemon(t)
		if err := os.WriteFile(d.socket, []byte("precious"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := d.launch(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-d.done:
		case <-time.After(15 * time.Second):
			t.Fatal("daemon did not refuse a regular file at the socket path")
		}
		if d.err == nil {
			t.Fatal("daemon exited 0 with a regular file at its socket path")
		}
		if !strings.Contains(d.log.String(), "not a socket") {
			t.Errorf("error does not say why:\n%s", d.log.String())
		}
		b, err := os.ReadFile(d.socket)
		if err != nil || string(b) != "precious" {
			t.Fatalf("the file at the socket path was touched: %q, %v", b, err)
		}
	})
	t.Run("second daemon refuses", func(t *testing.T) {
		d1 := newDaemon(t)
		d1.start()
		d2 := newDaemon(t, "--socket-path", d1.socket)
		if err := d2.launch(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-d2.done:
		case <-time.After(15 * time.Second):
			t.Fatal("second daemon on the same socket did not refuse")
		}
		if d2.err == nil {
			t.Fatal("second daemon exited 0")
		}
		if !strings.Contains(d2.log.String(), "in use by another weir daemon") {
			t.Errorf("second daemon's error does not say why:\n%s", d2.log.String())
		}
		// The first one still serves.
		c, err := net.Dial("unix", d1.socket)
		if err != nil {
			t.Fatalf("first daemon's socket was disturbed: %v", err)
		}
		c.Close()
		fi, err := os.Stat(d1.socket)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("socket mode %o, want 600", perm)
		}
	})
}
