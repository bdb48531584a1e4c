package metrics

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultStallTimeout is how long a flusher or the drain may stay busy
// before /live fails.
const DefaultStallTimeout = time.Minute

// Flushers is the write-ahead buffer as the liveness check needs it.
// *wab.Log satisfies it.
type Flushers interface {
	Shards() int
	FlusherBusy(shard int) time.Duration
}

// Busy is the drain as the liveness check needs it. *drain.Drain satisfies
// it.
type Busy interface {
	Busy() time.Duration
}

// Health answers /live and /ready.
//
// Liveness fails only when part of the daemon is stuck: a shard flusher
// that has been on one batch (write, fdatasync, acknowledgements, seal)
// for longer than the stall timeout, or a drain that has worked that long
// without reaching a wait or a sink call. Time spent waiting for a sink
// never counts, so a slow or unavailable sink, a full dead-letter lane or
// an idle daemon keep /live at 200.
//
// Readiness holds once the daemon has called Ready (write-ahead buffer
// recovered, listener up) and until it calls NotReady (shutdown). A ready
// daemon may be degraded — its sink down while the buffer takes records —
// and /ready says why while answering 200 (Degradation).
type Health struct {
	stall time.Duration
	log   *slog.Logger

	notReady atomic.Pointer[string] // nil when ready

	mu       sync.Mutex
	flushers Flushers
	drain    Busy
	stuck    Liveness
	failing  bool // the last liveness check failed (logged on change)
	degraded []func() string
}

// NewHealth makes a Health that is live and not ready ("starting").
// stall <= 0 takes DefaultStallTimeout; a nil logger discards.
func NewHealth(stall time.Duration, log *slog.Logger) *Health {
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Health{stall: stall, log: log}
	h.NotReady("starting")
	return h
}

// Ready marks the daemon ready to accept producers.
func (h *Health) Ready() { h.notReady.Store(nil) }

// NotReady marks the daemon not ready, for reason.
func (h *Health) NotReady(reason string) { h.notReady.Store(&reason) }

// WatchFlushers adds the write-ahead buffer's flushers to the liveness
// check.
func (h *Health) WatchFlushers(f Flushers) {
	h.mu.Lock()
	h.flushers = f
	h.mu.Unlock()
}

// WatchDrain adds the drain to the liveness check.
func (h *Health) WatchDrain(d Busy) {
	h.mu.Lock()
	h.drain = d
	h.mu.Unlock()
}

// Liveness is a part of the daemon that judges its own liveness: flow
// control's stuck detector (*flow.Controller).
type Liveness interface {
	Liveness() error
}

// WatchStuck adds the stuck detector to the liveness check. It watches
// every kind of node, not only those with a buffer and a drain.
func (h *Health) WatchStuck(l Liveness) {
	h.mu.Lock()
	h.stuck = l
	h.mu.Unlock()
}

// WatchDegraded adds a part that may be degraded while the daemon is
// ready: reason returns "" while it is not.
func (h *Health) WatchDegraded(reason func() string) {
	h.mu.Lock()
	h.degraded = append(h.degraded, reason)
	h.mu.Unlock()
}

// Degradation is why a ready daemon is degraded ("" when it is not): each
// watched part's reason, joined by "; ".
func (h *Health) Degradation() string {
	h.mu.Lock()
	fs := h.degraded
	h.mu.Unlock()
	var rs []string
	for _, f := range fs {
		if r := f(); r != "" {
			rs = append(rs, r)
		}
	}
	return strings.Join(rs, "; ")
}

// Readiness is nil when ready, else an error giving the reason.
func (h *Health) Readiness() error {
	if r := h.notReady.Load(); r != nil {
		return errors.New(*r)
	}
	return nil
}

// Liveness is nil unless a watched part is stuck; the error names every
// stuck part and how long it has been busy.
func (h *Health) Liveness() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	if f := h.flushers; f != nil {
		for i := 0; i < f.Shards(); i++ {
			if b := f.FlusherBusy(i); b > h.stall {
				errs = append(errs, fmt.Errorf("shard %d flusher busy on one batch for %s (limit %s)", i, b.Round(time.Millisecond), h.stall))
			}
		}
	}
	if d := h.drain; d != nil {
		if b := d.Busy(); b > h.stall {
			errs = append(errs, fmt.Errorf("drain busy without progress for %s (limit %s)", b.Round(time.Millisecond), h.stall))
		}
	}
	if l := h.stuck; l != nil {
		if err := l.Liveness(); err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	switch {
	case err != nil && !h.failing:
		h.log.Error("liveness check failing: part of the daemon is stuck", "err", err)
	case err == nil && h.failing:
		h.log.Info("liveness check passing again")
	}
	h.failing = err != nil
	return err
}
