package flightsink

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weir-io/weir/internal/sink/sinkcore"
	"github.com/weir-io/weir/sink"
)

// isDataError reports whether the server refused the data of the batch
// (InvalidArgument): the error bisection isolates to rows.
func isDataError(err error) bool {
	return status.Code(unwrapStatus(err)) == codes.InvalidArgument
}

// unwrapStatus finds the gRPC status error err wraps, or returns err.
func unwrapStatus(err error) error {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.(error)
	}
	return err
}

// classify marks err for the drain. Transient: the connection or the
// server is unavailable, slow or overloaded (Unavailable,
// DeadlineExceeded, ResourceExhausted, Aborted), the call was cancelled,
// the transport broke (Internal, which gRPC reports for a reset stream),
// or the server's handler failed without saying why (Unknown: a full
// disk, a crash of its writer — a retry may pass). Permanent: the server
// refuses the call itself (Unauthenticated, PermissionDenied, NotFound,
// FailedPrecondition, Unimplemented, …) — retrying the same batch cannot
// help. InvalidArgument never reaches here: it is isolated to its rows.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	wrapped := fmt.Errorf("flightsink: %s: %w", op, err)
	st, ok := status.FromError(unwrapStatus(err))
	if !ok {
		if sinkcore.IsTransportError(err) {
			return sink.Transient(wrapped)
		}
		return sink.Permanent(wrapped)
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted,
		codes.Canceled, codes.Internal, codes.Unknown:
		return sink.Transient(wrapped)
	case codes.Unauthenticated:
		return sink.Permanent(fmt.Errorf("%w (check token_file or token_env)", wrapped))
	case codes.PermissionDenied:
		return sink.Permanent(fmt.Errorf("%w (the server refuses this client on this descriptor path)", wrapped))
	}
	return sink.Permanent(wrapped)
}

// ctxErr says whether err is only the commit's own context ending.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return sink.Transient(fmt.Errorf("flightsink: commit: %w (%w)", ctx.Err(), err))
	}
	return nil
}
