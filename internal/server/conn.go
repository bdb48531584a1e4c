package server

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
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
// they arrived (the reader answers a lone frame it wrote itself: see
// answerOwn). The pending channel between them is the connection's
// in-flight window: the reader stops reading when it is full, which pushes
// back on the producer through the socket. The writer is woken through
// wake only — by a completion, by an answer the reader decides itself, and
// when the reader is done — never by a push that is merely submitted: that
// would be a goroutine wake-up per frame for nothing.
type conn struct {
	s       *Server
	nc      net.Conn
	shard   int
	pending chan *pending
	wake    chan struct{} // cap 1: a pending request was completed (see wakeWriter)
	stopped atomic.Bool
	dr      *deadlineReader
	replay  bool     // replay fields may be granted (the Unix socket)
	sess    *session // set by Hello (wire version 2)
	// queued are decoded requests not yet submitted: the reader submits
	// the frames it finds in its buffer together (see flushSubmits), and
	// reports them to the observer together (received).
	queued   []*pending
	received tally
	// wmu guards w, the connection's answering state: held by the writer
	// goroutine while it answers, or by the reader answering a lone frame
	// it wrote itself (answerOwn), which spares the writer a wake-up.
	wmu sync.Mutex
	w   *connWriter
	// cr is the connection's share of the memory budget (admission.go),
	// written by the reader and the writer for every frame: on cache
	// lines of its own.
	_  [64]byte
	cr credit
	_  [64]byte
}

// tally adds up frames per tier for one Observer call per tier instead of
// one per frame.
type tally [2]struct{ frames, records, bytes int }

func (t *tally) add(d wire.Durability, records, bytes int) bool {
	if int(d) >= len(t) {
		return false
	}
	t[d].frames++
	t[d].records += records
	t[d].bytes += bytes
	return true
}

func (t *tally) empty() bool { return t[0].frames == 0 && t[1].frames == 0 }

// report hands the counts to f and clears them.
func (t *tally) report(f func(d wire.Durability, frames, records, bytes int)) {
	for d := range t {
		if c := t[d]; c.frames > 0 {
			f(wire.Durability(d), c.frames, c.records, c.bytes)
			t[d] = struct{ frames, records, bytes int }{}
		}
	}
}

// maxQueuedSubmits caps how many decoded frames wait to be submitted
// together, bounding what the first of them waits for the others.
const maxQueuedSubmits = 32

// BatchBackend is implemented by a Backend that takes several requests
// for one shard in one hand-off (wab.Log.SubmitBatch): all are queued or
// none is.
type BatchBackend interface {
	SubmitBatch(ctx context.Context, shard int, reqs []*wab.Request, wait time.Duration) error
}

// pending is one request awaiting its answer, and the wab.Request it was
// submitted as (one allocation for both). Whoever completes it — the WAB's
// flusher, or the reader when Submit refused — sets the answer, marks it
// done and wakes the writer without blocking; the writer waits for done.
type pending struct {
	req      wab.Request
	one      [1][]byte // req.Payloads of a single-record push
	oneMeta  [1][]byte // req.Metas of a single-record push
	c        *conn
	id       uint64
	records  int
	bytes    int
	dur      wire.Durability
	version  uint8          // of the request; the answer's version
	helloAck *wire.HelloAck // the answer to a Hello
	buf      frameBuf       // holds the request's payloads and metas
	resv     int64          // memory reserved for it (see admission.go)
	code     wire.Code      // 0: ack
	msg      string
	done     atomic.Bool // set after code and msg
	// answerer is who answers p once it is done: answerWriter (the writer,
	// woken by the completion), or answerReader while the reader is in
	// the SubmitInline of a lone frame — a completion then only marks it
	// answerDue, and the reader answers when the call returns (answerOwn).
	answerer atomic.Uint32
}

const (
	answerWriter uint32 = iota
	answerReader
	answerDue
)

