package flightsink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weir-io/weir/sink"
)

// TestClassify: gRPC statuses a retry can get past are transient, those
// that refuse the call permanent; InvalidArgument is the data error that
// bisection isolates, also when wrapped.
func TestClassify(t *testing.T) {
	transient := []codes.Code{codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted,
		codes.Canceled, codes.Internal, codes.Unknown}
	permanent := []codes.Code{codes.Unauthenticated, codes.PermissionDenied, codes.NotFound, codes.FailedPrecondition,
		codes.Unimplemented, codes.AlreadyExists, codes.OutOfRange, codes.DataLoss}
	for _, c := range transient {
		if err := classify("put", status.Error(c, "x")); !sink.IsTransient(err) {
			t.Errorf("%v: permanent, want transient", c)
		}
	}
	for _, c := range permanent {
		if err := classify("put", status.Error(c, "x")); sink.IsTransient(err) {
			t.Errorf("%v: transient, want permanent", c)
		}
	}
	if !sink.IsTransient(classify("send", io.EOF)) || !sink.IsTransient(classify("send", context.Canceled)) {
		t.Error("a broken stream or a cancelled call must be transient")
	}
	if sink.IsTransient(classify("encode", errors.New("bad"))) {
		t.Error("an unknown local error must be permanent")
	}
	inv := fmt.Errorf("wrapped: %w", status.Error(codes.InvalidArgument, "row 3"))
	if !isDataError(inv) || isDataError(status.Error(codes.Unavailable, "x")) {
		t.Error("isDataError")
	}
}
