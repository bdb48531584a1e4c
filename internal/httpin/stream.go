package httpin

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/wab"
)

// RouteStream is the WebSocket route (docs/http.md, Streaming).
const RouteStream = "/v1/stream"

// DefaultStreamInflightBytes is Options.StreamInflightBytes' default.
const DefaultStreamInflightBytes = 8 << 20

// StreamMessage is a message a client sends on /v1/stream: a batch of
// record objects whose first record has sequence number Seq, the next
// Seq+1, and so on, in the tier Durability.
type StreamMessage struct {
	Seq        *uint64         `json:"seq"`
	Durability string          `json:"durability,omitempty"`
	EventTime  json.RawMessage `json:"event_time,omitempty"`
	Records    json.RawMessage `json:"records"`
}

// StreamHello is the server's first message: the connection's producer
// id (the one asked for, or a fresh one) and the largest message.
type StreamHello struct {
	Producer        string `json:"producer"`
	MaxMessageBytes int64  `json:"max_message_bytes"`
}

// StreamAck answers one message, once its tier's promise holds for every
// record of it (IDs), or refuses it whole (Error).
type StreamAck struct {
	Seq     uint64       `json:"seq"`
	Records int          `json:"records,omitempty"`
	IDs     []string     `json:"ids,omitempty"`
	Error   *problemBody `json:"error,omitempty"`
}

// streamSet tracks the open streams, which the HTTP server's Shutdown
// neither waits for nor closes (they are hijacked connections).
type streamSet struct {
	mu    sync.Mutex
	stop  context.Context // ends: stop reading, answer, close
	halt  context.CancelFunc
	wg    sync.WaitGroup
	conns map[*websocket.Conn]bool
	done  bool
}

func newStreamSet() *streamSet {
	ctx, cancel := context.WithCancel(context.Background())
	return &streamSet{stop: ctx, halt: cancel, conns: map[*websocket.Conn]bool{}}
}

func (s *streamSet) add(c *websocket.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return false
	}
	s.conns[c] = true
	s.wg.Add(1)
	return true
}

