package flightsrc

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

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
	// stopping is closed when the source stops: calls read no further
	// batch, acknowledge what they took and end with UNAVAILABLE.
	stopping <-chan struct{}
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
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("weir takes no records now (flow control is Critical, or a contract breaker is open); retry in %s", d))
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
	c, err := s.newCall(rdr.LatestFlightDescriptor())
	if err == nil {
		c.dec, err = arrowrec.NewDecoder(rdr.Schema(), s.opts.Columns)
		err = invalid(err)
	}
	if err != nil {
		rdr.Release()
		m.refused.WithLabelValues(refusedRequest).Inc()
		return err
	}
	s.streams[c.stream].setSchema(c.dec.Schema())
	return v.put(stream, readBatches(rdr), c)
}

// invalid is a refusal of what the client sent.
func invalid(err error) error {
	if err == nil {
		return nil
	}
	return status.Error(codes.InvalidArgument, err.Error())
}

// errStopping ends the calls in progress when the source stops.
var errStopping = status.Error(codes.Unavailable, "weir is stopping: resend every batch without a PutResult, to this node once it is back or to another")

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

// put reads the call's batches, writes each through the gate as soon as
// it is read, and sends each one's PutResult, in order, once its Write
// has returned nil. Reading waits while the source is paused and while
// the calls' unacknowledged bytes are at MaxInflightBytes.
func (v *service) put(stream flight.FlightService_DoPutServer, rdr *batchReader, c *call) error {
	defer rdr.close()
	s, m := v.src, v.src.opts.Metrics
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// Reading also stops when the source does; the batches read by then
	// are still written and acknowledged.
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	go func() {
		select {
		case <-v.stopping:
			stopReading()
		case <-readCtx.Done():
		}
	}()
	hold := flow.NewHold(v.budget)
	defer hold.Release()
	pending := make(chan *inflight, maxPending)
	acked := make(chan error, 1)
	go func() { acked <- v.acknowledge(ctx, cancel, stream, pending, hold) }()

	var readErr error
	for index := uint64(0); ; index++ {
		if err := s.Wait(readCtx); err != nil {
			break
		}
		res, ok := rdr.read(readCtx)
		if !ok {
			break
		}
		if res.batch == nil {
			if res.err != nil && ctx.Err() == nil {
				readErr = status.Errorf(codes.InvalidArgument, "reading the stream: %v", res.err)
			}
			break
		}
		err := v.take(readCtx, ctx, c, hold, pending, res, index)
		res.batch.Release()
		if err != nil {
			readErr = err
			break
		}
	}
	close(pending)
	ackErr := <-acked
	stopped := false
	select {
	case <-v.stopping:
		stopped = true
	default:
	}
	switch {
	case readErr != nil && readCtx.Err() == nil:
		m.refused.WithLabelValues(refusedRequest).Inc()
		return readErr
	case ackErr != nil:
		return ackErr
	case stopped:
		return errStopping
	}
	return stream.Context().Err()
}

// take writes one batch read: its records through the gate, on a
// goroutine of their own under wctx (the call's context: a stop of
// reading, ctx, does not cut the write short), once its bytes fit in the
// budget; the batch joins pending, whose PutResults are sent in order.
func (v *service) take(ctx, wctx context.Context, c *call, hold *flow.Hold, pending chan<- *inflight, res readResult, index uint64) error {
	s, m := v.src, v.src.opts.Metrics
	// Paused while the call waited for this batch: it is held,
	// unwritten, until the source resumes.
	if err := s.Wait(ctx); err != nil {
		return err
	}
	arrived := time.Now()
	seq, err := c.sequence(res.md, index)
	if err != nil {
		return err
	}
	rows, err := c.dec.Rows(nil, res.batch)
	if err != nil {
		return invalid(err)
	}
	recs := s.records(c, seq, rows, arrived)
	arrowBytes := batchBytes(res.batch)
	_, held := source.Sizes(recs)
	n := held + arrowBytes
	if err := grow(ctx, hold, n); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return status.Errorf(codes.InvalidArgument, "a batch of %d bytes is more than the source holds in flight (max_inflight_bytes): %v", n, err)
	}
	m.batches.WithLabelValues(c.stream).Inc()
	m.rows.WithLabelValues(c.stream).Add(float64(len(recs)))
	m.bytes.WithLabelValues(c.stream).Add(float64(arrowBytes))
	s.streams[c.stream].count(int64(len(recs)), arrowBytes)
	b := &inflight{seq: seq, bytes: n, arrived: arrived, done: make(chan struct{})}
	go func() {
		b.err = v.gate.Write(wctx, recs)
		close(b.done)
	}()
	pending <- b
	return nil
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
