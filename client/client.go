package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weir-io/weir/internal/backoff"
	"github.com/weir-io/weir/wire"
)

// Durability is the tier a push asks for; see the package documentation.
type Durability = wire.Durability

// Durability tiers.
const (
	// Durable: an Ack means the records are on stable storage and survive
	// power loss.
	Durable = wire.Durable
	// Buffered: an Ack means the records survive a crash of the daemon
	// process but not a power loss or kernel crash.
	Buffered = wire.Buffered
)

// request is one frame awaiting its response. Its encoded frame is kept
// until the response arrives so that it can be resent after a reconnect.
type request struct {
	id      uint64
	frame   []byte
	version uint8 // the frame's wire version
	records int
	weight  int // window slots held
	done    func(error)
	sentGen uint64 // connection generation it was last written on; 0 = not yet
	// overloads counts the Overloaded answers it got in a row.
	overloads int

	// ctx is the push's: it bounds the retries of an uncertain request.
	ctx      context.Context
	firstSeq uint64 // its records' first sequence number (version 2)
	// uncertain: a copy of it was written on a connection that broke
	// before that copy's answer came, so the daemon may have stored it.
	// Only an Ack or a permanent Nack settles such a request.
	uncertain bool
	// unwatch stops the watch on ctx of an uncertain request held after
	// an Overloaded answer (nil when none).
	unwatch func() bool
}

// maybeStored reports whether the daemon may hold a copy of r: it is
// uncertain, or on the wire awaiting its answer. Called with mu held.
func (r *request) maybeStored() bool { return r.uncertain || r.sentGen != 0 }

// unknown is the error of giving up on r, which may be stored, because of
// cause; last is the last answer it got, if any.
func (c *Client) unknown(r *request, cause, last error) *OutcomeUnknownError {
	e := &OutcomeUnknownError{Producer: c.prod.id, FirstSeq: r.firstSeq, Records: r.records,
		Cause: cause, Last: last, frame: r.frame, version: r.version}
	if r.version < wire.Version2 {
		e.Producer, e.FirstSeq = wire.ProducerID{}, 0
	}
	return e
}

// Client is a connection to a weir daemon that pushes records and matches
// the daemon's responses to them. It is safe for concurrent use.
type Client struct {
	ep   endpoint
	opts options
	log  *slog.Logger
	win  *window
	prod *Producer
	sess atomic.Pointer[session] // what the current (or last) connection negotiated
	// resent counts the records sent again after a reconnect.
	resent atomic.Uint64
	// overloadRetried counts the requests sent again after an Overloaded
	// Nack.
	overloadRetried atomic.Uint64

	wake chan struct{} // cap 1: the send queue has work
	kill chan struct{} // closed to stop the connection loop at once
	life context.Context
	stop context.CancelFunc // cancels life: aborts a redial in progress
	wg   sync.WaitGroup

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*request // sent or queued, not yet answered
	queue   []*request          // not yet written on the current connection
	// held are requests refused Overloaded, waiting for pauseUntil to be
	// sent again; the writer writes nothing before pauseUntil.
	held       []*request
	pauseUntil time.Time
	gen        uint64 // current connection generation
	closing    bool
	drained    chan struct{} // closed when closing and pending is empty
}

// Dial connects to the daemon at addr and returns a Client. addr is
// unix:///path, unix:/path or a plain socket path for a Unix socket, or
// tcp://host:port for TCP, which requires WithTLS. ctx bounds only this
// first dial and its version negotiation (together with the dial
// timeout); later redials are the client's own business until Close.
//
// The client speaks wire version 2 (an idempotent producer; see Producer)
// and falls back to version 1 with a daemon that speaks only that; it
// negotiates again on every reconnect.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	ep, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if ep.network == "tcp" && o.tls == nil {
		return nil, fmt.Errorf("client: address %q: tcp requires WithTLS", addr)
	}
	log := o.logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	prod := o.producer
	if prod == nil {
		prod = NewProducer()
	}
	life, stop := context.WithCancel(context.Background())
	c := &Client{
		ep:      ep,
		opts:    o,
		log:     log,
		win:     newWindow(o.window),
		prod:    prod,
		wake:    make(chan struct{}, 1),
		kill:    make(chan struct{}),
		life:    life,
		stop:    stop,
		pending: make(map[uint64]*request),
		drained: make(chan struct{}),
	}
	conn, sess, err := c.connect(ctx)
	if err != nil {
		stop()
		return nil, err
	}
	c.sess.Store(&sess)
	c.wg.Add(1)
	go c.run(conn, sess)
	return c, nil
}

