// Package tap shows an operator the records passing a point of the
// pipeline (`weir tap`) without slowing the pipeline down.
//
// A Hub holds the node's tap points, one per place records pass: "gate"
// (what the gate took), "source:NAME" (what a source wrote through it),
// "secondary:NAME" (what a secondary acknowledged), "quarantine:NAME"
// (what a lane was given, with the reason code). The code at a point calls
// Active — one atomic load — once per batch, and only when it is true
// builds the records and Offers them.
//
// A Reader subscribes to a point. Each reader has a bounded buffer of
// lines: Offer copies what fits (payloads shortened to PayloadBytes unless
// Full) and drops the rest with a count, so a slow reader, or one that
// never reads, costs the pipeline a copy of what fits and never a wait.
// The lock Offer takes is the reader's own, held by the reader only to
// swap its buffer; a reader whose buffer is full costs a batch two atomic
// adds (the drop counts), without the lock.
package tap

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/weir-io/weir/sink"
)

// Defaults of Options.
const (
	// DefaultBuffer is the lines a reader's buffer holds.
	DefaultBuffer = 4096
	// MaxBuffer bounds Options.Buffer.
	MaxBuffer = 1 << 16
	// DefaultPayloadBytes is how much of a payload (and key) a line
	// shows unless Full.
	DefaultPayloadBytes = 256
)

// Record is a record at a tap point as the pipeline hands it to Offer.
// Its byte slices are the pipeline's: they are read during Offer only.
type Record struct {
	ID    sink.RecordID
	HasID bool // false while the record has no id yet (a v1 producer's, before the buffer places it)
	// Source names where the record came from ("socket" for producers).
	Source    string
	Key       []byte
	Headers   []sink.Header
	EventTime time.Time // zero: none
	// Code, Rule and Error say why a record was refused (quarantine
	// points): the reason code, the contract rule, the error text.
	Code, Rule, Error string
	Payload           []byte
}

// Line is a record as a reader gets it: one line of NDJSON.
type Line struct {
	ID            string    `json:"id,omitempty"`
	Source        string    `json:"source"`
	Key           string    `json:"key,omitempty"`
	KeyBase64     string    `json:"key_base64,omitempty"`
	EventTime     time.Time `json:"event_time,omitzero"`
	Code          string    `json:"code,omitempty"`
	Rule          string    `json:"rule,omitempty"`
	Error         string    `json:"error,omitempty"`
	Bytes         int       `json:"bytes"`
	Payload       string    `json:"payload,omitempty"`
	PayloadBase64 string    `json:"payload_base64,omitempty"`
	Truncated     bool      `json:"truncated,omitempty"`
}

// Observer counts what the hub's readers miss, for metrics.
type Observer interface {
	// Point is called once per point the hub registers. It returns what
	// counts the records offered at the point that found no room in a
	// reader's buffer; it is called on the pipeline's path, so it must
	// be cheap (an atomic add).
	Point(name string) (dropped func(n int))
	// Readers: a reader subscribed (+1) or left (-1).
	Readers(point string, delta int)
}

// ErrUnknownPoint is returned by Subscribe for a point the hub does not
// have.
var ErrUnknownPoint = errors.New("tap: no such tap point")

// Hub is a node's tap points. A nil *Hub has no points, and its Point
// returns nil (never active).
type Hub struct {
	obs    Observer
	mu     sync.Mutex
	points map[string]*Point
}

// NewHub returns a hub; obs may be nil.
func NewHub(obs Observer) *Hub { return &Hub{obs: obs, points: map[string]*Point{}} }

// Point returns the point called name, registering it the first time.
func (h *Hub) Point(name string) *Point {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.points[name]
	if !ok {
		p = &Point{name: name, hub: h, dropped: func(int) {}}
		h.points[name] = p
		if h.obs != nil {
			if d := h.obs.Point(name); d != nil {
				p.dropped = d
			}
		}
	}
	return p
}

// Points are the names of the points, sorted.
func (h *Hub) Points() []string {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	names := make([]string, 0, len(h.points))
	for n := range h.points {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Subscribe adds a reader to the point called name; Close it when done.
func (h *Hub) Subscribe(name string, o Options) (*Reader, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: %q (this node has none)", ErrUnknownPoint, name)
	}
	h.mu.Lock()
	p, ok := h.points[name]
	h.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q (this node has %q)", ErrUnknownPoint, name, h.Points())
	}
	return p.subscribe(o), nil
}

// Point is one place in the pipeline records can be watched at.
type Point struct {
	name    string
	hub     *Hub
	readers atomic.Pointer[[]*Reader] // nil: nobody watches
	mu      sync.Mutex                // serialises changes of readers
	dropped func(n int)               // the observer's count of drops
}

// Name is the point's name.
func (p *Point) Name() string { return p.name }

// Active reports whether anyone watches the point: one atomic load. A
// nil point is never active.
func (p *Point) Active() bool { return p != nil && p.readers.Load() != nil }

// Offer hands n records to every reader of the point: at(i) returns the
// i-th. It never blocks on a reader; what a reader has no room for is
// dropped and counted. Call it only when Active: it is the slow path.
func (p *Point) Offer(n int, at func(i int) Record) {
	if p == nil || n <= 0 {
		return
	}
	rs := p.readers.Load()
	if rs == nil {
		return
	}
	for _, r := range *rs {
		if r.held.Load() >= int64(r.o.Buffer) { // full: count, take no lock, build nothing
			r.dropped.Add(int64(n))
			p.dropped(n)
			continue
		}
		if dropped := r.offer(n, at); dropped > 0 {
			p.dropped(dropped)
		}
	}
}

