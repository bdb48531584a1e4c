package pgopen

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CloseGrace is how long Pool.Close lets the connections end politely
// before it closes their sockets.
const CloseGrace = time.Second

// Pool is a pgxpool.Pool whose Close returns promptly whatever the
// server does. pgx ends a connection politely: a statement in flight is
// cancelled with a cancel request on a new connection, then Terminate is
// sent, and a server that accepts bytes but never answers (stalled, not
// down) holds each connection's close for up to 15 s. A weir writer's
// Close runs during shutdown, bounded by shutdown_timeout, so Pool.Close
// waits CloseGrace for the polite close and then closes every socket the
// pool dialled, the cancel requests' included.
type Pool struct {
	*pgxpool.Pool
	conns *conns
}

// Close closes the pool's connections (see Pool) and returns once they
// are closed.
func (p *Pool) Close() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Pool.Close()
	}()
	t := time.NewTimer(CloseGrace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	p.conns.closeAll()
	<-done
}

// conns are the sockets a pool dialled that are still open.
type conns struct {
	mu     sync.Mutex
	open   map[*conn]struct{}
	closed bool // closeAll ran: refuse new sockets
}

// track makes dial's sockets known to c.
func (c *conns) track(dial pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := &conn{Conn: nc, owner: c}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed {
			nc.Close()
			return nil, net.ErrClosed
		}
		c.open[tc] = struct{}{}
		return tc, nil
	}
}

// closeAll closes every open socket, and any dialled afterwards.
func (c *conns) closeAll() {
	c.mu.Lock()
	c.closed = true
	open := make([]*conn, 0, len(c.open))
	for tc := range c.open {
		open = append(open, tc)
	}
	c.mu.Unlock()
	for _, tc := range open {
		tc.Close()
	}
}

// conn is a tracked socket.
type conn struct {
	net.Conn
	owner *conns
}

func (tc *conn) Close() error {
	tc.owner.mu.Lock()
	delete(tc.owner.open, tc)
	tc.owner.mu.Unlock()
	return tc.Conn.Close()
}