// Producer is the client's producer: its id and sequence counter.
func (c *Client) Producer() *Producer { return c.prod }

// Resent is how many records this client has sent again after a reconnect
// because their answer had not arrived: with wire version 2 each keeps its
// record id, so the copies the daemon may have stored already are the same
// record to every sink.
func (c *Client) Resent() uint64 { return c.resent.Load() }

// OverloadRetried is how many requests this client has sent again after
// the daemon refused them with Overloaded (see WithOverloadRetries).
func (c *Client) OverloadRetried() uint64 { return c.overloadRetried.Load() }

// ProtocolVersion is the wire version the client's current (or last)
// connection negotiated: 2, or 1 with a daemon that speaks only that.
func (c *Client) ProtocolVersion() uint8 { return c.sess.Load().version }

// CanReplay reports whether the client's current (or last) connection was
// granted replay: records with a Replay identity are accepted on it. Only
// a daemon speaking wire version 2, over its Unix socket, grants it.
func (c *Client) CanReplay() bool { return c.sess.Load().flags&wire.FlagReplay != 0 }

// Push pushes one record and waits for its Ack. It returns nil once the
// daemon acknowledged the record at tier d, a *NackError if the daemon
// refused it, ErrFrameTooLarge if it exceeds the frame cap, ErrClosed, or
// ctx's error. When ctx ends before the record was written to the daemon,
// the client takes it back and Push returns ctx's error: it was not
// stored. When ctx ends after that, the record stays in flight (it may
// already be stored), its outcome is discarded, and Push returns an
// *OutcomeUnknownError wrapping ctx's error (see the package
// documentation, "Errors").
func (c *Client) Push(ctx context.Context, payload []byte, d Durability) error {
	return c.pushWait(ctx, [][]byte{payload}, nil, d)
}

// PushBatch pushes the records in one frame and waits for the one response
// that covers all of them: they are acknowledged or refused together. Its
// results are those of Push.
func (c *Client) PushBatch(ctx context.Context, payloads [][]byte, d Durability) error {
	return c.pushWait(ctx, payloads, nil, d)
}

// pushWait is pushAsync waiting for the answer.
func (c *Client) pushWait(ctx context.Context, payloads [][]byte, recs []Record, d Durability) error {
	res := make(chan error, 1)
	r, err := c.pushAsync(ctx, payloads, recs, d, func(err error) { res <- err })
	if err != nil {
		return err
	}
	return c.wait(ctx, r, res)
}

// wait waits for r's answer on res, or for ctx to end. Then a request
// never written is taken back (ctx's error: nothing was stored) and one
// that may be stored stays in flight, the caller getting an
// *OutcomeUnknownError.
func (c *Client) wait(ctx context.Context, r *request, res <-chan error) error {
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
	}
	c.mu.Lock()
	if c.pending[r.id] != r {
		// Answered (or failed) meanwhile: its done is on its way.
		c.mu.Unlock()
		return <-res
	}
	if r.maybeStored() {
		c.mu.Unlock()
		return c.unknown(r, ctx.Err(), nil)
	}
	delete(c.pending, r.id)
	notR := func(q *request) bool { return q == r }
	c.queue = slices.DeleteFunc(c.queue, notR)
	c.held = slices.DeleteFunc(c.held, notR)
	c.noteDrainedLocked()
	c.mu.Unlock()
	c.win.release(r.weight)
	return ctx.Err()
}

// PushAsync hands the records to the client as one frame (a Push for one
// record, a PushBatch for more) and returns without waiting for the
// response. It blocks, respecting ctx, while the in-flight window is full.
//
// If PushAsync returns nil, done is called exactly once with the request's
// outcome: nil for an Ack, a *NackError, ErrClosed if Close gave up on it
// before it was written, or an *OutcomeUnknownError if the client gave up
// on it when the daemon may have stored it. ctx bounds the wait for the
// window and, for a request resent after a reconnect, its retries after
// Overloaded answers (see the package documentation, "Overload"). If it returns an error (ctx's, ErrClosed, ErrEmptyBatch, or
// ErrFrameTooLarge / ErrBadDurability for a push the daemon would refuse),
// done is never called. The payloads are copied before
// PushAsync returns, so the caller may reuse them.
//
// Each record gets the next sequence number of the client's Producer and
// the time of this call as its event time; a resend after a reconnect
// keeps both, so the daemon stores the resent record under the same id.
//
// done runs on the client's own goroutine (the connection reader, or
// Close): it must be quick and must not block or push on the same client.
func (c *Client) PushAsync(ctx context.Context, payloads [][]byte, d Durability, done func(error)) error {
	_, err := c.pushAsync(ctx, payloads, nil, d, done)
	return err
}

