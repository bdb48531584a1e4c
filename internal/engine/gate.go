package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/tap"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/source"
	"github.com/weir-io/weir/wab"
)

// Defaults for GateOptions.
const (
	// DefaultGateMaxRequestRecords bounds the records of one buffer request.
	DefaultGateMaxRequestRecords = 1024
	// DefaultGateMaxRequestBytes bounds the encoded size of one buffer
	// request, so that a large Write does not produce a segment much larger
	// than the buffer's SegmentMaxBytes.
	DefaultGateMaxRequestBytes int64 = 4 << 20
	// DefaultGateQueueWait is how long a request waits for room in a full
	// shard queue before Write gives up with wab.ErrQueueTimeout.
	DefaultGateQueueWait = 5 * time.Second
)

// GateOptions configure NewWABGate. A zero field takes its default.
type GateOptions struct {
	// MaxRequestRecords and MaxRequestBytes bound each buffer request a
	// Write is split into (defaults DefaultGateMaxRequestRecords,
	// DefaultGateMaxRequestBytes). A single record larger than
	// MaxRequestBytes travels in a request of its own.
	MaxRequestRecords int
	MaxRequestBytes   int64
	// MaxRecordBytes must match the buffer's Options.MaxRecordBytes
	// (default wab.DefaultMaxRecordBytes). Write checks every payload
	// against it before submitting anything: a larger record, like one
	// whose key and headers encode to more than wab.MaxMetaBytes less
	// record.RejectionRoom, is one the buffer cannot hold (see
	// Quarantine).
	MaxRecordBytes int
	// Quarantine is the rejection lane for the records the buffer cannot
	// hold, and for those their source could not decode
	// (source.Record.Undecodable: reason code decode). Write stores them
	// there — reason code oversize, stage gate,
	// component Name, one attempt — and only once the lane has made them
	// durable submits the rest, so that a source may move its position
	// past them: a rejected record is never nowhere. A lane that cannot
	// take them fails the Write (the source writes again). Nil: such a
	// record fails the whole Write with wab.ErrRecordTooLarge and nothing of
	// it is written.
	Quarantine lane.Lane
	// Name labels the records Write quarantines (their lane and
	// component); empty means "buffer".
	Name string
	// Observer counts the records Write quarantines; nil discards.
	Observer GateObserver
	// QueueWait: see DefaultGateQueueWait.
	QueueWait time.Duration
	// Tap is shown every record as it enters the gate — a Write's
	// records (those the buffer can hold) before they are submitted, a
	// producer's request (Submit, SubmitInline, SubmitBatch) before it is
	// queued — and QuarantineTap the records the rejection lane took
	// (weir tap; nil: none). Each costs a batch one atomic load while
	// nobody watches.
	Tap, QuarantineTap *tap.Point
}

// GateObserver sees the records a gate quarantines, for metrics.
type GateObserver interface {
	// GateQuarantined: records stored in the gate's quarantine, once per
	// reason code among them.
	GateQuarantined(code record.Code, records int)
}

func (o GateOptions) withDefaults() GateOptions {
	if o.MaxRequestRecords <= 0 {
		o.MaxRequestRecords = DefaultGateMaxRequestRecords
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = DefaultGateMaxRequestBytes
	}
	if o.MaxRecordBytes <= 0 {
		o.MaxRecordBytes = wab.DefaultMaxRecordBytes
	}
	if o.QueueWait <= 0 {
		o.QueueWait = DefaultGateQueueWait
	}
	if o.Name == "" {
		o.Name = "buffer"
	}
	return o
}

// ErrUndecodable is returned (wrapped) by a gate's Write given a record
// its source could not decode (source.Record.Undecodable) when the gate
// has no rejection lane to keep it.
var ErrUndecodable = errors.New("engine: a record the source could not decode, and no rejection lane to keep it")

// ErrGate wraps every error WABGate.Write returns, next to the cause
// (a wab error such as wab.ErrShardFailed, wab.ErrQueueTimeout,
// wab.ErrRecordTooLarge or wab.ErrClosed, the rejection lane's error, or
// the context's error).
var ErrGate = errors.New("engine: gate write failed")

// WABGate is the gate of a pipeline with a write-ahead buffer: Write
// returns once every record is fdatasynced in a segment whose directory
// entry is durable (the buffer's Durable tier).
//
// Placement: all records of one source go to one shard, chosen by a hash
// of the source's name. A source's records then sit in one shard in the
// order it read them, so the drain delivers them in that order, and one
// Write costs one group-committed fdatasync instead of one per shard. Many
// sources spread over the shards by their names. A source that needs more
// than one shard's throughput should be split into several named instances
// (one per partition set).
type WABGate struct {
	log  *wab.Log
	opts GateOptions
}

