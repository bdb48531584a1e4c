package systest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// proxyMode is how a stallProxy treats connections; it can be switched at
// any time with setMode.
type proxyMode int

const (
	// proxyForward passes bytes both ways: the server as it is.
	proxyForward proxyMode = iota
	// proxyRefuse listens on nothing: a connection is refused (a server
	// that is down, or not started yet). Switching to it closes every
	// open connection.
	proxyRefuse
	// proxyBlackhole accepts connections and reads and discards what they
	// send, never answering and never reaching the server: a server that
	// accepts and then hangs. Connections accepted in it stay that way
	// until closed, whatever the mode becomes; connections that were
	// forwarding stop moving bytes, as under proxyStall.
	proxyBlackhole
	// proxyStall stops moving bytes both ways on every connection, open
	// or new, without closing any; a new connection is accepted (and its
	// server dialled) but stalled too. What a peer sends fills the socket
	// buffers, after which its writes block. Another mode moves the bytes
	// again.
	proxyStall
)

func (m proxyMode) String() string {
	return [...]string{"forward", "refuse", "blackhole", "stall"}[m]
}

// stallProxyMaxConns bounds a stallProxy's open connections (and so its
// goroutines: three per connection, one to accept); a connection beyond
// it is closed at once.
const stallProxyMaxConns = 256

// stallProxy is a loopback TCP proxy in front of a real server, on a
// fixed address for its whole life, whose mode (proxyForward,
// proxyRefuse, proxyBlackhole, proxyStall) the test switches at run time.
// It closes every connection and ends every goroutine of its own when the
// test ends.
type stallProxy struct {
	t      testing.TB
	target string // the server, host:port
	addr   string // the proxy's host:port, the same across modes

	mu     sync.Mutex
	mode   proxyMode
	ln     net.Listener // nil while refusing
	conns  map[*proxyConn]struct{}
	change chan struct{} // closed (and replaced) at every mode change
	closed bool
	wg     sync.WaitGroup
}

// proxyConn is one accepted connection and, unless it was blackholed, its
// connection to the server.
type proxyConn struct {
	c, s net.Conn // s is nil for a blackholed connection
	once sync.Once
	done chan struct{}
}

func (pc *proxyConn) close() {
	pc.once.Do(func() {
		close(pc.done)
		pc.c.Close()
		if pc.s != nil {
			pc.s.Close()
		}
	})
}

// newStallProxy starts a proxy to target on a free loopback port, in
// mode, and closes it when the test ends.
func newStallProxy(t testing.TB, target string, mode proxyMode) *stallProxy {
	t.Helper()
	addr, _, err := pickPort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return newStallProxyAt(t, addr, target, mode)
}

// newStallProxyAt is newStallProxy listening on addr.
func newStallProxyAt(t testing.TB, addr, target string, mode proxyMode) *stallProxy {
	t.Helper()
	p := &stallProxy{t: t, target: target, addr: addr, mode: proxyRefuse,
		conns: map[*proxyConn]struct{}{}, change: make(chan struct{})}
	t.Cleanup(p.close)
	if err := p.setMode(mode); err != nil {
		t.Fatalf("stall proxy to %s: %v", target, err)
	}
	return p
}

// Addr is the proxy's host:port.
func (p *stallProxy) Addr() string { return p.addr }

// set switches the proxy to mode, failing the test when it cannot listen
// again (only a switch from proxyRefuse listens).
func (p *stallProxy) set(mode proxyMode) {
	p.t.Helper()
	if err := p.setMode(mode); err != nil {
		p.t.Fatalf("stall proxy to %s: %v", p.target, err)
	}
}

func (p *stallProxy) setMode(mode proxyMode) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("switch to %s: the proxy is closed", mode)
	}
	if mode == proxyRefuse {
		p.closeListenerLocked()
		for pc := range p.conns {
			pc.close()
		}
	} else if p.ln == nil {
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", p.addr, err)
		}
		p.ln = ln
		p.wg.Add(1)
		go p.accept(ln)
	}
	p.mode = mode
	close(p.change)
	p.change = make(chan struct{})
	return nil
}

func (p *stallProxy) closeListenerLocked() {
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
}

