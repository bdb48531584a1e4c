package server

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/wire"
)

// Admission: every push frame reserves the memory the connection will hold
// for it from the node's budget (Options.Budget) before it is submitted,
// and gives it back when the frame has been answered. The reservation is
// exact, not an estimate: the pooled buffer the frame's payloads and
// stored metadata are copied into (its whole capacity), the slices that
// point into it, and a fixed overhead per request (frameMemory).
//
// The budget is one mutex for the whole node; taking it for every frame
// would cost more than the rest of the ack path at a million frames a
// second. So each connection holds credit: bytes taken from the budget in
// chunks (Server.chunk), which its frames use without a lock: one atomic
// add when a frame is admitted (the reader), and one per batch of answers
// written (the writer adds up what it answered and gives it back before it
// flushes, or at once while the reader waits for memory) — the counter is
// written by the reader alone most of the time, so its cache line does not
// travel between the two for every frame. The reader takes more credit
// only when a frame does not fit what the connection holds; the writer
// gives all of it back as soon as the connection holds no frame and it has
// nothing to write. The credit
// is also the connection's byte cap (Options.ConnMaxInflightBytes): a
// connection never holds more, but a single frame larger than the cap is
// let in alone.
//
// The reader may wait for memory — the connection's own frames being
// answered, or its turn at the budget — because acks are written by the
// writer and completions come from the flusher, neither of which waits
// for the reader; it never waits longer than Options.AdmissionWait, and
// answers Overloaded, with the Options.RetryAfter hint, after that. While
// the flow controller is throttling producers (Options.Throttle), frames
// are answered Overloaded at once. A frame that needs more than the whole
// budget is answered FrameTooLarge (it can never be admitted); one that
// needs more than warm-up makes grantable yet is answered Overloaded.

// DefaultConnMaxInflightBytes is Options.ConnMaxInflightBytes' default.
const DefaultConnMaxInflightBytes = 64 << 20

// DefaultRetryAfter is Options.RetryAfter's default.
const DefaultRetryAfter = 100 * time.Millisecond

// Credit chunks: a connection takes credit from the budget in chunks of a
// 512th of the budget, between these bounds (and at most its byte cap).
const (
	minCreditChunk = 64 << 10
	maxCreditChunk = 1 << 20
)

const sliceHeaderSize = int64(unsafe.Sizeof([]byte(nil)))

// pendingOverhead is the memory of one request besides its buffer and its
// record slices: the pending (with its wab.Request), its place in a batch
// hand-off, and the buffer's slice header (see getBuf).
const pendingOverhead = int64(unsafe.Sizeof(pending{})) + 8 + sliceHeaderSize

// frameMemory is what the connection holds for a frame of records records
// whose buffer holds bufBytes (payloads and stored metadata; metas says
// whether there is metadata): see fillRecords.
func frameMemory(records, bufBytes int, metas bool) int64 {
	m := pendingOverhead
	if c := bufClass(bufBytes); c >= 0 {
		m += int64(classSize(c))
	} else {
		m += int64(bufBytes)
	}
	if records > 1 {
		slots := int64(records)
		if metas {
			slots *= 2
		}
		m += slots * sliceHeaderSize
	}
	return m
}

// creditChunk is the size of the chunks connections take credit in from a
// budget of limit bytes, for a byte cap of connCap.
func creditChunk(limit, connCap int64) int64 {
	return min(max(limit/512, minCreditChunk), maxCreditChunk, connCap)
}

// credit is a connection's share of the budget.
type credit struct {
	// held is what the connection has taken from the budget; only
	// holders of mu change it (the reader taking more, the writer or the
	// connection's end giving it back). Read for every frame, written
	// rarely.
	mu   sync.Mutex
	held atomic.Int64
	// waiting is set while the reader waits for memory; the writer then
	// gives back what it answered at once and signals freed (cap 1).
	waiting atomic.Bool
	freed   chan struct{}
	_       [64]byte
	// used is what the connection's unanswered frames reserved (less
	// what the writer answered and has not given back yet): at most
	// held, except for the frame being admitted. The reader adds, the
	// writer subtracts. On a cache line of its own.
	used atomic.Int64
	_    [56]byte
}

// admitState is refill's outcome.
type admitState int

const (
	admitted admitState = iota
	refused
	mustWait
)

// overloaded is the Overloaded answer with the retry-after hint.
func (s *Server) overloaded(reason string) (wire.Code, string) {
	return wire.CodeOverloaded, wire.RetryAfterMessage(s.opts.RetryAfter, reason)
}

// throttled reports whether flow control throttles producers.
func (s *Server) throttled() bool {
	return s.opts.Throttle != nil && s.opts.Throttle.Throttled()
}

// admit reserves n bytes for a frame from the connection's credit, taking
// more from the budget if it must; a non-zero code is the frame's answer
// (nothing is reserved then). Called by the reader.
func (c *conn) admit(n int64) (wire.Code, string) {
	// The common case: the connection holds enough. The writer lowers
	// held only after it has seen used at 0 and then checks used again
	// (returnCredit), so a frame counted in used before held was read
	// is never left without credit.
	if c.cr.used.Add(n) <= c.cr.held.Load() {
		return 0, ""
	}
	return c.admitSlow(n)
}

