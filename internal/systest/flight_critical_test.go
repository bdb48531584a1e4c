package systest

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestFlightCriticalRefusesPuts: the real daemon's flow control goes
// Critical (the buffer's fdatasync is held 1 s while one call keeps
// sending batches, so the shard's queue fills past a low threshold); a
// new DoPut is then answered RESOURCE_EXHAUSTED with a RetryInfo of the
// source's retry_after.
func TestFlightCriticalRefusesPuts(t *testing.T) {
	d, addr := flightDaemon(t, []string{"WEIR_FAULTS=sync:*/shard-*/*.wab:delay=1s"}, `retry_after = "700ms"`,
		"--flow-degraded-queue-percent", "1", "--flow-critical-queue-percent", "2", "--flow-critical-hold", "1m",
		"--memory-budget", "64MiB")
	c := flightClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// One call sends batches without waiting for their PutResults until
	// flow control is Critical.
	critical := func(m map[string]float64) bool { return m[`weir_flow_state{state="critical"}`] == 1 }
	fillCtx, stopFilling := context.WithCancel(ctx)
	filler, err := openPut(fillCtx, c, ordersSchema, "orders", "filler")
	if err != nil {
		t.Fatal(err)
	}
	b0 := ordersBatch(t, 0, 100, 200)
	defer b0.Release()
	for seq := uint64(0); !critical(d.scrape()); seq++ {
		if ctx.Err() != nil {
			t.Fatalf("flow control never went Critical\n%s", tail(d.log.String(), 3000))
		}
		if err := filler.Send(b0, seq); err != nil {
			t.Fatalf("filler: %v", err)
		}
	}
	defer func() { stopFilling(); _ = filler.Close() }()
	call, err := openPut(ctx, c, ordersSchema, "orders", "late")
	if err != nil {
		t.Fatal(err)
	}
	b := ordersBatch(t, 0, 1, 8)
	defer b.Release()
	_ = call.Send(b, 1)
	err = call.Close()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("DoPut while Critical: %v, want RESOURCE_EXHAUSTED", err)
	}
	var hint *errdetails.RetryInfo
	for _, det := range st.Details() {
		if ri, ok := det.(*errdetails.RetryInfo); ok {
			hint = ri
		}
	}
	if hint == nil || hint.GetRetryDelay().AsDuration() != 700*time.Millisecond {
		t.Errorf("retry hint %v, want a RetryInfo of 700ms", hint)
	}
	if n := len(collect(call.acks)); n != 0 {
		t.Errorf("%d PutResults for a refused DoPut", n)
	}
	if m := d.scrape(); m[`weir_flight_refused_total{reason="critical",source="fl"}`] < 1 {
		t.Errorf("weir_flight_refused_total{reason=critical} = %v", m[`weir_flight_refused_total{reason="critical",source="fl"}`])
	}
}
