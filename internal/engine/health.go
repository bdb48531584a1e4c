package engine

import (
	"context"
	"time"

	"github.com/weir-io/weir/sink"
)

// DefaultHealthInterval is how often the secondaries' health is polled
// when FanoutOptions.HealthInterval is zero.
const DefaultHealthInterval = 30 * time.Second

// healthPoller polls every secondary's Health at start and every
// HealthInterval, each call bounded by the interval, reports what it
// answered to the Observer (SecondaryHealth) and logs each change of
// state. A secondary's health gates nothing — raw alone does — so this is
// what shows an operator a secondary that is down, or degraded by its
// stream's contract or dedup store.
func (f *Fanout) healthPoller(ctx context.Context) {
	defer f.wg.Done()
	last := make([]sink.HealthState, len(f.secs)) // Healthy
	t := time.NewTicker(f.opts.HealthInterval)
	defer t.Stop()
	for {
		for i, s := range f.secs {
			last[i] = s.pollHealth(ctx, last[i], f.opts.HealthInterval)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pollHealth asks the secondary's sink for its health, reports it and logs
// it when its state differs from last (degraded at warn, down at error,
// healthy again at info). It returns the state now, or last when ctx ended.
func (s *secondary) pollHealth(ctx context.Context, last sink.HealthState, bound time.Duration) sink.HealthState {
	hctx, cancel := context.WithTimeout(ctx, bound)
	h := s.snk.Health(hctx)
	cancel()
	if ctx.Err() != nil {
		return last
	}
	s.f.obs.SecondaryHealth(s.name, h)
	if h.State == last {
		return last
	}
	log := s.f.log.With("sink", s.name)
	switch h.State {
	case sink.Healthy:
		log.Info("secondary healthy again", "was", last.String())
	case sink.Degraded:
		log.Warn("secondary degraded", "reason", h.Reason)
	default:
		log.Error("secondary unhealthy", "state", h.State.String(), "reason", h.Reason)
	}
	return h.State
}
