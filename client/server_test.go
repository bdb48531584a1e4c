package client

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/wire"
)

// actKind is what the test server does with a request.
type actKind int

const (
	actAck       actKind = iota
	actNack              // answer with a Nack
	actSilent            // never answer
	actDrop              // close the connection without answering
	actNack0Drop         // Nack with request id 0, then close (a fatal refusal)
)

type action struct {
	kind actKind
	code wire.Code
	msg  string
}

// received is one request as the test server saw it.
type received struct {
	conn       int
	version    uint8
	id         uint64
	durability wire.Durability
	firstSeq   uint64
	eventTime  int64
	payloads   [][]byte
	metas      [][]byte
	at         time.Time // when the server decoded it
}

// testServer is a minimal daemon stand-in built on the wire package: it
// decodes requests on each connection and answers them in order, as the
// handler decides.
type testServer struct {
	t       testing.TB
	ln      net.Listener
	addr    string // for Dial
	handler func(r received) action

	mu          sync.Mutex
	conns       []net.Conn
	seen        []received
	outstanding int
	maxOut      int
	tlsVersions []uint16
	discard     bool // do not record requests (benchmarks)
	wg          sync.WaitGroup

	// maxVersion is the highest wire version the server speaks (0: 2);
	// with 1 it refuses a Hello as a version-1 daemon does.
	maxVersion uint8
	// grant, when set, grants only these Hello flags (default: all asked).
	grant     *uint8
	hellos    []hello   // every Hello seen
	helloNack wire.Code // when set, every Hello is refused with it
}

// hello is a Hello as the test server saw it.
type hello struct {
	conn int
	h    wire.Hello
}

func shortSocketPath(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "weirc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s.sock")
}

// newBenchServer is an always-acking server for benchmarks.
func newBenchServer(b *testing.B) *testServer {
	path := shortSocketPath(b)
	ln, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	s := startServer(b, ln, "unix://"+path, nil)
	s.mu.Lock()
	s.discard = true
	s.mu.Unlock()
	return s
}

// newUnixServer starts a test server on a fresh Unix socket.
func newUnixServer(t *testing.T, handler func(received) action) *testServer {
	t.Helper()
	path := shortSocketPath(t)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	return startServer(t, ln, "unix://"+path, handler)
}

func startServer(t testing.TB, ln net.Listener, addr string, handler func(received) action) *testServer {
	if handler == nil {
		handler = func(received) action { return action{} }
	}
	s := &testServer{t: t, ln: ln, addr: addr, handler: handler}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.Close)
	return s
}

// Close stops the listener and closes every connection.
func (s *testServer) Close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// dropAll closes every open connection but keeps listening.
func (s *testServer) dropAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}

func (s *testServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		idx := len(s.conns)
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(idx, c)
	}
}

// serve reads requests in one goroutine and answers them in another, so
// that the number of requests a client has in flight is observable.
func (s *testServer) serve(idx int, c net.Conn) {
	defer s.wg.Done()
	defer c.Close()
	if tc, ok := c.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			return
		}
		s.mu.Lock()
		s.tlsVersions = append(s.tlsVersions, tc.ConnectionState().Version)
		s.mu.Unlock()
	}
	type item struct {
		r     received
		pe    *wire.ProtocolError
		hello *wire.Hello
	}
	work := make(chan item, 1<<14)
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		for it := range work {
			var out []byte
			switch {
			case it.pe != nil:
				out = wire.AppendNackVersion(nil, max(it.pe.Version, 1), it.pe.RequestID, it.pe.Code, it.pe.Reason)
			case it.hello != nil:
				s.mu.Lock()
				grant, nack := wire.FlagIdempotent|wire.FlagReplay, s.helloNack
				if s.grant != nil {
					grant = *s.grant
				}
				s.mu.Unlock()
				out = wire.AppendHelloAck(nil, wire.HelloAck{Version: 2, MaxVersion: 2,
					Flags: it.hello.Flags & grant, MaxFrameBytes: wire.DefaultMaxFrameBytes,
					MaxMetaBytes: wire.MaxMetaBytes})
				if nack != 0 {
					out = wire.AppendNackVersion(nil, 2, 0, nack, "refused")
				}
			default:
				a := s.handler(it.r)
				switch a.kind {
				case actAck:
					out = wire.AppendAckVersion(nil, it.r.version, it.r.id, uint32(len(it.r.payloads)))
				case actNack:
					out = wire.AppendNackVersion(nil, it.r.version, it.r.id, a.code, a.msg)
				case actNack0Drop:
					c.Write(wire.AppendNack(nil, 0, a.code, a.msg))
					c.Close()
					continue
				case actDrop:
					c.Close()
					continue
				case actSilent:
				}
			}
			s.mu.Lock()
			s.outstanding--
			s.mu.Unlock()
			if out != nil {
				if _, err := c.Write(out); err != nil {
					c.Close()
				}
			}
		}
	}()
	d := wire.NewDecoder(c, 0)
	s.mu.Lock()
	if s.maxVersion != 0 {
		d.SetMaxVersion(s.maxVersion)
	}
	s.mu.Unlock()
	for {
		p, err := d.Next()
		var pe *wire.ProtocolError
		if err != nil && !errors.As(err, &pe) {
			break
		}
		it := item{pe: pe}
		switch {
		case pe == nil && p.Type == wire.TypeHello:
			h := p.Hello
			it.hello = &h
		case pe == nil:
			r := received{conn: idx, version: p.Version, id: p.RequestID, durability: p.Durability,
				firstSeq: p.FirstSeq, eventTime: p.EventTime, at: time.Now()}
			for i, pl := range p.Payloads {
				r.payloads = append(r.payloads, append([]byte(nil), pl...))
				if p.Metas != nil {
					r.metas = append(r.metas, append([]byte(nil), p.Metas[i]...))
				}
			}
			it.r = r
		}
		s.mu.Lock()
		if it.hello != nil {
			s.hellos = append(s.hellos, hello{conn: idx, h: *it.hello})
		} else if pe == nil && !s.discard {
			s.seen = append(s.seen, it.r)
		}
		s.outstanding++
		s.maxOut = max(s.maxOut, s.outstanding)
		s.mu.Unlock()
		work <- it
		if pe != nil && pe.Fatal {
			break
		}
	}
	close(work)
	<-answered
}

// received returns a copy of every request seen so far.
func (s *testServer) received() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.seen...)
}

func (s *testServer) maxOutstanding() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxOut
}
