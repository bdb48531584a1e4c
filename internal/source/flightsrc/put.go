package flightsrc

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/source"
)

// service is the Flight service of a running source.
type service struct {
	flight.BaseFlightServer
	src    *Source
	gate   source.Gate
	budget *flow.Budget // MaxInflightBytes, shared by the calls
}

// maxPending bounds the batches of one call between being read and their
// PutResult, besides the bytes.
const maxPending = 256

// maxProducerBytes bounds a producer id (the descriptor's second path
// element).
const maxProducerBytes = 128

// retryLater is the answer to a DoPut while flow control is Critical:
// RESOURCE_EXHAUSTED with a RetryInfo detail (the standard gRPC retry
// hint) and the delay in words.
func retryLater(d time.Duration) error {
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("weir is short of memory (flow control is Critical); retry in %s", d))
	if with, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}); err == nil {
		st = with
	}
	return st.Err()
}

// call is one DoPut: where its batches go and what their ids derive from.
type call struct {
	stream   string
	producer []byte
	named    bool // the producer id is the client's, not one made for the call
	dec      *arrowrec.Decoder
}

func (v *service) DoPut(stream flight.FlightService_DoPutServer) error {
	s := v.src
	m := s.opts.Metrics
	if s.Paused() {
		m.refused.WithLabelValues(refusedCritical).Inc()
		return retryLater(s.opts.RetryAfter)
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		m.refused.WithLabelValues(refusedRequest).Inc()
		return status.Errorf(codes.InvalidArgument, "the call does not start with an Arrow schema: %v", err)
	}
	defer rdr.Release()
	c, err := s.newCall(rdr.LatestFlightDescriptor())
	if err == nil {
		c.dec, err = arrowrec.NewDecoder(rdr.Schema(), s.opts.Columns)
		err = invalid(err)
	}
	if err != nil {
		m.refused.WithLabelValues(refusedRequest).Inc()
		return err
	}
	s.streams[c.stream].setSchema(c.dec.Schema())
	return v.put(stream, rdr, c)
}

func invalid(err error) error {
	if err == nil {
		return nil
	}
	return status.Error(codes.InvalidArgument, err.Error())
}

// newCall reads the descriptor: PATH [stream] or [stream, producer].
func (s *Source) newCall(d *flight.FlightDescriptor) (*call, error) {
	if d == nil || d.Type != flight.DescriptorPATH || len(d.Path) < 1 || len(d.Path) > 2 {
		return nil, status.Error(codes.InvalidArgument, "the descriptor must be a PATH of [stream] or [stream, producer id]")
	}
	c := &call{stream: d.Path[0]}
	if _, ok := s.streams[c.stream]; !ok {
		return nil, status.Errorf(codes.NotFound, "no stream %q here (streams: %v)", c.stream, s.opts.Streams)
	}
	if len(d.Path) == 2 {
		if n := len(d.Path[1]); n == 0 || n > maxProducerBytes {
			return nil, status.Errorf(codes.InvalidArgument, "a producer id is 1 – %d bytes", maxProducerBytes)
		}
		c.producer, c.named = []byte(d.Path[1]), true
	} else {
		c.producer = make([]byte, 16)
		_, _ = rand.Read(c.producer) // never fails (crypto/rand, Go 1.24)
	}
	return c, nil
}

// sequence is a batch's sequence number: its app_metadata, 8 bytes big
// endian; without one, its index in the call — unless the producer is
// named, whose resends must find the same numbers.
func (c *call) sequence(md []byte, index uint64) (uint64, error) {
	switch {
	case len(md) == 8:
		return binary.BigEndian.Uint64(md), nil
	case len(md) == 0 && !c.named:
		return index, nil
	case len(md) == 0:
		return 0, status.Error(codes.InvalidArgument, "a batch of a named producer needs its sequence number as app_metadata (8 bytes, big endian)")
	}
	return 0, status.Errorf(codes.InvalidArgument, "app_metadata is %d bytes; a batch's sequence number is 8 bytes, big endian", len(md))
}

// records makes a batch's rows records, with their ids.
func (s *Source) records(c *call, seq uint64, rows []arrowrec.Row, received time.Time) []source.Record {
	recs := make([]source.Record, len(rows))
	// A row without an event time of its own gets ms 0 in its id when
	// its producer is named — a resend arrives at another time and must
	// get the first copy's id — and the receive time otherwise.
	idTime := time.Time{}
	if !c.named && !c.dec.HasTime() {
		idTime = received
	}
	name, stream, seqb := []byte(s.opts.Name), []byte(c.stream), source.Uint64(seq)
	for i := range rows {
		r := &rows[i]
		at := idTime
		if c.dec.HasTime() {
			at = r.Time
		}
		recs[i] = source.Record{
			ID:        source.TimedID(at, idPrefix, name, stream, c.producer, seqb, source.Uint64(uint64(i))),
			Payload:   r.Payload,
			Source:    s.opts.Name,
			Time:      r.Time,
			Key:       r.Key,
			Headers:   r.Headers,
			OriginPos: fmt.Sprintf("%s/%d:%d", c.stream, seq, i),
		}
	}
	return recs
}

// idPrefix is the first part of every Flight record's id.
var idPrefix = []byte("weir-flight")

