package testenv

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards connections from a local port, or a Unix socket
// (NewUnixProxy), to a TCP server. Tests put it between a sink and its
// database to make the database unreachable on demand: Cut drops every
// connection and refuses new ones until Restore;
// Stall keeps every connection open but stops moving bytes until Resume,
// so a client in the middle of a statement (a COPY) blocks rather than
// fails.
type Proxy struct {
	target  string
	network string // of the listener: "tcp" or "unix"

	mu       sync.Mutex
	ln       net.Listener
	addr     string
	links    map[*link]struct{}
	cut      bool
	stalled  chan struct{} // non-nil while stalled; closed by Resume
	wg       sync.WaitGroup
	closed   bool
	accepted int
	tap      func(link int, up bool, chunk []byte)

	forwarded atomic.Int64
}

// link is one proxied connection: the client's side and the server's.
type link struct {
	id   int // accept order, from 1
	tap  func(link int, up bool, chunk []byte)
	c, s net.Conn
	done chan struct{} // closed when the link is closed
	once sync.Once
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		l.c.Close()
		l.s.Close()
	})
}

// NewProxy starts a proxy to target (host:port) on a free loopback port and
// closes it when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p := &Proxy{target: target, network: "tcp", links: map[*link]struct{}{}}
	if err := p.listen("127.0.0.1:0"); err != nil {
		t.Fatalf("testenv: proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// NewUnixProxy starts a proxy to target (host:port) listening on the Unix
// socket path, and closes it when the test ends. A Unix socket is reached
// through the file system, so a process in another network namespace
// (one that cannot reach the host's loopback) connects to it too.
func NewUnixProxy(t testing.TB, path, target string) *Proxy {
	t.Helper()
	p := &Proxy{target: target, network: "unix", links: map[*link]struct{}{}}
	if err := p.listen(path); err != nil {
		t.Fatalf("testenv: proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port, or its socket path.
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// Accepted is how many connections the proxy has accepted.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Forwarded is how many bytes the proxy has passed on, both ways.
func (p *Proxy) Forwarded() int64 { return p.forwarded.Load() }

func (p *Proxy) listen(addr string) error {
	ln, err := net.Listen(p.network, addr)
	if err != nil {
		return err
	}
	p.ln = ln
	p.addr = ln.Addr().String()
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut || p.closed {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.accepted++
		id := p.accepted
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c, id)
	}
}

func (p *Proxy) serve(c net.Conn, id int) {
	defer p.wg.Done()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	l := &link{id: id, c: c, s: s, done: make(chan struct{})}
	p.mu.Lock()
	l.tap = p.tap
	if p.cut || p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	var pipes sync.WaitGroup
	pipes.Add(2)
	go p.pipe(&pipes, l, s, c)
	go p.pipe(&pipes, l, c, s)
	pipes.Wait()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// pipe copies src to dst until either side ends (which ends both), holding
// each chunk it read while the proxy is stalled: it then reads no more, so
// the sender's socket buffers fill and its writes block.
func (p *Proxy) pipe(wg *sync.WaitGroup, l *link, dst, src net.Conn) {
	defer wg.Done()
	defer l.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if gate := p.gate(); gate != nil {
				select {
				case <-gate:
				case <-l.done:
					return
				}
			}
			if l.tap != nil {
				l.tap(l.id, dst == l.s, buf[:n])
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			p.forwarded.Add(int64(n))
		}
		if err != nil {
			return
		}
	}
}

// Tap shows tap every chunk of the connections accepted after it, before
// the chunk is forwarded: link numbers the connection (1 for the first
// accepted), up is true from client to server. It runs on the link's
// copying goroutine, one call at a time per direction; the chunk is valid
// only during the call.
func (p *Proxy) Tap(tap func(link int, up bool, chunk []byte)) {
	p.mu.Lock()
	p.tap = tap
	p.mu.Unlock()
}

// gate is nil, or while stalled a channel closed on Resume.
func (p *Proxy) gate() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled
}

// Stall stops moving bytes on every connection, open or new, without
// closing any: the server looks alive but never answers, and a client
// writing to it blocks once the socket buffers are full. Resume undoes it.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Resume moves bytes again after Stall.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

// Cut closes every proxied connection and makes the server unreachable:
// the listener is closed, so new connections are refused.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	ln := p.ln
	p.ln = nil
	for l := range p.links {
		l.close()
	}
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
}

// Kill closes every proxied connection but keeps accepting new ones.
func (p *Proxy) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.close()
	}
}

// Restore listens again, on the same address, after Cut (closing a Unix
// listener removed its socket file, so the path is free again).
func (p *Proxy) Restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("testenv: proxy closed")
	}
	if p.ln != nil {
		return nil
	}
	p.cut = false
	return p.listen(p.addr)
}

// Close stops the proxy and waits for its goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Cut()
	p.wg.Wait()
}