var _ source.Gate = (*WABGate)(nil)

// NewWABGate returns a gate writing to log.
func NewWABGate(log *wab.Log, opts GateOptions) (*WABGate, error) {
	if log == nil {
		return nil, errors.New("engine: NewWABGate: nil log")
	}
	return &WABGate{log: log, opts: opts.withDefaults()}, nil
}

// Shards, ShardErr, Submit, SubmitInline and SubmitBatch expose the
// buffer itself to a source that submits requests of its own — the socket
// ingress, whose producers choose a durability tier per request and are
// answered per request, not per Write. Such a source still writes only
// through this gate's buffer.

// Shards is the buffer's shard count.
func (g *WABGate) Shards() int { return g.log.Shards() }

// ShardErr is the sticky error of a shard (nil while it accepts).
func (g *WABGate) ShardErr(shard int) error { return g.log.ShardErr(shard) }

// Submit queues one request on a shard, waiting at most wait for room.
func (g *WABGate) Submit(ctx context.Context, shard int, req *wab.Request, wait time.Duration) error {
	if g.opts.Tap.Active() {
		g.opts.Tap.OfferBuffered(req.Payloads, req.Metas)
	}
	return g.log.Submit(ctx, shard, req, wait)
}

// SubmitInline is Submit, or, on an idle shard, writes the request at once
// on the caller's goroutine (wab.Log.SubmitInline).
func (g *WABGate) SubmitInline(ctx context.Context, shard int, req *wab.Request, wait time.Duration) error {
	if g.opts.Tap.Active() {
		g.opts.Tap.OfferBuffered(req.Payloads, req.Metas)
	}
	return g.log.SubmitInline(ctx, shard, req, wait)
}

// SubmitBatch queues several requests on a shard in one hand-off
// (wab.Log.SubmitBatch; server.BatchBackend).
func (g *WABGate) SubmitBatch(ctx context.Context, shard int, reqs []*wab.Request, wait time.Duration) error {
	if g.opts.Tap.Active() {
		for _, req := range reqs {
			g.opts.Tap.OfferBuffered(req.Payloads, req.Metas)
		}
	}
	return g.log.SubmitBatch(ctx, shard, reqs, wait)
}

// ShardFor is the shard a source's records are written to.
func (g *WABGate) ShardFor(sourceName string) int {
	h := fnv.New32a()
	h.Write([]byte(sourceName))
	return int(h.Sum32() % uint32(g.log.Shards()))
}

// Write submits recs under the Durable tier, each with its metadata as
// Meta (record.Meta: id, source, key, headers, event time = Record.Time,
// origin position), and returns nil once every request has been
// acknowledged. A record the buffer cannot hold (GateOptions.MaxRecordBytes,
// wab.MaxMetaBytes) is stored in the rejection lane first
// (GateOptions.Quarantine), or fails the Write when there is none. On any
// error none of recs may be considered durable (some may be; written again
// they are deduplicated by id, and a rejected record is quarantined again).
//
// The buffer keeps referring to the payloads, keys and header values
// until the requests are finished, which may be after Write returned early
// because ctx ended: a caller must not reuse their memory after passing
// them to Write.
func (g *WABGate) Write(ctx context.Context, recs []source.Record) error {
	if len(recs) == 0 {
		return nil
	}
	arena := getMetaArena(recs)
	reqs, over, err := g.split(recs, arena)
	if err == nil && len(over) > 0 {
		err = g.reject(ctx, recs, over)
	}
	if err != nil {
		putMetaArena(arena)
		return err
	}
	if g.opts.Tap.Active() {
		offerRecords(g.opts.Tap, recs, over)
	}
	return g.submit(ctx, reqs, arena)
}

// offerRecords shows a Write's records at p but those over names.
func offerRecords(p *tap.Point, recs []source.Record, over []gateRefusal) {
	keep := recs
	if len(over) > 0 {
		keep = make([]source.Record, 0, len(recs)-len(over))
		for i := range recs {
			if !slices.ContainsFunc(over, func(o gateRefusal) bool { return o.index == i }) {
				keep = append(keep, recs[i])
			}
		}
	}
	p.Offer(len(keep), func(i int) tap.Record { return tap.FromSource(&keep[i]) })
}

