package httpin

import (
	"net"
	"sync"
	"time"
)

// slotWait is how long a connection arriving at MaxConnections waits for
// another to close before it is closed unanswered (as the socket's).
const slotWait = 100 * time.Millisecond

// RefusedConnections is the weir_http_refused_total reason of a
// connection closed at accept because MaxConnections were open.
const RefusedConnections = "max_connections"

// limitListener holds at most n connections open at once: each takes a
// slot at accept and gives it back when closed. A connection that finds
// none free within slotWait is closed at once, never queued: what an open
// connection holds (its goroutine, its buffers) is bounded by n.
type limitListener struct {
	net.Listener
	slots   chan struct{}
	refused func()
}

func limitListen(l net.Listener, n int, refused func()) net.Listener {
	return &limitListener{Listener: l, slots: make(chan struct{}, n), refused: refused}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
		default:
		}
		t := time.NewTimer(slotWait)
		select {
		case l.slots <- struct{}{}:
			t.Stop()
			return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
		case <-t.C:
			l.refused()
			c.Close()
		}
	}
}

// slotConn gives its slot back once, at its first Close.
type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}