func (p *pending) complete(err error) {
	if err != nil {
		p.refuse(codeFor(err), err.Error())
		return
	}
	p.finish()
}

// refuse completes p with a Nack the server decided (not a backend error).
func (p *pending) refuse(code wire.Code, msg string) {
	p.code, p.msg = code, msg
	p.finish()
}

func (p *pending) finish() {
	p.done.Store(true)
	if p.answerer.CompareAndSwap(answerReader, answerDue) {
		return
	}
	p.c.wakeWriter()
}

// wakeWriter makes the writer look at its requests again, without
// blocking.
func (c *conn) wakeWriter() {
	select {
	case c.wake <- struct{}{}:
	default: // a wake-up is already due
	}
}

// codeFor classifies a backend error for the wire.
func codeFor(err error) wire.Code {
	switch {
	// A failed shard comes first: its sticky error may also wrap the cause
	// (ErrDiskFull for a torn write on a full disk), but the shard will not
	// recover, so the producer must reconnect, not wait and retry here.
	case errors.Is(err, wab.ErrShardFailed):
		return wire.CodeShardFailed
	case errors.Is(err, wab.ErrQueueTimeout):
		return wire.CodeQueueTimeout
	case errors.Is(err, wab.ErrDiskFull):
		return wire.CodeDiskFull
	// The server's context ends only when Shutdown stops waiting.
	case errors.Is(err, wab.ErrClosed), errors.Is(err, context.Canceled):
		return wire.CodeShuttingDown
	default:
		return wire.CodeInternal
	}
}

func (s *Server) newConn(nc net.Conn, replay bool) *conn {
	c := &conn{
		s:       s,
		nc:      nc,
		shard:   s.pickShard(),
		pending: make(chan *pending, s.opts.ConnMaxInflight),
		wake:    make(chan struct{}, 1),
		replay:  replay,
	}
	c.cr.freed = make(chan struct{}, 1)
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
	if !c.handshake() {
		c.nc.Close()
		return
	}
	c.w = &connWriter{c: c, bw: bufio.NewWriterSize(c.nc, writeBufferSize)}
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	c.readLoop()
	close(c.pending)
	c.wakeWriter()
	<-writerDone
	if c.s.opts.Budget != nil {
		c.closeCredit()
	}
	c.nc.Close()
}