func (s *streamSet) remove(c *websocket.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// close stops every stream reading; each answers what it read and
// closes. Streams still open when ctx ends are cut.
func (s *streamSet) close(ctx context.Context) error {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	s.halt()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	for c := range s.conns {
		c.CloseNow()
	}
	s.mu.Unlock()
	<-done
	return fmt.Errorf("http streams: cut at the shutdown deadline: %w", ctx.Err())
}

// stream serves GET /v1/stream: a WebSocket whose messages are batches of
// records (StreamMessage), each answered by a StreamAck once durable.
func (in *Ingress) stream(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if p := in.authorize(r); p != nil {
		in.refuse(w, RouteStream, start, p)
		return
	}
	producer, p := streamProducer(r.URL.Query().Get("producer"))
	if p != nil {
		in.refuse(w, RouteStream, start, p)
		return
	}
	set := in.streamSet()
	if !in.ready.Load() || set == nil {
		in.refuse(w, RouteStream, start, problem(ReasonNotReady, "the daemon is not serving (starting or shutting down)"))
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		in.opts.Observer.Request(RouteStream, http.StatusBadRequest, time.Since(start).Seconds())
		return // Accept answered
	}
	in.opts.Observer.Request(RouteStream, http.StatusSwitchingProtocols, time.Since(start).Seconds())
	if !set.add(c) {
		c.Close(websocket.StatusGoingAway, "shutting down")
		return
	}
	defer set.remove(c)
	c.SetReadLimit(in.opts.MaxBodyBytes)
	s := &streamConn{in: in, c: c, producer: producer, out: make(chan any, 64), freed: make(chan struct{}, 1)}
	s.run(set.stop)
}

// streamProducer reads the producer query parameter: 32 hex digits, or
// empty for a fresh producer id.
func streamProducer(q string) (record.ProducerID, *Problem) {
	if q == "" {
		return freshProducer(), nil
	}
	var p record.ProducerID
	if b, err := hex.DecodeString(q); err != nil || len(b) != len(p) {
		return p, problem(ReasonBadRequest, "producer=%q: 32 hex digits", q)
	} else {
		copy(p[:], b)
	}
	return p, nil
}

// streamConn is one stream: a reader that holds each message in the
// budget and submits it, a goroutine per message waiting for its Done,
// and a writer of the answers.
type streamConn struct {
	in       *Ingress
	c        *websocket.Conn
	producer record.ProducerID
	out      chan any
	freed    chan struct{} // cap 1: in-flight bytes went down
	pending  sync.WaitGroup

	mu       sync.Mutex
	inflight int64
	stopping bool // no more submits or answers from the reader
}

// run serves the stream until the client closes it or stop ends: then
// the reader submits nothing more, every message submitted is answered,
// and the stream is closed (going away, at a stop: the client resends
// what has no answer).
func (s *streamConn) run(stop context.Context) {
	o := &s.in.opts
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	writerDone := make(chan struct{})
	go func() { defer close(writerDone); s.writeLoop(ctx) }()
	s.out <- StreamHello{Producer: hex.EncodeToString(s.producer[:]), MaxMessageBytes: o.MaxBodyBytes}

	type end struct {
		status websocket.StatusCode
		why    string
	}
	readerDone := make(chan end, 1)
	go func() {
		st, why := s.readLoop(ctx, stop)
		readerDone <- end{st, why}
	}()
	e := end{websocket.StatusGoingAway, "shutting down"}
	readerEnded := false
	select {
	case e = <-readerDone:
		readerEnded = true
	case <-stop.Done():
	}
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.pending.Wait() // every message submitted is answered
	s.mu.Lock()
	close(s.out)
	s.mu.Unlock()
	<-writerDone
	// The close handshake waits for the client's close frame: at most
	// streamCloseWait, then the connection is cut.
	closed := make(chan struct{})
	go func() { defer close(closed); s.c.Close(e.status, e.why) }()
	select {
	case <-closed:
	case <-time.After(streamCloseWait):
		s.c.CloseNow()
		<-closed
	}
	if !readerEnded {
		s.c.CloseNow()
		<-readerDone
	}
}

// streamCloseWait bounds a stream's close handshake.
const streamCloseWait = time.Second

// readLoop reads messages until the stream fails or is closed; it stops
// reading while the stream's unanswered messages hold
// StreamInflightBytes or flow control sheds load, and once stopping it
// reads only to discard (the close handshake goes through the reader).
func (s *streamConn) readLoop(ctx, stop context.Context) (websocket.StatusCode, string) {
	o := &s.in.opts
	for {
		if stop.Err() == nil {
			s.waitRoom(stop)
		}
		_, rd, err := s.c.Reader(ctx)
		if err != nil {
			return websocket.StatusNormalClosure, ""
		}
		if stop.Err() != nil {
			_, _ = io.Copy(io.Discard, rd) // unanswered: the client resends it
			continue
		}
		received := time.Now().UnixNano()
		h := flow.NewHold(o.Budget)
		body, raw, p := readBody(rd, "", 0, bodyLimits{maxDecoded: o.MaxBodyBytes, wait: o.AdmissionWait}, h)
		if p != nil {
			h.Release()
			return websocket.StatusPolicyViolation, closeReason(p)
		}
		m, recs, p := s.decode(body, h)
		if m.Seq == nil {
			h.Release()
			if p == nil {
				p = problem(ReasonDecode, "a message needs seq")
			}
			return websocket.StatusInvalidFramePayloadData, closeReason(p)
		}
		seq := *m.Seq
		var st stored
		if p == nil {
			st, p = s.in.store(h, s.producer, true, seq, recs, received)
		}
		if p != nil {
			h.Release()
			o.Observer.Refused(string(p.Reason))
			s.answer(StreamAck{Seq: seq, Error: ackProblem(p, o.RetryAfter)})
			continue
		}
		d := wab.Durable
		if m.Durability == "buffered" {
			d = wab.Buffered
		}
		n := h.N()
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			h.Release()
			continue
		}
		s.inflight += n
		s.pending.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.pending.Done()
			defer s.release(h, n)
			if p := s.in.submit(ctx, s.producer, true, d, st, received); p != nil {
				o.Observer.Refused(string(p.Reason))
				s.out <- StreamAck{Seq: seq, Error: ackProblem(p, o.RetryAfter)}
				return
			}
			o.Observer.Received(int(raw), len(recs))
			ack := StreamAck{Seq: seq, Records: len(recs), IDs: make([]string, len(st.ids))}
			for i, id := range st.ids {
				ack.IDs[i] = id.String()
			}
			s.out <- ack
		}()
	}
}