// PushRecords pushes records with their metadata (key, headers, event
// time, replay identity) in one frame and waits for the response, as
// PushBatch. Metadata needs wire version 2: against a daemon that speaks
// only version 1 a record with metadata fails with ErrUnsupported.
func (c *Client) PushRecords(ctx context.Context, recs []Record, d Durability) error {
	if recs == nil {
		recs = []Record{}
	}
	return c.pushWait(ctx, nil, recs, d)
}

// PushRecordsAsync is PushAsync for records with metadata. Besides the
// errors of PushAsync it returns ErrBadMeta for metadata the daemon would
// refuse, ErrUnsupported for metadata a version-1 daemon cannot carry,
// and ErrNotPermitted for replay fields on a connection not granted
// replay. The records are copied before it returns.
func (c *Client) PushRecordsAsync(ctx context.Context, recs []Record, d Durability, done func(error)) error {
	if recs == nil {
		recs = []Record{}
	}
	_, err := c.pushAsync(ctx, nil, recs, d, done)
	return err
}

func (c *Client) pushAsync(ctx context.Context, payloads [][]byte, recs []Record, d Durability, done func(error)) (*request, error) {
	n := len(payloads)
	if recs != nil {
		n = len(recs)
	}
	if n == 0 {
		return nil, ErrEmptyBatch
	}
	if !d.Valid() {
		return nil, fmt.Errorf("client: durability %s: %w", d, ErrBadDurability)
	}
	sess := c.sess.Load()
	// Encode before waiting for the window; the id goes in afterwards. The
	// frame is owned by the request from now on.
	frame, seq, err := c.encode(sess, payloads, recs, d)
	if err != nil {
		return nil, err
	}
	return c.enqueue(ctx, &request{frame: frame, version: sess.version, records: n, firstSeq: seq, done: done})
}

// enqueue waits for r's slots in the window and queues it with a fresh
// request id.
func (c *Client) enqueue(ctx context.Context, r *request) (*request, error) {
	if r.done == nil {
		r.done = func(error) {}
	}
	r.ctx = ctx
	r.weight = min(r.records, c.opts.window)
	if err := c.win.acquire(ctx, r.weight); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		c.win.release(r.weight)
		return nil, ErrClosed
	}
	if cur := c.sess.Load().version; r.version > cur {
		// A reconnect to a version-1 daemon came between the encoding and
		// now (and has re-encoded the queue already).
		f, err := downgrade(r.frame)
		if err != nil {
			c.mu.Unlock()
			c.win.release(r.weight)
			return nil, fmt.Errorf("client: %w", ErrUnsupported)
		}
		r.frame, r.version = f, cur
	}
	c.nextID++
	r.id = c.nextID
	putRequestID(r.frame, r.id)
	c.pending[r.id] = r
	c.queue = append(c.queue, r)
	c.mu.Unlock()
	c.signal()
	return r, nil
}

// Repush pushes again the records of an *OutcomeUnknownError under the
// same producer id and sequence numbers, so that the daemon stores them
// under the ids of the copy it may hold already, and waits for the answer
// as Push does. c must push as the same Producer (the Client that gave
// the error, or one made WithProducer of its Producer). Like any resend,
// it is retried after Overloaded answers while ctx lives, and may end in
// another *OutcomeUnknownError. Records from a version-1 connection have
// no producer identity and cannot be pushed again as the same records.
func (c *Client) Repush(ctx context.Context, e *OutcomeUnknownError) error {
	if e == nil || e.frame == nil {
		return errors.New("client: repush: not an error of this client library's push")
	}
	if e.version < wire.Version2 {
		return errors.New("client: repush: records pushed with wire version 1 have no producer identity to keep")
	}
	if e.Producer != c.prod.id {
		return fmt.Errorf("client: repush: records of producer %x on a client of producer %x", e.Producer[:], c.prod.id[:])
	}
	res := make(chan error, 1)
	r, err := c.enqueue(ctx, &request{frame: slices.Clone(e.frame), version: e.version, records: e.Records,
		firstSeq: e.FirstSeq, uncertain: true, done: func(err error) { res <- err }})
	if err != nil {
		return err
	}
	return c.wait(ctx, r, res)
}

