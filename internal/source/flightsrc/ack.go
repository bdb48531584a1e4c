package flightsrc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weir-io/weir/internal/flow"
)

// inflight is a batch between being read and its PutResult.
type inflight struct {
	seq     uint64
	bytes   int64 // held in the budget
	arrived time.Time
	done    chan struct{}
	err     error // the gate's Write, once done is closed
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