// answer queues a refusal the reader made, unless the stream is stopping
// (its answers channel may be closed then).
func (s *streamConn) answer(a StreamAck) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopping {
		s.out <- a
	}
}

// decode reads a message; a Problem with m.Seq set refuses the message
// alone, one without closes the stream.
func (s *streamConn) decode(body []byte, h *flow.Hold) (StreamMessage, []rec, *Problem) {
	o := &s.in.opts
	var m StreamMessage
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(&m); err != nil {
		return StreamMessage{}, nil, problem(ReasonDecode, "not a stream message: %v", err)
	}
	if m.Seq == nil {
		return m, nil, nil
	}
	switch m.Durability {
	case "", "durable", "buffered":
	default:
		return m, nil, problem(ReasonBadRequest, "durability %q: durable or buffered", m.Durability)
	}
	if p := hold(h, int64(len(body)), o.AdmissionWait); p != nil {
		return m, nil, p
	}
	recs, p := decodeArray(m.Records, decodeLimits{maxRecords: o.MaxRecords, maxRecordBytes: o.MaxRecordBytes})
	if p != nil {
		return m, nil, p
	}
	if *m.Seq > math.MaxUint64-uint64(len(recs)-1) {
		return m, nil, problem(ReasonBadRequest, "seq %d: the message's sequence numbers would wrap", *m.Seq)
	}
	if len(m.EventTime) > 0 {
		t, err := parseEventTimeJSON(m.EventTime)
		if err != nil {
			return m, nil, problem(ReasonBadRequest, "event_time: %v", err)
		}
		for i := range recs {
			if recs[i].eventTime == 0 {
				recs[i].eventTime = t
			}
		}
	}
	return m, recs, nil
}

// waitRoom returns once the stream may read another message — its
// unanswered messages hold less than StreamInflightBytes and flow control
// does not shed load — or ctx ends.
func (s *streamConn) waitRoom(ctx context.Context) {
	o := &s.in.opts
	for {
		s.mu.Lock()
		full := s.inflight >= o.StreamInflightBytes
		s.mu.Unlock()
		throttled := o.Throttle != nil && o.Throttle.Throttled()
		if !full && !throttled {
			return
		}
		var retry <-chan time.Time
		if throttled {
			t := time.NewTimer(o.RetryAfter)
			defer t.Stop()
			retry = t.C
		}
		select {
		case <-ctx.Done():
			return
		case <-s.freed:
		case <-retry:
		}
	}
}

// release gives an answered message's memory back.
func (s *streamConn) release(h *flow.Hold, n int64) {
	h.Release()
	s.mu.Lock()
	s.inflight -= n
	s.mu.Unlock()
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// writeLoop writes the answers; after a failed write it drops the rest
// (the client will resend what it has no answer for).
func (s *streamConn) writeLoop(ctx context.Context) {
	o := &s.in.opts
	failed := false
	for m := range s.out {
		if failed {
			continue
		}
		b, err := json.Marshal(m)
		if err == nil {
			wctx, cancel := context.WithTimeout(ctx, o.WriteTimeout)
			err = s.c.Write(wctx, websocket.MessageText, b)
			cancel()
		}
		if err != nil {
			failed = true
			s.c.CloseNow()
		}
	}
}

// ackProblem is a refused message's error.
func ackProblem(p *Problem, retryAfter time.Duration) *problemBody {
	b := p.body()
	if p.Reason.retryable() {
		b.RetryAfter = max(retryAfter.Milliseconds(), 1)
	}
	return &b
}

// closeReason fits a refusal into a close frame's 123 bytes.
func closeReason(p *Problem) string {
	s := string(p.Reason) + ": " + p.Detail
	if len(s) > 123 {
		s = strings.ToValidUTF8(s[:120], "") + "..."
	}
	return s
}