// putRequestID writes id into an encoded push frame.
func putRequestID(frame []byte, id uint64) {
	binary.BigEndian.PutUint64(frame[wire.HeaderSize:], id)
}

func (c *Client) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Close stops accepting pushes and waits, up to ctx, for every request in
// flight to be answered (redialing if it has to). Requests still
// unanswered when ctx ends are failed with ErrClosed and Close returns an
// error wrapping ctx's. Either way the connection is closed and all of the
// client's goroutines have exited when Close returns. Calling Close again
// returns ErrClosed.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return ErrClosed
	}
	c.closing = true
	if len(c.pending) == 0 {
		close(c.drained)
	}
	c.mu.Unlock()
	c.win.close()

	var err error
	select {
	case <-c.drained:
	case <-ctx.Done():
		failed := c.failAll(ErrClosed)
		if failed > 0 {
			err = fmt.Errorf("client: close: %d requests unanswered: %w", failed, ctx.Err())
		}
	}
	close(c.kill)
	c.stop()
	c.wg.Wait()
	return err
}

// failAll completes every pending request with err — wrapped in an
// *OutcomeUnknownError for those the daemon may have stored.
func (c *Client) failAll(err error) int {
	c.mu.Lock()
	reqs := make([]*request, 0, len(c.pending))
	for id, r := range c.pending {
		reqs = append(reqs, r)
		delete(c.pending, id)
	}
	c.queue = nil
	c.takeHeldLocked()
	c.noteDrainedLocked()
	slices.SortFunc(reqs, func(a, b *request) int { return compareID(a.id, b.id) })
	errs := make([]error, len(reqs))
	for i, r := range reqs {
		errs[i] = err
		if r.maybeStored() {
			errs[i] = c.unknown(r, err, nil)
		}
	}
	c.mu.Unlock()
	for i, r := range reqs {
		c.win.release(r.weight)
		r.done(errs[i])
	}
	return len(reqs)
}

func compareID(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (c *Client) noteDrainedLocked() {
	if c.closing && len(c.pending) == 0 {
		select {
		case <-c.drained:
		default:
			close(c.drained)
		}
	}
}

// complete finishes the request with id, if it is still pending.
func (c *Client) complete(id uint64, err error) bool {
	c.mu.Lock()
	r, ok := c.pending[id]
	if ok {
		delete(c.pending, id)
		c.noteDrainedLocked()
	}
	c.mu.Unlock()
	if !ok {
		return false
	}
	c.win.release(r.weight)
	r.done(err)
	return true
}

// run owns the connection: it serves one connection at a time and redials
// with backoff when one breaks, until Close.
func (c *Client) run(conn net.Conn, sess session) {
	defer c.wg.Done()
	attempt := 0
	for {
		answered := c.serve(conn, sess)
		select {
		case <-c.kill:
			return
		default:
		}
		if answered {
			attempt = 0
		}
		conn = nil
		for conn == nil {
			if !c.sleep(c.backoff(attempt)) {
				return
			}
			attempt++
			var err error
			conn, sess, err = c.connect(c.life)
			if err != nil {
				c.log.Warn("weir client: redial failed", "addr", c.ep.address, "attempt", attempt, "err", err)
			}
		}
		c.log.Info("weir client: reconnected", "addr", c.ep.address, "attempt", attempt)
	}
}

// backoff is the pause before redial attempt n (0-based): capped
// exponential with jitter in [d/2, d].
func (c *Client) backoff(n int) time.Duration {
	return backoff.Policy{Min: c.opts.backoffMin, Max: c.opts.backoffMax}.Jittered(n)
}

// sleep waits d, returning false if the client is killed meanwhile.
func (c *Client) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.kill:
		return false
	}
}

