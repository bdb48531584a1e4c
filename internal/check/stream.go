package check

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/weir-io/weir/internal/contract"
	"github.com/weir-io/weir/sink"
)

// Contract is a compiled data contract (*contract.Contract).
type Contract interface {
	// Name is "<stream>@<version>".
	Name() string
	// Matches reports whether the contract covers r (a socket contract
	// may be narrowed by a header).
	Matches(r *sink.Record) bool
	// Check judges one record; safe for concurrent use.
	Check(r *sink.Record) contract.Result
}

// Deduper is a stream's content dedup (*dedup.Deduper).
type Deduper interface {
	// Judge sets dup[i] for each record i that duplicates another record
	// id's claim on keys[i]; keys[i] == nil is never a duplicate. A store
	// that cannot answer passes every record.
	Judge(ctx context.Context, keys [][]byte, ids []sink.RecordID, dup []bool)
	Health() sink.Health
}

// Limits are a stream's fail-ratio threshold and breaker. Zero fields
// turn each off.
type Limits struct {
	// Window is the sliding window the ratios are taken over.
	Window time.Duration
	// MinRecords is how many records the window must hold before a ratio
	// counts.
	MinRecords int64
	// DegradedRatio: rejects over judged records above it make the
	// stream's sinks report Degraded.
	DegradedRatio float64
	// BreakerRatio: above it the breaker trips and the stream's source is
	// paused for BreakerCooldown, then resumed (and judged afresh).
	BreakerRatio    float64
	BreakerCooldown time.Duration
}

// Stream is one stream's checks.
type Stream struct {
	// Name is the stream: a [[source]]'s name, or "socket".
	Name     string
	Contract Contract
	// Dedup is nil unless the stream's contract enables content dedup.
	Dedup  Deduper
	Limits Limits
	// OnTrip is called with paused=true when the breaker trips (from
	// the Commit that tripped it) and paused=false when its cool-down
	// ends (from a timer); it must be quick. nil for a stream that cannot
	// be paused (the socket): its breaker never trips.
	OnTrip func(paused bool, why string)

	mu      sync.Mutex
	win     window
	tripped bool
	closed  bool
	timer   *time.Timer // ends the breaker's cool-down
}

// windowBuckets is how many buckets a stream's window is kept in.
const windowBuckets = 10

// window counts judged and rejected records over a sliding time window,
// in windowBuckets buckets.
type window struct {
	width    time.Duration // of one bucket
	start    time.Time     // of bucket head
	head     int
	judged   [windowBuckets]int64
	rejected [windowBuckets]int64
}

// add counts at now, moving the window on first.
func (w *window) add(now time.Time, judged, rejected int64) {
	if w.width <= 0 {
		return
	}
	if w.start.IsZero() {
		w.start = now
	}
	for steps := 0; now.Sub(w.start) >= w.width && steps <= windowBuckets; steps++ {
		w.head = (w.head + 1) % windowBuckets
		w.judged[w.head], w.rejected[w.head] = 0, 0
		w.start = w.start.Add(w.width)
	}
	if now.Sub(w.start) >= w.width { // idle longer than the window
		w.start = now
	}
	w.judged[w.head] += judged
	w.rejected[w.head] += rejected
}

// totals sums the window.
func (w *window) totals() (judged, rejected int64) {
	for i := range w.judged {
		judged += w.judged[i]
		rejected += w.rejected[i]
	}
	return judged, rejected
}

// tally counts a batch's outcomes at now and returns the window's fail
// ratio (-1 before MinRecords), tripping the breaker when it is over.
func (s *Stream) tally(now time.Time, judged, rejected int64) float64 {
	s.mu.Lock()
	if s.win.width == 0 && s.Limits.Window > 0 {
		s.win.width = s.Limits.Window / windowBuckets
	}
	s.win.add(now, judged, rejected)
	ratio, n := s.ratioLocked()
	if ratio < 0 {
		s.mu.Unlock()
		return -1
	}
	trip := s.Limits.BreakerRatio > 0 && !s.tripped && !s.closed && ratio > s.Limits.BreakerRatio && s.OnTrip != nil
	var why string
	if trip {
		s.tripped = true
		why = fmt.Sprintf("stream %q: %.1f%% of the last %d records were rejected (breaker at %.1f%%)",
			s.Name, 100*ratio, n, 100*s.Limits.BreakerRatio)
		s.timer = time.AfterFunc(max(s.Limits.BreakerCooldown, time.Second), func() { s.reset(why) })
	}
	s.mu.Unlock()
	if trip {
		s.OnTrip(true, why)
	}
	return ratio
}

// ratioLocked is the window's reject ratio and record count, the ratio
// -1 before MinRecords; s.mu is held.
func (s *Stream) ratioLocked() (ratio float64, n int64) {
	n, r := s.win.totals()
	if n == 0 || n < s.Limits.MinRecords {
		return -1, n
	}
	return float64(r) / float64(n), n
}

// reset ends the breaker's cool-down: the source resumes and the window
// starts empty, so the stream is judged on what it sends next.
func (s *Stream) reset(why string) {
	s.mu.Lock()
	if s.closed || !s.tripped {
		s.mu.Unlock()
		return
	}
	s.tripped = false
	s.win = window{}
	s.mu.Unlock()
	s.OnTrip(false, why)
}

// Close stops the breaker's timer; a tripped stream stays paused.
func (s *Stream) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
}

// Tripped reports whether the stream's breaker is open.
func (s *Stream) Tripped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tripped
}

// health is the stream's contribution to a wrapped sink's health at now:
// the window is moved on first, so a stream that went quiet after a bad
// burst is judged on what the window still holds, not on the burst.
// It also returns the window's reject ratio (-1 before MinRecords).
func (s *Stream) health(now time.Time) (h sink.Health, bad bool, ratio float64) {
	s.mu.Lock()
	s.win.add(now, 0, 0)
	ratio, _ = s.ratioLocked()
	tripped := s.tripped
	s.mu.Unlock()
	if tripped {
		return sink.Health{State: sink.Degraded, Reason: fmt.Sprintf("stream %q: contract breaker open", s.Name)}, true, ratio
	}
	if s.Limits.DegradedRatio > 0 && ratio > s.Limits.DegradedRatio {
		return sink.Health{State: sink.Degraded, Reason: fmt.Sprintf("stream %q: %.1f%% of records rejected by %s (threshold %.1f%%)",
			s.Name, 100*ratio, s.Contract.Name(), 100*s.Limits.DegradedRatio)}, true, ratio
	}
	if s.Dedup != nil {
		if h := s.Dedup.Health(); h.State != sink.Healthy {
			return h, true, ratio
		}
	}
	return sink.Health{}, false, ratio
}