// submit submits the requests and waits for their answers; the arena goes
// back to the pool once the buffer no longer reads it.
func (g *WABGate) submit(ctx context.Context, reqs []shardReq, arena *[]byte) error {
	done := make(chan error, len(reqs))
	submitted := 0
	var firstErr error
	for _, r := range reqs {
		r.req.Done = func(err error) { done <- err }
		if err := g.log.Submit(ctx, r.shard, r.req, g.opts.QueueWait); err != nil {
			firstErr = fmt.Errorf("%w: submit to shard %d: %w", ErrGate, r.shard, err)
			break
		}
		submitted++
	}
	for ; submitted > 0; submitted-- {
		select {
		case err := <-done:
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("%w: %w", ErrGate, err)
			}
		case <-ctx.Done():
			return g.settle(done, submitted, firstErr, ctx.Err(), arena)
		}
	}
	putMetaArena(arena)
	return firstErr
}

// settleWait bounds how long a Write whose context ended waits for the
// requests it already submitted.
const settleWait = 2 * time.Second

// settle is Write's end when its context ended with n submitted requests
// unanswered. The flusher is still writing them (sources stop before the
// buffer closes), so it waits for them a little: when they all become
// durable, Write returns nil and a source stopping cleanly commits the
// position of a batch that is in the buffer, instead of reading it again
// at the next start. Otherwise it returns the first error, or ctx's.
func (g *WABGate) settle(done <-chan error, n int, firstErr, ctxErr error, arena *[]byte) error {
	t := time.NewTimer(settleWait)
	defer t.Stop()
	for ; n > 0; n-- {
		select {
		case err := <-done:
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("%w: %w", ErrGate, err)
			}
		case <-t.C:
			// The buffer may still read the metas: leave the arena to
			// the garbage collector.
			if firstErr == nil {
				firstErr = fmt.Errorf("%w: %w", ErrGate, ctxErr)
			}
			return firstErr
		}
	}
	putMetaArena(arena)
	return firstErr
}

// gateRefusal is a record of a Write the gate does not write, and why: one
// the buffer cannot hold (code zero: oversize), or one its source could
// not decode (source.Record.Undecodable: decode).
type gateRefusal struct {
	index int
	code  record.Code
	why   string
}

// refusal is why a gate refuses recs[i] before anything else: its
// source could not decode it. ok is false for a record to write.
func refusal(r *source.Record, i int) (o gateRefusal, ok bool) {
	if r.Undecodable == "" {
		return gateRefusal{}, false
	}
	return gateRefusal{index: i, code: record.CodeDecode, why: r.Undecodable}, true
}

// tooLarge checks r, the i-th record of a Write, whose encoded meta is
// metaLen bytes, against the buffer's limits: "" when it fits, else why
// not.
func (g *WABGate) tooLarge(r *source.Record, metaLen int) string {
	if n := len(r.Payload); n > g.opts.MaxRecordBytes {
		return fmt.Sprintf("payload of %d bytes, limit %d", n, g.opts.MaxRecordBytes)
	}
	// The buffer holds wab.MaxMetaBytes; what it keeps must leave room for
	// a rejection, or a sink's refusal of the record could not be
	// dead-lettered.
	if limit := wab.MaxMetaBytes - record.RejectionRoom; metaLen > limit {
		return fmt.Sprintf("metadata (key and headers) of %d bytes, limit %d", metaLen, limit)
	}
	return ""
}

// reject stores the records the buffer cannot hold in the rejection lane,
// durably, before anything of the Write is submitted.
func (g *WABGate) reject(ctx context.Context, recs []source.Record, over []gateRefusal) error {
	return rejectAtGate(ctx, g.opts.Quarantine, g.opts.Name, g.opts.Observer, g.opts.QuarantineTap, recs, over, "too large for the buffer or undecodable")
}

// rejectAtGate stores the records of recs that over names in lane —
// reason code oversize (or the entry's own code), stage gate, component
// name, one attempt — and counts them with obs (if not nil) and shows
// them at qtap. A nil error means the lane has them durably; what says
// why they are refused, for the error.
func rejectAtGate(ctx context.Context, into lane.Lane, name string, obs GateObserver, qtap *tap.Point, recs []source.Record, over []gateRefusal, what string) error {
	now := time.Now()
	qs := make([]lane.Rejected, len(over))
	for i, o := range over {
		r := &recs[o.index]
		code := o.code
		if code == record.CodeUnknown {
			code = record.CodeOversize
		}
		qs[i] = lane.Rejected{Sink: name, OriginPos: r.OriginPos, Record: SinkRecord(r, now), Reject: record.Rejection{
			Code: code, Stage: record.StageGate, Component: name, Error: o.why,
			Attempts: 1, FirstSeen: now.UnixNano()}}
	}
	if err := into.Reject(ctx, qs); err != nil {
		return fmt.Errorf("%w: %d records %s (first: record %d of %q, %s) could not be stored in the rejection lane: %w",
			ErrGate, len(qs), what, over[0].index, recs[over[0].index].Source, over[0].why, err)
	}
	if obs != nil {
		lane.CountByCode(qs, obs.GateQuarantined)
	}
	if qtap.Active() {
		offerQuarantined(qtap, qs)
	}
	return nil
}

