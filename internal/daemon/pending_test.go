package daemon

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/sink"
)

// TestPendingSinkHealthAtStart: a sink still in its first opening attempt
// is not reported down — a sink that opens in milliseconds at start must
// not log "sink unhealthy" — while a sink whose attempt failed, or that
// has not opened by the health poll's deadline, is.
func TestPendingSinkHealthAtStart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		open   func(context.Context) (sink.Sink, error)
		within time.Duration
		want   sink.HealthState
		reason string
	}{
		{"opens quickly", func(context.Context) (sink.Sink, error) {
			time.Sleep(50 * time.Millisecond)
			return &probeSink{}, nil
		}, time.Second, sink.Healthy, ""},
		{"first attempt fails", func(context.Context) (sink.Sink, error) {
			return nil, errors.New("connection refused")
		}, time.Second, sink.Down, "connection refused"},
		{"opening outlasts the poll", func(ctx context.Context) (sink.Sink, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, 100 * time.Millisecond, sink.Down, "opening"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := openPending("probe", 8, tc.open, slog.New(slog.DiscardHandler))
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), tc.within)
			defer cancel()
			h := p.Health(ctx)
			if h.State != tc.want || !strings.Contains(h.Reason, tc.reason) {
				t.Fatalf("Health = %v %q, want %v containing %q", h.State, h.Reason, tc.want, tc.reason)
			}
		})
	}
}