// serve runs a writer and a reader on conn until either fails or the
// client is killed, then closes conn. Every unanswered request is queued
// again, in its original order, for the next connection — unchanged, so
// its records keep their sequence numbers and event time. It reports
// whether the connection carried at least one response.
func (c *Client) serve(conn net.Conn, sess session) bool {
	c.sess.Store(&sess)
	c.mu.Lock()
	c.gen++
	gen := c.gen
	// Everything unanswered goes out again, oldest first (what waits after
	// an Overloaded Nack among it, still after the pause).
	c.queue = c.queue[:0]
	c.takeHeldLocked()
	for _, r := range c.pending {
		c.queue = append(c.queue, r)
	}
	slices.SortFunc(c.queue, func(a, b *request) int { return compareID(a.id, b.id) })
	resend, records := 0, 0
	for _, r := range c.queue {
		if r.sentGen != 0 {
			// Written on the broken connection, unanswered: the daemon
			// may have stored it, whatever the next answers say.
			r.uncertain = true
			resend++
			records += r.records
		}
	}
	c.resent.Add(uint64(records))
	failed := c.downgradeQueueLocked(sess.version)
	c.mu.Unlock()
	for _, r := range failed {
		c.complete(r.id, &NackError{Code: wire.CodeBadVersion, Message: "the daemon now speaks only wire version 1, which cannot carry these records' metadata"})
	}
	if resend > 0 {
		c.log.Info("weir client: resending unacknowledged requests", "count", resend)
	}
	c.signal()

	errs := make(chan error, 2)
	connDone := make(chan struct{})
	var answered bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		errs <- c.writeLoop(conn, gen, connDone)
	}()
	go func() {
		defer wg.Done()
		var err error
		answered, err = c.readLoop(conn, gen)
		errs <- err
	}()

	var err error
	select {
	case err = <-errs:
	case <-c.kill:
	}
	close(connDone)
	_ = conn.Close()
	wg.Wait()
	if err != nil {
		select {
		case <-c.kill:
		default:
			c.log.Warn("weir client: connection broken", "addr", c.ep.address, "err", err)
		}
	}
	return answered
}

// downgradeQueueLocked re-encodes the queued frames of a version above v
// (requests pushed while the daemon spoke version 2, going to a daemon
// that now speaks only version 1) and takes out of the queue, returning
// them, those that cannot be (records with metadata). Called with mu held.
func (c *Client) downgradeQueueLocked(v uint8) []*request {
	var failed []*request
	q := c.queue[:0]
	for _, r := range c.queue {
		if r.version > v {
			f, err := downgrade(r.frame)
			if err != nil {
				failed = append(failed, r)
				continue
			}
			r.frame, r.version = f, v
		}
		q = append(q, r)
	}
	clear(c.queue[len(q):])
	c.queue = q
	return failed
}

// writeLoop writes queued frames to conn until an error or connDone.
func (c *Client) writeLoop(conn net.Conn, gen uint64, connDone <-chan struct{}) error {
	var batch []*request
	var bufs net.Buffers
	for {
		c.mu.Lock()
		if wait := time.Until(c.pauseUntil); wait > 0 {
			// The daemon asked for a pause (Overloaded): write nothing
			// until it has passed.
			c.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				continue
			case <-connDone:
				t.Stop()
				return nil
			}
		}
		if held := c.takeHeldLocked(); len(held) > 0 {
			// The requests refused Overloaded go first, oldest first.
			slices.SortFunc(held, func(a, b *request) int { return compareID(a.id, b.id) })
			c.queue = append(held, c.queue...)
		}
		batch = append(batch[:0], c.queue...)
		clear(c.queue)
		c.queue = c.queue[:0]
		for _, r := range batch {
			r.sentGen = gen
		}
		c.mu.Unlock()

		if len(batch) == 0 {
			select {
			case <-c.wake:
				continue
			case <-connDone:
				return nil
			}
		}
		bufs = bufs[:0]
		for _, r := range batch {
			bufs = append(bufs, r.frame)
		}
		clear(batch)
		// WriteTo consumes bufs; the frames themselves are untouched.
		w := bufs
		if _, err := w.WriteTo(conn); err != nil {
			return fmt.Errorf("client: write: %w", err)
		}
		clear(bufs)
	}
}