// inflight is a batch between being read and its PutResult.
type inflight struct {
	seq     uint64
	bytes   int64 // held in the budget
	arrived time.Time
	done    chan struct{}
	err     error // the gate's Write, once done is closed
}

// put reads the call's batches, writes each through the gate as soon as
// it is read, and sends each one's PutResult, in order, once its Write
// has returned nil. Reading waits while the source is paused and while
// the calls' unacknowledged bytes are at MaxInflightBytes.
func (v *service) put(stream flight.FlightService_DoPutServer, rdr *flight.Reader, c *call) error {
	s, m := v.src, v.src.opts.Metrics
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	hold := flow.NewHold(v.budget)
	defer hold.Release()
	pending := make(chan *inflight, maxPending)
	acked := make(chan error, 1)
	go func() { acked <- v.acknowledge(ctx, cancel, stream, pending, hold) }()

	var readErr error
	for index := uint64(0); ; index++ {
		if err := s.Wait(ctx); err != nil {
			break
		}
		if !rdr.Next() {
			if err := rdr.Err(); err != nil && ctx.Err() == nil {
				readErr = status.Errorf(codes.InvalidArgument, "reading the stream: %v", err)
			}
			break
		}
		// Paused while the call waited for this batch: it is held,
		// unwritten, until the source resumes.
		if err := s.Wait(ctx); err != nil {
			break
		}
		batch := rdr.RecordBatch()
		arrived := time.Now()
		seq, err := c.sequence(rdr.LatestAppMetadata(), index)
		var rows []arrowrec.Row
		if err == nil {
			rows, err = c.dec.Rows(nil, batch)
			err = invalid(err)
		}
		if err != nil {
			readErr = err
			break
		}
		recs := s.records(c, seq, rows, arrived)
		arrowBytes := batchBytes(batch)
		_, held := source.Sizes(recs)
		n := held + arrowBytes
		if err := grow(ctx, hold, n); err != nil {
			if ctx.Err() == nil {
				readErr = status.Errorf(codes.InvalidArgument, "a batch of %d bytes is more than the source holds in flight (max_inflight_bytes): %v", n, err)
			}
			break
		}
		m.batches.WithLabelValues(c.stream).Inc()
		m.rows.WithLabelValues(c.stream).Add(float64(len(recs)))
		m.bytes.WithLabelValues(c.stream).Add(float64(arrowBytes))
		s.streams[c.stream].count(int64(len(recs)), arrowBytes)
		b := &inflight{seq: seq, bytes: n, arrived: arrived, done: make(chan struct{})}
		go func() {
			b.err = v.gate.Write(ctx, recs)
			close(b.done)
		}()
		pending <- b
	}
	close(pending)
	ackErr := <-acked
	switch {
	case readErr != nil:
		m.refused.WithLabelValues(refusedRequest).Inc()
		return readErr
	case ackErr != nil:
		return ackErr
	}
	return stream.Context().Err()
}

// grow takes n bytes for a batch, waiting while the budget is full (the
// call reads nothing meanwhile) until ctx ends.
func grow(ctx context.Context, h *flow.Hold, n int64) error {
	for {
		ok, err := h.Grow(n, 100*time.Millisecond)
		if ok || err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// acknowledge sends each batch's PutResult once its Write returned nil,
// in the order they were read. After a failed Write or Send it sends
// nothing more and ends the call (cancel): the producer resends every
// batch it has no PutResult for.
func (v *service) acknowledge(ctx context.Context, cancel context.CancelFunc, stream flight.FlightService_DoPutServer, pending <-chan *inflight, hold *flow.Hold) error {
	s, m := v.src, v.src.opts.Metrics
	var first error
	for b := range pending {
		<-b.done // Write returns soon after ctx ends
		hold.Shrink(b.bytes)
		if first != nil {
			continue
		}
		if b.err != nil {
			m.refused.WithLabelValues(refusedWrite).Inc()
			if ctx.Err() == nil {
				s.opts.Logger.Warn("flight source: a batch is not durable; the call ends and its producer resends what it has no PutResult for",
					"seq", b.seq, "err", b.err)
			}
			first = status.Errorf(codes.Unavailable, "batch %d is not durable (%v); resend every batch without a PutResult", b.seq, b.err)
			cancel()
			continue
		}
		md := binary.BigEndian.AppendUint64(nil, b.seq)
		if err := stream.Send(&flight.PutResult{AppMetadata: md}); err != nil {
			first = fmt.Errorf("sending the PutResult of batch %d: %w", b.seq, err)
			cancel()
			continue
		}
		m.ack.Observe(time.Since(b.arrived).Seconds())
		s.opts.OnAck()
	}
	if errors.Is(first, context.Canceled) {
		return status.FromContextError(first).Err()
	}
	return first
}

// batchBytes is the size of a batch's Arrow buffers.
func batchBytes(b arrow.RecordBatch) int64 {
	var n int64
	for _, c := range b.Columns() {
		n += dataBytes(c.Data())
	}
	return n
}

func dataBytes(d arrow.ArrayData) int64 {
	if dd, ok := d.(*array.Data); d == nil || ok && dd == nil { // no dictionary is a nil *array.Data
		return 0
	}
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += dataBytes(c)
	}
	return n + dataBytes(d.Dictionary())
}