func (c *conn) admitSlow(n int64) (wire.Code, string) {
	s, cr := c.s, &c.cr
	cr.waiting.Store(true)
	defer cr.waiting.Store(false)
	var ticket *flow.Ticket
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	fail := func(code wire.Code, msg string) (wire.Code, string) {
		if ticket != nil {
			ticket.Cancel() // gives the bytes back if they were granted meanwhile
		}
		cr.used.Add(-n)
		return code, msg
	}
	for {
		if ticket == nil {
			st, t, code, msg := c.refill(n)
			switch st {
			case admitted:
				return 0, ""
			case refused:
				cr.used.Add(-n)
				return code, msg
			}
			ticket = t // nil: wait for this connection's own frames
		}
		if timer == nil {
			if s.opts.AdmissionWait <= 0 || s.throttled() {
				// In critical a frame is admitted only if memory is free
				// at once: nothing waits while the node sheds load.
				return fail(s.overloaded("memory budget exhausted"))
			}
			// Frames decoded but not submitted hold credit too, and only
			// their answers give it back.
			c.flushSubmits()
			timer = time.NewTimer(s.opts.AdmissionWait)
		}
		var granted <-chan struct{}
		if ticket != nil {
			granted = ticket.C
		}
		select {
		case <-granted:
			cr.mu.Lock()
			cr.held.Add(ticket.N())
			cr.mu.Unlock()
			ticket = nil // refill looks again (and finds the frame covered)
		case <-cr.freed:
			if ticket != nil {
				if cr.used.Load() > cr.held.Load() {
					continue // still short: keep the place in line
				}
				ticket.Cancel()
				ticket = nil
			}
		case <-timer.C:
			return fail(s.overloaded(fmt.Sprintf("memory budget exhausted: %d bytes not granted within flow.admission_wait %s", n, s.opts.AdmissionWait)))
		case <-s.stop:
			return fail(wire.CodeShuttingDown, "daemon is shutting down")
		}
	}
}

// refill covers the frame being admitted (n bytes, counted in used) from
// the budget if it can at once: a chunk ahead when the connection's cap
// leaves room, else just what is missing. Otherwise it says to wait: for
// the connection's own frames (no ticket) when the connection is at its
// cap, or in line at the budget (the ticket, for the frame's n bytes —
// the connection first gives back whatever credit its other frames do not
// use, so that connections waiting for memory never hold some back from
// each other).
func (c *conn) refill(n int64) (admitState, *flow.Ticket, wire.Code, string) {
	s, cr, b := c.s, &c.cr, c.s.opts.Budget
	cr.mu.Lock()
	defer cr.mu.Unlock()
	used, held := cr.used.Load(), cr.held.Load()
	short := used - held
	if short <= 0 {
		return admitted, nil, 0, ""
	}
	others := used - n
	if others > 0 && used > s.opts.ConnMaxInflightBytes {
		return mustWait, nil, 0, ""
	}
	if want := min(max(short, s.chunk), s.opts.ConnMaxInflightBytes-held); want > short {
		if ok, _ := b.TryAcquire(want); ok {
			cr.held.Add(want)
			return admitted, nil, 0, ""
		}
	}
	ok, err := b.TryAcquire(short)
	if ok {
		cr.held.Add(short)
		return admitted, nil, 0, ""
	}
	if err == nil {
		if spare := held - others; spare > 0 {
			cr.held.Add(-spare)
			b.Release(spare)
		}
		var t *flow.Ticket
		if t, err = b.Reserve(n); err == nil {
			return mustWait, t, 0, ""
		}
	}
	// Larger than what the budget grants at all (or, warming up, yet).
	code, msg := s.oversize(n)
	return refused, nil, code, msg
}

// oversize answers a frame of n bytes the budget refused as larger than
// it can grant: FrameTooLarge when it exceeds the whole budget (it never
// fits), Overloaded while warm-up has not made that much grantable yet.
func (s *Server) oversize(n int64) (wire.Code, string) {
	st := s.opts.Budget.Stats()
	if n > st.Limit {
		return wire.CodeFrameTooLarge, fmt.Sprintf("frame needs %d bytes of memory, more than the daemon's memory_budget of %d", n, st.Limit)
	}
	return s.overloaded(fmt.Sprintf("memory budget warming up: frame needs %d bytes, %d grantable so far", n, st.Grantable))
}

// release gives back the n bytes of answered frames. Called by the
// writer (see writeLoop's answered), or at a forced shutdown.
func (c *conn) release(n int64) {
	if n == 0 {
		return
	}
	c.cr.used.Add(-n)
	if c.cr.waiting.Load() {
		select {
		case c.cr.freed <- struct{}{}:
		default:
		}
	}
}

// returnCredit gives the connection's credit back to the budget if it
// holds no frame. Called by the writer when it has nothing to write.
func (c *conn) returnCredit() {
	cr := &c.cr
	if cr.held.Load() == 0 || cr.used.Load() != 0 {
		return
	}
	cr.mu.Lock()
	defer cr.mu.Unlock()
	h := cr.held.Load()
	if h == 0 {
		return
	}
	// Lower held first, then look at used again: a frame the reader
	// counted meanwhile either saw the lower held (and waits for mu) or
	// is seen here, and the credit stays.
	cr.held.Store(0)
	if cr.used.Load() != 0 {
		cr.held.Store(h)
		return
	}
	c.s.opts.Budget.Release(h)
}

// closeCredit gives back everything the connection holds; the reader and
// the writer have finished.
func (c *conn) closeCredit() {
	cr := &c.cr
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if h := cr.held.Swap(0); h > 0 {
		c.s.opts.Budget.Release(h)
	}
}