// readLoop reads responses from conn and completes their requests.
func (c *Client) readLoop(conn net.Conn, gen uint64) (answered bool, err error) {
	br := bufio.NewReaderSize(conn, 16<<10)
	for {
		resp, err := wire.ReadResponse(br)
		if err != nil {
			var pe *wire.ProtocolError
			if errors.As(err, &pe) && !pe.Fatal {
				c.log.Warn("weir client: skipped a response", "err", err)
				continue
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // the daemon hung up
			}
			return answered, fmt.Errorf("client: read: %w", err)
		}
		answered = true
		id := resp.RequestID
		if id == 0 && resp.Type == wire.TypeNack {
			// Refused before its id was read: responses come in order,
			// so it is the oldest request written on this connection.
			id = c.oldestSent(gen)
		}
		var result error
		switch resp.Type {
		case wire.TypeNack:
			var settled bool
			if result, settled = c.nacked(id, newNackError(resp.Code, resp.Message)); !settled {
				continue
			}
		case wire.TypeHelloAck:
			c.log.Warn("weir client: unexpected HelloAck")
			continue
		}
		if !c.complete(id, result) {
			c.log.Warn("weir client: response for an unknown request", "id", resp.RequestID, "type", resp.Type)
		}
	}
}

// nacked decides what the Nack ne means for the request with id. An
// Overloaded one keeps the request, to be sent again after a pause
// (settled false), unless the retries of a request never stored are used
// up (ErrOverloaded), or, for an uncertain request, its ctx has ended
// (an *OutcomeUnknownError). Other Nacks settle the request: with ne
// itself, but a retryable one to an uncertain request says nothing of
// the copy stored earlier, and gives an *OutcomeUnknownError.
func (c *Client) nacked(id uint64, ne *NackError) (result error, settled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.pending[id]
	switch {
	case !ok:
		return ne, true
	case ne.Code != wire.CodeOverloaded:
		if r.uncertain && ne.Code.Retryable() {
			return c.unknown(r, ne, ne), true
		}
		return ne, true
	case r.uncertain:
		// Retried until settled, whatever WithOverloadRetries says:
		// handing it back as refused would be a lie.
		if err := r.ctx.Err(); err != nil {
			return c.unknown(r, err, ne), true
		}
	case c.opts.overloadRetries >= 0 && r.overloads >= c.opts.overloadRetries:
		return ne, true
	}
	r.overloads++
	r.sentGen = 0 // no answer is due on this connection
	c.held = append(c.held, r)
	if r.uncertain {
		r.unwatch = context.AfterFunc(r.ctx, func() { c.abandon(r, ne) })
	}
	if until := time.Now().Add(c.overloadDelay(ne.RetryAfter, r.overloads)); until.After(c.pauseUntil) {
		c.pauseUntil = until
	}
	c.overloadRetried.Add(1)
	c.signal()
	return nil, false
}

// takeHeldLocked empties held and returns what it held, its watches on
// ctx stopped. Called with mu held.
func (c *Client) takeHeldLocked() []*request {
	held := c.held
	c.held = nil
	for _, r := range held {
		if r.unwatch != nil {
			r.unwatch()
			r.unwatch = nil
		}
	}
	return held
}

// abandon gives up on r, an uncertain request held after the Overloaded
// answer last, when its ctx ends during the pause: it fails with an
// *OutcomeUnknownError. A request no longer held (sent again meanwhile)
// is left to its answer.
func (c *Client) abandon(r *request, last error) {
	c.mu.Lock()
	i := slices.Index(c.held, r)
	if i < 0 || c.pending[r.id] != r {
		c.mu.Unlock()
		return
	}
	c.held = slices.Delete(c.held, i, i+1)
	r.unwatch = nil
	delete(c.pending, r.id)
	c.noteDrainedLocked()
	err := c.unknown(r, r.ctx.Err(), last)
	c.mu.Unlock()
	c.win.release(r.weight)
	r.done(err)
}

// overloadDelay is the pause after the n-th Overloaded answer (from 1) in
// a row to one request with the retry-after hint d: d, doubled for each
// further one, plus up to half again of jitter, capped by
// WithOverloadMaxDelay.
func (c *Client) overloadDelay(d time.Duration, n int) time.Duration {
	if d <= 0 {
		d = c.opts.backoffMin
	}
	base := backoff.Policy{Min: d, Max: c.opts.overloadMax}.Delay(n - 1)
	return min(base+rand.N(base/2+1), c.opts.overloadMax)
}

// oldestSent is the id of the oldest pending request written on
// connection gen, or 0.
func (c *Client) oldestSent(gen uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var oldest uint64
	for id, r := range c.pending {
		if r.sentGen == gen && (oldest == 0 || id < oldest) {
			oldest = id
		}
	}
	return oldest
}