type shardReq struct {
	shard int
	req   *wab.Request
}

// split cuts recs into requests within the limits, keeping each source's
// records in order on its shard. The records' metas are encoded into
// arena, which the requests then refer to. A record the buffer cannot hold
// is left out and returned in over; without a rejection lane it fails the
// split.
func (g *WABGate) split(recs []source.Record, arena *[]byte) (out []shardReq, over []gateRefusal, err error) {
	now := time.Now().UnixNano()
	open := map[int]int{} // shard -> index in out of the request being filled
	var openBytes = map[int]int64{}
	var lastSource string
	lastShard := -1
	buf := (*arena)[:0]
	for i := range recs {
		r := &recs[i]
		if o, ok := refusal(r, i); ok {
			if g.opts.Quarantine == nil {
				return nil, nil, fmt.Errorf("%w: record %d of %q: %w: %s", ErrGate, i, r.Source, ErrUndecodable, o.why)
			}
			over = append(over, o)
			continue
		}
		m := metaOf(r)
		start := len(buf)
		buf = record.Append(buf, &m)
		meta := buf[start:len(buf):len(buf)]
		if why := g.tooLarge(r, len(meta)); why != "" {
			if g.opts.Quarantine == nil {
				return nil, nil, fmt.Errorf("%w: record %d of %q: %w: %s", ErrGate, i, r.Source, wab.ErrRecordTooLarge, why)
			}
			buf = buf[:start]
			over = append(over, gateRefusal{index: i, why: why})
			continue
		}
		shard := lastShard
		if shard < 0 || r.Source != lastSource {
			shard = g.ShardFor(r.Source)
			lastSource, lastShard = r.Source, shard
		}
		size := wab.RecordSize(len(meta), len(r.Payload))
		idx, ok := open[shard]
		if ok {
			req := out[idx].req
			if len(req.Payloads) >= g.opts.MaxRequestRecords || openBytes[shard]+size > g.opts.MaxRequestBytes {
				ok = false
			}
		}
		if !ok {
			out = append(out, shardReq{shard: shard, req: &wab.Request{Durability: wab.Durable, Received: now}})
			idx = len(out) - 1
			open[shard] = idx
			openBytes[shard] = 0
		}
		req := out[idx].req
		req.Payloads = append(req.Payloads, r.Payload)
		req.Metas = append(req.Metas, meta)
		openBytes[shard] += size
	}
	*arena = buf
	return out, over, nil
}

// metaOf is what the buffer keeps of a source record besides its payload.
func metaOf(r *source.Record) record.Meta {
	m := record.Meta{
		ID: r.ID, HasID: true, Source: r.Source,
		Key: r.Key, Headers: r.Headers, OriginPos: r.OriginPos,
	}
	if !r.Time.IsZero() {
		m.EventTime = r.Time.UnixNano()
	}
	return m
}

// metaArenas recycles the buffers Write encodes metas into, so that a
// steady source allocates none: one buffer per Write, returned only once
// every request of the Write is finished (the buffer no longer reads it).
var metaArenas = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledArena bounds the buffers kept for reuse.
const maxPooledArena = 1 << 20

// getMetaArena returns a buffer with room for the metas of recs, so that
// encoding them never moves it.
func getMetaArena(recs []source.Record) *[]byte {
	n := 0
	for i := range recs {
		n += metaSizeBound(&recs[i])
	}
	a := metaArenas.Get().(*[]byte)
	if cap(*a) < n {
		*a = make([]byte, 0, n)
	}
	return a
}

func putMetaArena(a *[]byte) {
	if cap(*a) <= maxPooledArena {
		*a = (*a)[:0]
		metaArenas.Put(a)
	}
}

// metaSizeBound bounds the size of r's encoded meta: the version byte,
// each field's tag and length (at most 1 + binary.MaxVarintLen64 bytes)
// and value, and a header's key length.
func metaSizeBound(r *source.Record) int {
	const field = 1 + binary.MaxVarintLen64
	n := 1 + 5*field + 16 + 8 + len(r.Source) + len(r.Key) + len(r.OriginPos)
	for _, h := range r.Headers {
		n += field + binary.MaxVarintLen64 + len(h.Key) + len(h.Value)
	}
	return n
}
