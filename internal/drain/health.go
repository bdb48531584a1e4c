package drain

// The drain's state and the sink's health polls.

import (
	"context"
	"time"

	"github.com/weir-io/weir/internal/backoff"
	"github.com/weir-io/weir/sink"
)

func (d *Drain) setState(s State) {
	if State(d.state.Swap(int32(s))) != s {
		d.obs.State(s)
	}
}

func (d *Drain) nudgeHealth() {
	select {
	case d.healthNudge <- struct{}{}:
	default:
	}
}

// healthLoop polls the sink's health when Run starts, every HealthInterval
// and when the drain starts a segment, until ctx ends. It logs changes:
// degraded at warn, down at error.
func (d *Drain) healthLoop(ctx context.Context) {
	last := sink.Health{State: sink.Healthy}
	poll := func() {
		hctx, cancel := context.WithTimeout(ctx, d.healthEvery)
		h := d.sink.Health(hctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		d.obs.SinkHealth(h)
		if h == last {
			return
		}
		switch h.State {
		case sink.Healthy:
			d.log.Info("sink healthy again", "was", last.State.String())
			select {
			case d.sinkBack <- struct{}{}:
			default:
			}
		case sink.Degraded:
			d.log.Warn("sink degraded", "reason", h.Reason)
		default:
			d.log.Error("sink unhealthy", "state", h.State.String(), "reason", h.Reason)
		}
		last = h
	}
	poll()
	t := time.NewTicker(d.healthEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			poll()
		case <-d.healthNudge:
			poll()
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if !backoff.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

func orDuration(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}
