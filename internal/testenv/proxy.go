package testenv

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections from a local port to a server. Tests put
// it between a sink and its database to make the database unreachable on
// demand: Cut drops every connection and refuses new ones until Restore.
type Proxy struct {
	target string

	mu       sync.Mutex
	ln       net.Listener
	addr     string
	conns    map[net.Conn]struct{}
	cut      bool
	wg       sync.WaitGroup
	closed   bool
	accepted int
}

// NewProxy starts a proxy to target (host:port) on a free loopback port and
// closes it when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p := &Proxy{target: target, conns: map[net.Conn]struct{}{}}
	if err := p.listen("127.0.0.1:0"); err != nil {
		t.Fatalf("testenv: proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
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

func (p *Proxy) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
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
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		c.Close()
		s.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.conns[s] = struct{}{}
	p.mu.Unlock()
	var pipes sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer pipes.Done()
		_, _ = io.Copy(dst, src)
		// Either side ending ends both.
		dst.Close()
		src.Close()
	}
	pipes.Add(2)
	go pipe(s, c)
	go pipe(c, s)
	pipes.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// Cut closes every proxied connection and makes the server unreachable:
// the listener is closed, so new connections are refused.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	ln := p.ln
	p.ln = nil
	for c := range p.conns {
		c.Close()
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
	for c := range p.conns {
		c.Close()
	}
}

// Restore listens again, on the same address, after Cut.
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