// close stops the proxy: the listener, every connection, and waits for
// its goroutines.
func (p *stallProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.closeListenerLocked()
	for pc := range p.conns {
		pc.close()
	}
	close(p.change)
	p.change = make(chan struct{})
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *stallProxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed || p.ln != ln || len(p.conns) >= stallProxyMaxConns {
			p.mu.Unlock()
			c.Close()
			continue
		}
		pc := &proxyConn{c: c, done: make(chan struct{})}
		p.conns[pc] = struct{}{}
		blackhole := p.mode == proxyBlackhole
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(pc, blackhole)
	}
}

// serve runs one connection until either side closes it, or the proxy
// does.
func (p *stallProxy) serve(pc *proxyConn, blackhole bool) {
	defer p.wg.Done()
	defer func() {
		pc.close()
		p.mu.Lock()
		delete(p.conns, pc)
		p.mu.Unlock()
	}()
	if blackhole {
		io.Copy(io.Discard, pc.c) // until the client or the proxy closes it
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	pc.s = s
	closed := p.closed
	select {
	case <-pc.done: // closed while dialling: refused, or the proxy closed
		closed = true
	default:
	}
	p.mu.Unlock()
	if closed {
		s.Close()
		return
	}
	var pipes sync.WaitGroup
	pipes.Add(2)
	go p.pipe(&pipes, pc, s, pc.c)
	p.pipe(&pipes, pc, pc.c, s)
	pipes.Wait()
}

// pipe copies src to dst until either side ends (which ends both). While
// the proxy stalls, a chunk read is held and nothing more is read.
func (p *stallProxy) pipe(wg *sync.WaitGroup, pc *proxyConn, dst, src net.Conn) {
	defer wg.Done()
	defer pc.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitMoving(pc) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitMoving waits while the proxy stalls or blackholes; false when the
// connection was closed meanwhile.
func (p *stallProxy) waitMoving(pc *proxyConn) bool {
	for {
		p.mu.Lock()
		stopped := p.mode == proxyStall || p.mode == proxyBlackhole
		change := p.change
		p.mu.Unlock()
		if !stopped {
			return true
		}
		select {
		case <-change:
		case <-pc.done:
			return false
		}
	}
}

// stallAll stalls every proxy at once, as near as one goroutine can.
func stallAll(ps ...*stallProxy) {
	for _, p := range ps {
		p.set(proxyStall)
	}
}

// forwardAll makes every proxy forward again.
func forwardAll(ps ...*stallProxy) {
	for _, p := range ps {
		p.set(proxyForward)
	}
}

// TestStallProxyModes checks the fixture itself against an echo server:
// each mode does what it says, the address survives a refusal, and
// closing it leaves no goroutine behind.
func TestStallProxyModes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	// A sub-test, so that its cleanups (the server's and the proxy's) run
	// before the leak check.
	t.Run("modes", func(t *testing.T) {
		p := newStallProxy(t, startEcho(t), proxyForward)
		c := dialProxy(t, p)
		expectEcho(t, c, "a")

		p.set(proxyStall)
		send(t, c, "b")
		expectSilence(t, c)
		c2 := dialProxy(t, p) // accepted, and stalled too
		send(t, c2, "c")
		expectSilence(t, c2)
		p.set(proxyForward)
		expectRead(t, c, "b")
		expectRead(t, c2, "c")

		p.set(proxyBlackhole)
		c3 := dialProxy(t, p)
		send(t, c3, "d")
		expectSilence(t, c3)
		p.set(proxyForward)
		expectSilence(t, c3) // a blackholed connection stays one
		expectEcho(t, c, "e")

		p.set(proxyRefuse)
		if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
			c.Close()
			t.Fatal("dial succeeded while refusing")
		}
		buf := make([]byte, 1)
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(buf); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("an open connection survived the refusal: %v", err)
		}
		p.set(proxyForward)
		expectEcho(t, dialProxy(t, p), "f")
	})
}

// startEcho runs a server that answers every byte with the same byte,
// stopped (connections and all) when the test ends.
func startEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func dialProxy(t *testing.T, p *stallProxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	c.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
}

func expectRead(t *testing.T, c net.Conn, want string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != want {
		t.Fatalf("read %q, %v; want %q", buf, err, want)
	}
}

func expectEcho(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	send(t, c, msg)
	expectRead(t, c, msg)
}

// expectSilence: nothing arrives on c for a while, and c stays open.
func expectSilence(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 1)
	if n, err := c.Read(buf); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %q, %v; want nothing until the deadline", buf[:n], err)
	}
}
