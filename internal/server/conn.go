package server

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/weir-io/weir/wab"
	"github.com/weir-io/weir/wire"
)

const (
	readBufferSize  = 64 << 10
	writeBufferSize = 64 << 10
)

// conn is one producer connection: a reader goroutine that decodes frames
// and submits them, and a writer goroutine that answers them in the order
// they arrived. The pending channel between them is the connection's
// in-flight window: the reader stops reading when it is full, which pushes
// back on the producer through the socket.
type conn struct {
	s       *Server
	nc      net.Conn
	shard   int
	pending chan *pending
	stopped atomic.Bool
	dr      *deadlineReader
}

// pending is one request awaiting its answer. The WAB's flusher completes
// it; the writer waits on done.
type pending struct {
	id      uint64
	records int
	bytes   int
	dur     wire.Durability
	code    wire.Code // 0: ack
	msg     string
	done    chan struct{}
}

func (p *pending) complete(err error) {
	if err != nil {
		p.code, p.msg = codeFor(err), err.Error()
	}
	close(p.done)
}

// codeFor classifies a backend error for the wire.
func codeFor(err error) wire.Code {
	switch {
	case errors.Is(err, wab.ErrQueueTimeout):
		return wire.CodeQueueTimeout
	case errors.Is(err, wab.ErrDiskFull):
		return wire.CodeDiskFull
	case errors.Is(err, wab.ErrShardFailed):
		return wire.CodeShardFailed
	case errors.Is(err, wab.ErrClosed):
		return wire.CodeShuttingDown
	default:
		return wire.CodeInternal
	}
}

func (s *Server) newConn(nc net.Conn) *conn {
	c := &conn{
		s:       s,
		nc:      nc,
		shard:   s.pickShard(),
		pending: make(chan *pending, s.opts.ConnMaxInflight),
	}
	c.dr = &deadlineReader{nc: nc, idle: s.opts.IdleTimeout, frame: s.opts.FrameReadTimeout, stopped: &c.stopped}
	return c
}

// stopReading makes the reader finish the frames it has already buffered
// (answering them ShuttingDown) and then stop.
func (c *conn) stopReading() {
	c.stopped.Store(true)
	c.nc.SetReadDeadline(time.Now())
}

func (c *conn) run() {
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	c.readLoop()
	close(c.pending)
	<-writerDone
	c.nc.Close()
}

func (c *conn) readLoop() {
	log := c.s.log
	br := bufio.NewReaderSize(c.dr, readBufferSize)
	dec := wire.NewDecoder(br, c.s.opts.MaxFrameBytes)
	for {
		c.dr.atBoundary = br.Buffered() == 0
		push, err := dec.Next()
		if err != nil {
			var pe *wire.ProtocolError
			if errors.As(err, &pe) {
				c.answer(pe.RequestID, 0, pe.Code, pe.Reason)
				if pe.Fatal {
					log.Warn("closing connection after protocol error", "code", pe.Code.String(), "reason", pe.Reason)
					return
				}
				continue
			}
			switch {
			case errors.Is(err, io.EOF):
			case errors.Is(err, os.ErrDeadlineExceeded):
				if !c.stopped.Load() {
					if c.dr.atBoundary {
						log.Debug("closing idle connection", "idle_timeout", c.s.opts.IdleTimeout)
					} else {
						log.Warn("closing connection: frame not completed in time", "frame_read_timeout", c.s.opts.FrameReadTimeout)
					}
				}
			case errors.Is(err, io.ErrUnexpectedEOF):
				log.Warn("connection closed in the middle of a frame")
			default:
				if !errors.Is(err, net.ErrClosed) {
					log.Debug("connection read failed", "err", err)
				}
			}
			return
		}
		n, size := len(push.Payloads), 0
		for _, pl := range push.Payloads {
			size += len(pl)
		}
		c.s.obs.Received(push.Durability, n, size)
		if c.stopped.Load() || c.s.closing.Load() {
			c.answer(push.RequestID, n, wire.CodeShuttingDown, "daemon is shutting down")
			continue
		}
		p := &pending{id: push.RequestID, records: n, bytes: size, dur: push.Durability, done: make(chan struct{})}
		c.pending <- p // blocks while the in-flight window is full
		req := &wab.Request{
			Durability: wab.Durability(push.Durability),
			Payloads:   copyPayloads(push.Payloads, size),
			Received:   time.Now().UnixNano(),
			Done:       p.complete,
		}
		if err := c.s.backend.Submit(c.s.ctx, c.shard, req, c.s.opts.QueueTimeout); err != nil {
			p.complete(err)
		}
	}
}

// answer queues an immediate response (a Nack decided by the reader).
func (c *conn) answer(id uint64, records int, code wire.Code, msg string) {
	p := &pending{id: id, records: records, code: code, msg: msg, done: make(chan struct{})}
	close(p.done)
	c.pending <- p
}

// copyPayloads copies the decoder's aliased payloads into one allocation.
func copyPayloads(src [][]byte, size int) [][]byte {
	buf := make([]byte, size)
	out := make([][]byte, len(src))
	off := 0
	for i, p := range src {
		n := copy(buf[off:], p)
		out[i] = buf[off : off+n : off+n]
		off += n
	}
	return out
}

func (c *conn) writeLoop() {
	bw := bufio.NewWriterSize(c.nc, writeBufferSize)
	var frame []byte
	broken := false
	flush := func() {
		if broken || bw.Buffered() == 0 {
			return
		}
		if c.s.opts.WriteTimeout > 0 {
			c.nc.SetWriteDeadline(time.Now().Add(c.s.opts.WriteTimeout))
		}
		if err := bw.Flush(); err != nil {
			broken = true
			c.s.log.Debug("connection write failed", "err", err)
			c.nc.Close() // unblocks the reader
		}
	}
	for p := range c.pending {
		select {
		case <-p.done:
		default:
			flush()
			<-p.done
		}
		if p.code == 0 {
			frame = wire.AppendAck(frame[:0], p.id, uint32(p.records))
			c.s.obs.Acked(p.dur, p.records, p.bytes)
		} else {
			frame = wire.AppendNack(frame[:0], p.id, p.code, p.msg)
			c.s.obs.Nacked(p.dur, p.code, p.records)
		}
		if !broken {
			if _, err := bw.Write(frame); err != nil {
				broken = true
				c.nc.Close()
			}
		}
		if len(c.pending) == 0 {
			flush()
		}
	}
	flush()
}

// deadlineReader arms the connection's read deadline on every read: the idle
// timeout while waiting for a new frame to start, the frame timeout once
// part of a frame has arrived.
type deadlineReader struct {
	nc          net.Conn
	idle, frame time.Duration
	atBoundary  bool
	stopped     *atomic.Bool // set by stopReading: never extend the deadline again
}

func (r *deadlineReader) Read(b []byte) (int, error) {
	d := r.frame
	if r.atBoundary {
		d = r.idle
	}
	if r.stopped.Load() {
		return 0, os.ErrDeadlineExceeded
	}
	if d > 0 {
		if err := r.nc.SetReadDeadline(time.Now().Add(d)); err != nil {
			return 0, err
		}
		if r.stopped.Load() { // stopReading raced with the line above
			return 0, os.ErrDeadlineExceeded
		}
	}
	n, err := r.nc.Read(b)
	if n > 0 {
		r.atBoundary = false
	}
	return n, err
}