func (p *Point) subscribe(o Options) *Reader {
	o = o.withDefaults()
	r := &Reader{p: p, o: o, wake: make(chan struct{}, 1), buf: make([]Line, 0, min(o.Buffer, 256))}
	p.mu.Lock()
	var rs []*Reader
	if cur := p.readers.Load(); cur != nil {
		rs = slices.Clone(*cur)
	}
	rs = append(rs, r)
	p.readers.Store(&rs)
	p.mu.Unlock()
	if p.hub.obs != nil {
		p.hub.obs.Readers(p.name, 1)
	}
	return r
}

func (p *Point) unsubscribe(r *Reader) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := p.readers.Load()
	if cur == nil {
		return
	}
	rs := slices.DeleteFunc(slices.Clone(*cur), func(x *Reader) bool { return x == r })
	if len(rs) == len(*cur) {
		return
	}
	if len(rs) == 0 {
		p.readers.Store(nil)
	} else {
		p.readers.Store(&rs)
	}
	if p.hub.obs != nil {
		p.hub.obs.Readers(p.name, -1)
	}
}

// Options configure a reader.
type Options struct {
	// Buffer is the lines held for the reader between its reads
	// (default DefaultBuffer, at most MaxBuffer); records beyond it are
	// dropped and counted.
	Buffer int
	// Full shows whole payloads and keys; otherwise they are cut at
	// PayloadBytes (default DefaultPayloadBytes) and the line says
	// truncated.
	Full         bool
	PayloadBytes int
	// Filter, when not nil, keeps only the records it is true for
	// (Compile). It sees the whole record, payload included; it runs on
	// the pipeline's goroutine, for records that found room.
	Filter func(*Record) bool
}

func (o Options) withDefaults() Options {
	if o.Buffer <= 0 {
		o.Buffer = DefaultBuffer
	}
	o.Buffer = min(o.Buffer, MaxBuffer)
	if o.PayloadBytes <= 0 {
		o.PayloadBytes = DefaultPayloadBytes
	}
	return o
}

// Reader is one subscriber of a point.
type Reader struct {
	p    *Point
	o    Options
	wake chan struct{}

	held    atomic.Int64 // len(buf), for Offer to see a full buffer without the lock
	dropped atomic.Int64

	mu     sync.Mutex
	buf    []Line
	closed bool
}

// offer takes what fits of the n records and returns how many were
// dropped.
func (r *Reader) offer(n int, at func(i int) Record) (dropped int) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return 0
	}
	took := false
	for i := range n {
		if len(r.buf) >= r.o.Buffer {
			dropped = n - i
			r.dropped.Add(int64(dropped))
			break
		}
		rec := at(i)
		if r.o.Filter != nil && !r.o.Filter(&rec) {
			continue
		}
		r.buf = append(r.buf, r.line(&rec))
		took = true
	}
	r.held.Store(int64(len(r.buf)))
	r.mu.Unlock()
	if took {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	return dropped
}

// Next returns the lines held for the reader, waiting for some until
// timeout (or done closes), and the records dropped so far. dst is
// reused for the result when it has room.
//
// The reader's buffer and the result trade places: the lines returned
// are the caller's until it passes them back as dst (cleared), and the
// reader fills dst meanwhile.
func (r *Reader) Next(dst []Line, timeout time.Duration, done <-chan struct{}) (lines []Line, dropped int64) {
	if lines, dropped = r.take(dst); len(lines) > 0 {
		return lines, dropped
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-r.wake:
	case <-t.C:
	case <-done:
	}
	return r.take(lines) // dst is the reader's now: hand it the empty one
}

func (r *Reader) take(dst []Line) ([]Line, int64) {
	r.mu.Lock()
	out := r.buf
	r.buf = dst[:0]
	r.held.Store(0)
	r.mu.Unlock()
	return out, r.dropped.Load()
}

// Dropped is the records dropped for the reader so far.
func (r *Reader) Dropped() int64 { return r.dropped.Load() }

// Close unsubscribes the reader: nothing more is offered to it.
func (r *Reader) Close() {
	r.p.unsubscribe(r)
	r.mu.Lock()
	r.closed = true
	r.buf = nil
	r.mu.Unlock()
}

// line copies what a line shows of rec.
func (r *Reader) line(rec *Record) Line {
	l := Line{Source: rec.Source, EventTime: rec.EventTime, Code: rec.Code, Rule: rec.Rule, Error: rec.Error, Bytes: len(rec.Payload)}
	if rec.HasID {
		l.ID = rec.ID.String()
	}
	limit := r.o.PayloadBytes
	if r.o.Full {
		limit = -1
	}
	var cut bool
	if rec.Key != nil {
		l.Key, l.KeyBase64, cut = show(rec.Key, limit)
		l.Truncated = cut
	}
	l.Payload, l.PayloadBase64, cut = show(rec.Payload, limit)
	l.Truncated = l.Truncated || cut
	return l
}

// show is b as text when it is UTF-8, else as base64, cut at limit bytes
// (limit < 0: whole); cut says whether it was.
func show(b []byte, limit int) (text, b64 string, cut bool) {
	if limit >= 0 && len(b) > limit {
		b, cut = b[:limit], true
		if utf8.Valid(b[:max(0, len(b)-utf8.UTFMax)]) {
			for len(b) > 0 && !utf8.Valid(b) { // a rune cut in two
				b = b[:len(b)-1]
			}
		}
	}
	if utf8.Valid(b) {
		return string(b), "", cut
	}
	return "", base64.StdEncoding.EncodeToString(b), cut
}