func (c *conn) readLoop() {
	log := c.s.log
	br := bufio.NewReaderSize(c.dr, readBufferSize)
	dec := wire.NewDecoder(br, c.s.opts.MaxFrameBytes)
	defer c.flushSubmits()
	for {
		if (len(c.queued) > 0 || !c.received.empty()) && !frameBuffered(br) {
			// The next frame would wait for the socket: submit what is
			// decoded first.
			c.flushSubmits()
		}
		c.dr.nextFrame(br.Buffered() > 0)
		f, err := dec.Next()
		if err != nil {
			var pe *wire.ProtocolError
			if errors.As(err, &pe) {
				c.answer(max(pe.Version, wire.Version), pe.RequestID, 0, pe.Code, pe.Reason)
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
					if c.dr.idleWait() {
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
		if f.Type == wire.TypeHello {
			c.hello(f.Hello)
			continue
		}
		c.submit(&f.Push)
	}
}

// submit hands a decoded push to the buffer, or answers it at once when it
// is refused before that.
func (c *conn) submit(push *wire.Push) {
	n, size := len(push.Payloads), 0
	for _, pl := range push.Payloads {
		size += len(pl)
	}
	if !c.received.add(push.Durability, n, size) {
		c.s.obs.Received(push.Durability, 1, n, size)
	}
	if c.stopped.Load() || c.s.closing.Load() {
		c.answer(push.Version, push.RequestID, n, wire.CodeShuttingDown, "daemon is shutting down")
		return
	}
	if push.Version >= wire.Version2 {
		if code, msg := c.refuseV2(push); code != 0 {
			c.answer(push.Version, push.RequestID, n, code, msg)
			return
		}
	}
	metaSize := c.storedMetaSize(push)
	var resv int64
	if c.s.opts.Budget != nil {
		resv = frameMemory(n, size+metaSize, metaSize > 0)
		if code, msg := c.admit(resv); code != 0 {
			c.answer(push.Version, push.RequestID, n, code, msg)
			return
		}
	}
	p := &pending{c: c, id: push.RequestID, records: n, bytes: size, dur: push.Durability, version: push.Version, resv: resv}
	c.enqueue(p) // blocks while the in-flight window is full
	p.req = wab.Request{
		Durability: wab.Durability(push.Durability),
		Received:   c.dr.receivedAt().UnixNano(),
		Done:       p.complete,
	}
	c.fillRecords(p, push, size, metaSize)
	c.queued = append(c.queued, p)
	if len(c.queued) >= maxQueuedSubmits {
		c.flushSubmits()
	}
}

// enqueue puts p in the in-flight window, waiting while it is full — after
// submitting the requests still queued, which hold places in it.
func (c *conn) enqueue(p *pending) {
	select {
	case c.pending <- p:
		return
	default:
	}
	c.flushSubmits()
	c.pending <- p
}

// flushSubmits submits the queued requests: several in one hand-off when
// the backend takes batches (one channel operation on the shard's queue
// instead of one per frame), else one by one; a lone request through
// SubmitInline, which may write it on this goroutine and complete it
// before it returns — the reader then answers it too. A refusal answers
// each of them.
func (c *conn) flushSubmits() {
	c.received.report(c.s.obs.Received)
	q := c.queued
	if len(q) == 0 {
		return
	}
	defer func() {
		clear(c.queued)
		c.queued = c.queued[:0]
	}()
	wait, shed := c.s.opts.QueueTimeout, c.s.throttled()
	if shed {
		wait = 0 // in critical nothing waits for a full shard queue
	}
	fail := func(p *pending, err error) {
		if shed && errors.Is(err, wab.ErrQueueTimeout) {
			p.refuse(c.s.overloaded("shard queue full while flow control sheds load (critical)"))
			return
		}
		p.complete(err)
	}
	if len(q) == 1 {
		p := q[0]
		p.answerer.Store(answerReader)
		err := c.s.backend.SubmitInline(c.s.ctx, c.shard, &p.req, wait)
		if p.answerer.Swap(answerWriter) == answerDue {
			c.answerOwn()
		}
		if err != nil {
			fail(p, err)
		}
		return
	}
	bb, ok := c.s.backend.(BatchBackend)
	if !ok {
		for _, p := range q {
			if err := c.s.backend.Submit(c.s.ctx, c.shard, &p.req, wait); err != nil {
				fail(p, err)
			}
		}
		return
	}
	reqs := make([]*wab.Request, len(q)) // the backend keeps it
	for i, p := range q {
		reqs[i] = &p.req
	}
	if err := bb.SubmitBatch(c.s.ctx, c.shard, reqs, wait); err != nil {
		for _, p := range q {
			fail(p, err)
		}
	}
}

// frameBuffered reports whether br holds a whole frame (its header and
// the body length the header announces).
func frameBuffered(br *bufio.Reader) bool {
	n := br.Buffered()
	if n < wire.HeaderSize {
		return false
	}
	h, err := br.Peek(wire.HeaderSize)
	if err != nil {
		return false
	}
	return n-wire.HeaderSize >= int(binary.BigEndian.Uint32(h[4:8]))
}

// answer queues an immediate response (a Nack decided by the reader) of
// version v.
func (c *conn) answer(v uint8, id uint64, records int, code wire.Code, msg string) {
	p := &pending{c: c, id: id, records: records, version: v, code: code, msg: msg}
	p.done.Store(true)
	c.enqueue(p)
	c.wakeWriter()
}

// storedMetaSize is the size of the metadata push's records are stored
// with (see session.appendStoredMeta): 0 for a version-1 push.
func (c *conn) storedMetaSize(push *wire.Push) int {
	switch {
	case push.Version < wire.Version2:
		return 0
	case push.Metas == nil: // no record brought metadata: all alike
		return c.sess.storedMetasSize(push)
	}
	metaSize := 0
	for i, block := range push.Metas {
		metaSize += c.sess.storedMetaSize(push, i, block, push.MetaInfos[i])
	}
	return metaSize
}

// fillRecords sets p.req's Payloads — copies of the decoder's aliased
// payloads (size bytes) — and, for a version-2 push, the Metas each record
// is stored with (metaSize bytes; see session.appendStoredMeta), all in
// one pooled buffer (see getBuf). A single-record push needs no
// allocation for the slices themselves.
func (c *conn) fillRecords(p *pending, push *wire.Push, size, metaSize int) {
	p.buf = getBuf(size + metaSize)
	buf := p.buf.bytes()
	n := len(push.Payloads)
	slots, metas := p.one[:0], p.oneMeta[:0]
	if n > 1 {
		if metaSize == 0 {
			slots = make([][]byte, 0, n)
		} else { // one allocation for both
			both := make([][]byte, 2*n)
			slots, metas = both[:0:n], both[n:n]
		}
	}
	p.req.Payloads = copyPayloads(slots, push.Payloads, buf[:size])
	if metaSize == 0 {
		return
	}
	mbuf := buf[size:size]
	fast := push.Metas == nil && push.EventTime != 0 && c.sess.idempotent()
	for i := range push.Payloads {
		start := len(mbuf)
		if fast { // the common case, kept out of appendStoredMeta's large frame
			mbuf = c.sess.appendProducerMeta(mbuf, push.EventTime, push.FirstSeq+uint64(i))
			metas = append(metas, mbuf[start:len(mbuf):len(mbuf)])
			continue
		}
		var block []byte
		var info wire.MetaInfo
		if push.Metas != nil {
			block, info = push.Metas[i], push.MetaInfos[i]
		}
		mbuf = c.sess.appendStoredMeta(mbuf, push, i, block, info)
		metas = append(metas, mbuf[start:len(mbuf):len(mbuf)])
	}
	p.req.Metas = metas
}

// copyPayloads copies the decoder's aliased payloads into buf, appending
// the slices to dst, which has room for them.
func copyPayloads(dst, src [][]byte, buf []byte) [][]byte {
	off := 0
	for _, p := range src {
		n := copy(buf[off:], p)
		dst = append(dst, buf[off:off+n:off+n])
		off += n
	}
	return dst
}

// connWriter is the writer goroutine's state: the buffered connection,
// the answers written since the last flush, and the memory of the frames
// they answered.
type connWriter struct {
	c      *conn
	bw     *bufio.Writer
	frame  []byte
	broken bool
	// head is the oldest request not yet answered, taken from c.pending.
	head *pending
	// abandoned: Shutdown stopped waiting; nothing more is answered.
	abandoned bool
	// writeArmed is the write deadline set on the connection (see armWrite).
	writeArmed time.Time
	// acked adds up the acks written since the last flush: one Observer
	// call per flush, made before the acks go out.
	acked tally
	// answered adds up the memory of the frames answered since the last
	// flush: given back to the connection's credit once per flush (or at
	// once while the reader waits for memory; see admission.go).
	answered int64
}

// writeLoop answers the connection's requests in the order they arrived.
// The writer sleeps only on c.wake, which every completion signals (and
// the reader, for answers it decides itself and when it closes c.pending):
// a push that is merely submitted does not wake it.
func (c *conn) writeLoop() {
	for {
		c.wmu.Lock()
		open := c.w.answerDone()
		idle := c.w.head == nil
		c.wmu.Unlock()
		if !open {
			return
		}
		if idle && c.s.opts.Budget != nil {
			// Nothing to answer: credit the connection does not use goes
			// back to the budget (it takes it again in chunks).
			c.returnCredit()
		}
		select {
		case <-c.wake: // some request completed, or a new answer is queued
		case <-c.s.ctx.Done():
			c.wmu.Lock()
			head := c.w.head
			c.w.head, c.w.abandoned = nil, true
			c.wmu.Unlock()
			c.w.abandon(head)
			return
		}
	}
}

// answerOwn answers, on the reader's goroutine, a lone frame the reader
// wrote itself (and whatever else is done in order before or after it),
// unless the writer is answering right now — then the writer is woken to
// look again.
func (c *conn) answerOwn() {
	if !c.wmu.TryLock() {
		c.wakeWriter()
		return
	}
	c.w.answerDone()
	idle := c.w.head == nil
	c.wmu.Unlock()
	if idle && c.s.opts.Budget != nil {
		c.returnCredit()
	}
}

// answerDone answers, in order, every request from the oldest unanswered
// one (head, else the next in c.pending) up to the first not yet done,
// and flushes. It returns false once c.pending is closed and drained.
// Called with c.wmu held.
func (w *connWriter) answerDone() bool {
	if w.abandoned {
		return true
	}
	for {
		if w.head == nil {
			select {
			case p, ok := <-w.c.pending:
				if !ok {
					w.flush()
					return false
				}
				w.head = p
			default:
			}
		}
		if w.head == nil || !w.head.done.Load() {
			// Everything answered so far goes out before the wait.
			w.flush()
			return true
		}
		w.answer(w.head)
		w.head = nil
	}
}

// answer writes the response to p, whose Done has been called (the
// flusher is finished with its bytes).
func (w *connWriter) answer(p *pending) {
	c := w.c
	if p.buf.b != nil {
		p.buf.put()
		p.buf = frameBuf{}
	}
	if p.resv != 0 {
		w.answered += p.resv
		if c.cr.waiting.Load() {
			w.giveBack()
		}
	}
	switch {
	case p.helloAck != nil:
		w.frame = wire.AppendHelloAck(w.frame[:0], *p.helloAck)
	case p.code == 0:
		w.frame = wire.AppendAckVersion(w.frame[:0], p.version, p.id, uint32(p.records))
		if !w.acked.add(p.dur, p.records, p.bytes) {
			c.s.obs.Acked(p.dur, 1, p.records, p.bytes)
		}
	default:
		w.frame = wire.AppendNackVersion(w.frame[:0], p.version, p.id, p.code, p.msg)
		c.s.obs.Nacked(p.dur, p.code, p.records)
	}
	if w.broken {
		return
	}
	// A Write that does not fit in the buffer writes to the connection:
	// it needs a deadline of its own, not whatever is left of the last
	// flush's.
	if len(w.frame) > w.bw.Available() {
		w.armWrite()
	}
	if _, err := w.bw.Write(w.frame); err != nil {
		w.fail(err)
	}
}

// flush gives back the answered frames' memory, reports the acks, and
// writes out what is buffered.
func (w *connWriter) flush() {
	w.giveBack()
	w.acked.report(w.c.s.obs.Acked)
	if w.broken || w.bw.Buffered() == 0 {
		return
	}
	w.armWrite()
	if err := w.bw.Flush(); err != nil {
		w.fail(err)
	}
}

func (w *connWriter) giveBack() {
	if w.answered != 0 {
		w.c.release(w.answered)
		w.answered = 0
	}
}

// armWrite gives every write at least WriteTimeout. The deadline is armed
// WriteTimeout/16 late and re-armed only once it falls short, not on every
// flush (see deadlineReader.idleDeadline).
func (w *connWriter) armWrite() {
	if wt := w.c.s.opts.WriteTimeout; wt > 0 {
		now := time.Now()
		if w.writeArmed.Before(now.Add(wt)) {
			w.writeArmed = now.Add(wt + wt/16)
			w.c.nc.SetWriteDeadline(w.writeArmed)
		}
	}
}

// fail marks the connection broken: nothing more is written, and closing
// it unblocks the reader.
func (w *connWriter) fail(err error) {
	w.broken = true
	w.c.s.log.Debug("connection write failed", "err", err)
	w.c.nc.Close()
}

// abandon is the writer's end when Shutdown stopped waiting: the requests
// still in flight (head and those in c.pending) go unanswered — none of
// them was acked. It closes the connection so the reader runs out; their
// memory is no longer the connection's to account for.
func (w *connWriter) abandon(head *pending) {
	c := w.c
	c.nc.Close()
	w.giveBack()
	if head != nil {
		c.release(head.resv)
	}
	for p := range c.pending {
		c.release(p.resv)
	}
}

// deadlineReader arms the connection's read deadline: the idle timeout
// while waiting for a new frame to start (re-armed on every read, cleared
// when the idle timeout is disabled), and the frame timeout once part of a
// frame has arrived — armed once per frame, so a frame trickling in one
// byte at a time still has to be complete within it. A frame whose first
// bytes were already buffered is timed from when the reader turns to it,
// so time the server spent not reading (a full window, a queue wait) is not
// charged to the producer.
type deadlineReader struct {
	nc          net.Conn
	idle, frame time.Duration
	atBoundary  bool      // no byte of the next frame read yet
	frameStart  time.Time // zero: not timed yet
	armed       time.Time // the read deadline set on nc (zero: none)
	armedIdle   bool      // armed is an idle deadline (see idleDeadline)
	// readAt is when the last read that returned bytes returned: the
	// receive time of every frame completed by those bytes (one clock
	// reading per read, not per frame).
	readAt  time.Time
	stopped *atomic.Bool // set by stopReading: never extend the deadline again
}

// idleDeadline is the read deadline while waiting for a frame to start at
// now: the one armed already if it is an idle deadline at least idle away,
// else now + idle + idle/16. Re-arming a deadline is a runtime timer update;
// moving it on every read, as each read wants it idle from now, cost the
// daemon a few per cent of its CPU under load. Armed a little late, it is
// re-armed about once per idle/16 instead, and an idle connection is still
// closed no sooner than idle after its last frame (at most idle/16 later).
func (r *deadlineReader) idleDeadline(now time.Time) time.Time {
	if r.armedIdle && !r.armed.Before(now.Add(r.idle)) {
		return r.armed
	}
	return now.Add(r.idle + r.idle/16)
}

// receivedAt is the receive time of the frame just decoded: when the read
// that completed it returned.
func (r *deadlineReader) receivedAt() time.Time {
	if r.readAt.IsZero() {
		return time.Now()
	}
	return r.readAt
}

// nextFrame is called before each frame is decoded; buffered reports that
// some of it has been read already.
func (r *deadlineReader) nextFrame(buffered bool) {
	r.atBoundary = !buffered
	r.frameStart = time.Time{}
}

// idleWait reports that the reader was waiting for a frame to start (as
// opposed to inside one).
func (r *deadlineReader) idleWait() bool { return r.atBoundary }

func (r *deadlineReader) Read(b []byte) (int, error) {
	if r.stopped.Load() {
		return 0, os.ErrDeadlineExceeded
	}
	var dl time.Time
	if r.atBoundary {
		if r.idle > 0 {
			dl = r.idleDeadline(time.Now())
		}
	} else if r.frame > 0 {
		if r.frameStart.IsZero() {
			r.frameStart = time.Now()
		}
		dl = r.frameStart.Add(r.frame)
	}
	if !dl.Equal(r.armed) {
		if err := r.nc.SetReadDeadline(dl); err != nil {
			return 0, err
		}
		r.armed = dl
		r.armedIdle = r.atBoundary && r.idle > 0
		if r.stopped.Load() { // stopReading raced with the line above
			return 0, os.ErrDeadlineExceeded
		}
	}
	n, err := r.nc.Read(b)
	if n > 0 {
		r.readAt = time.Now()
		if r.atBoundary {
			r.atBoundary = false
			r.frameStart = r.readAt
		}
	}
	return n, err
}
