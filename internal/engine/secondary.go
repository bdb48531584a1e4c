package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weir-io/weir/internal/backoff"
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/tap"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

type secondary struct {
	f    *Fanout
	cfg  SecondaryConfig
	name string
	snk  sink.Sink

	queue  chan *liveBatch
	qmu    sync.Mutex
	inQ    SpanSet      // positions queued or being delivered live
	qbytes atomic.Int64 // bytes of the batches queued or being delivered live; changed under qmu

	perRecord int64 // estimated bytes per record, for recovery windows' reservations

	quar     chan lane.Rejected
	quarMem  atomic.Int64 // bytes of the records in quar and being written
	lastShed atomic.Int64 // unix nanos of the last shed log line

	window int // current recovery window, records

	// With FanoutOptions.Claims (claimed.go): the window this worker holds
	// under a claim, windows it failed to claim (key → retry time), and
	// how many claims it holds, for the metrics; unclaimed is the
	// windows nobody held at the last count (the flush loop's only);
	// floored is set once the claims' tokens were raised above the
	// store's fences (ClaimFloor).
	cell      *heldCell
	floored   bool
	skip      map[string]time.Time
	leases    atomic.Int64
	unclaimed uint64

	dropped, delivered, recovered, quarantined, shed, skipped, failures, unrecoverable atomic.Int64
}

// liveTurns is how many live batches a secondary delivers before it
// gives a recovery window a turn.
const liveTurns = 8

// newSecondary makes the i-th secondary of c (seen holds the names taken)
// and registers it in the offset store: a sink the store has never seen
// starts covered up to end when c.StartAtEnd, and coverage past end —
// positions raw does not hold — is dropped so recovery delivers them.
func (f *Fanout) newSecondary(i int, c SecondaryConfig, end uint64, seen map[string]bool) (*secondary, error) {
	if c.Sink == nil {
		return nil, fmt.Errorf("engine: fan-out: secondary %d has no sink", i)
	}
	name := c.Name
	if name == "" {
		name = c.Sink.Name()
	}
	if seen[name] {
		return nil, fmt.Errorf("engine: fan-out: two secondaries named %q (set distinct names)", name)
	}
	seen[name] = true
	if c.QueueBatches <= 0 {
		c.QueueBatches = DefaultQueueBatches
	}
	if c.QuarantineBuffer <= 0 {
		c.QuarantineBuffer = DefaultQuarantineBuffer
	}
	if c.QueueBytes <= 0 {
		c.QueueBytes = DefaultQueueBytes
	}
	if c.QuarantineBytes <= 0 {
		c.QuarantineBytes = DefaultQuarantineBytes
	}
	s := &secondary{f: f, cfg: c, name: name, snk: c.Sink,
		queue: make(chan *liveBatch, c.QueueBatches), quar: make(chan lane.Rejected, c.QuarantineBuffer),
		window: f.opts.WindowRecords, perRecord: f.opts.RecordSizeEstimate, skip: map[string]time.Time{}}
	if !f.store.Known(name) && c.StartAtEnd {
		f.store.Cover(name, 0, end)
	} else {
		f.store.Cover(name, 0, 0) // register
	}
	if f.store.Clamp(name, end) {
		f.log.Error("coverage claimed positions raw does not hold; dropped the claim so recovery delivers them",
			"sink", name, "raw_end", end)
	}
	return s, nil
}

// offer enqueues without blocking, or drops and counts: a queue full in
// batches or in bytes (unless empty) drops the batch to recovery.
func (s *secondary) offer(lb *liveBatch) {
	hi := lb.first + uint64(len(lb.recs))
	s.qmu.Lock()
	if q := s.qbytes.Load(); q > 0 && q+lb.bytes > s.cfg.QueueBytes {
		s.qmu.Unlock()
		s.drop(len(lb.recs))
		return
	}
	lb.hold()
	select {
	case s.queue <- lb:
		s.inQ.Add(lb.first, hi)
		s.qbytes.Add(lb.bytes)
		s.qmu.Unlock()
	default:
		s.qmu.Unlock()
		lb.done() // the offerer still holds it: never the last
		s.drop(len(lb.recs))
	}
}

// offerDelivered shows at p the records of chunk the sink acknowledged:
// all but those rej names.
func offerDelivered(p *tap.Point, chunk []sink.Positioned, rej []sink.Rejection) {
	keep := chunk
	if len(rej) > 0 {
		keep = make([]sink.Positioned, 0, len(chunk))
		for i := range chunk {
			if !slices.ContainsFunc(rej, func(r sink.Rejection) bool { return r.Index == i }) {
				keep = append(keep, chunk[i])
			}
		}
	}
	p.Offer(len(keep), func(i int) tap.Record { return tap.FromSink(&keep[i].Record) })
}

// drop counts n records of a live batch left to recovery.
func (s *secondary) drop(n int) {
	s.dropped.Add(int64(n))
	s.f.obs.LiveDropped(s.name, n)
}

// unqueue forgets a live batch the worker is done with, and lets go of it.
func (s *secondary) unqueue(lb *liveBatch) {
	s.qmu.Lock()
	s.inQ.Remove(lb.first, lb.first+uint64(len(lb.recs)))
	s.qbytes.Add(-lb.bytes)
	s.qmu.Unlock()
	lb.done()
}

// run is the secondary's worker: live batches first, recovery windows in
// between.
func (s *secondary) run(ctx context.Context) {
	defer s.f.wg.Done()
	defer s.dropCell("stopping") // a claim held when the fan-out stops
	role := s.f.opts.Role
	tick := time.NewTicker(s.f.opts.RecoveryInterval)
	defer tick.Stop()
	live := 0 // live batches delivered since the last recovery window
	for ctx.Err() == nil {
		// Live batches go first, but a recovery window gets a turn after
		// every liveTurns of them, so old gaps close even under steady
		// load.
		if live < liveTurns || !role.recovers() {
			select {
			case lb := <-s.queue:
				s.deliverLive(ctx, lb)
				live++
				continue
			default:
			}
		}
		live = 0
		if role.recovers() {
			did, err := s.recover(ctx)
			if err != nil && ctx.Err() == nil {
				s.f.log.Error("recovery window failed", "sink", s.name, "err", err)
			}
			if did {
				continue
			}
		}
		select {
		case <-ctx.Done():
		case lb := <-s.queue:
			s.deliverLive(ctx, lb)
		case <-tick.C:
		}
	}
}

func (s *secondary) deliverLive(ctx context.Context, lb *liveBatch) {
	defer s.unqueue(lb)
	_ = s.deliver(ctx, lb.first, lb.recs, false, s.coverPlain)
}

// deliver commits recs (positions from lo on; positions between lo and a
// record hold nothing) in chunks of the sink's MaxBatchSize, retrying each
// until it is accounted for, and covers each chunk after its ack; it
// stops at the first cover that fails.
func (s *secondary) deliver(ctx context.Context, lo uint64, recs []sink.Positioned, recovery bool, cover coverFunc) error {
	for len(recs) > 0 {
		chunk := recs[:min(s.chunkSize(len(recs)), len(recs))]
		recs = recs[len(chunk):]
		hi := chunk[len(chunk)-1].Pos + 1
		if dstCoverEarly() { // the simulation's broken build only
			if err := cover(ctx, lo, hi); err != nil {
				return err
			}
		}
		if err := s.commitChunk(ctx, chunk, recovery); err != nil {
			return err
		}
		if !dstCoverEarly() {
			if err := cover(ctx, lo, hi); err != nil {
				return err
			}
		}
		lo = hi
	}
	return nil
}

func (s *secondary) commitChunk(ctx context.Context, chunk []sink.Positioned, recovery bool) error {
	recs := make([]sink.Record, len(chunk))
	for i := range chunk {
		recs[i] = chunk[i].Record
	}
	b := sink.NewBatch(recs)
	pause := backoff.Backoff{Policy: backoff.Policy{Min: s.f.opts.RetryMin, Max: s.f.opts.RetryMax}}
	for attempts := 1; ; attempts++ {
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if recovery {
			cctx, cancel = context.WithTimeout(ctx, s.f.opts.WindowTime)
		}
		res, err := s.snk.Commit(cctx, b)
		timedOut := cctx.Err() != nil && ctx.Err() == nil
		cancel()
		s.f.wrote(ctx, err)
		if err == nil {
			if !recovery {
				s.f.obs.Fresh(s.name, recs, time.Now())
			}
			s.accounted(chunk, res.Rejected, recovery, attempts)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !sink.IsTransient(err) {
			rej := make([]sink.Rejection, len(chunk))
			for i := range rej {
				rej[i] = sink.Rejection{Index: i, Reason: err.Error(), Code: sink.CodeSinkRefused}
			}
			s.f.log.Warn("secondary refused a batch permanently; its records go to quarantine", "sink", s.name,
				"records", len(chunk), "recovery", recovery, "err", err)
			s.accounted(chunk, rej, recovery, attempts)
			return nil
		}
		s.failures.Add(1)
		s.f.obs.CommitFailed(s.name, err, recovery)
		d := pause.Next()
		s.f.log.Debug("secondary commit failed; retrying", "sink", s.name, "recovery", recovery, "backoff", d, "err", err)
		if recovery && timedOut && len(chunk) > minWindowRecords {
			// Too big for the window's time: let the caller shrink it.
			return fmt.Errorf("%w (%d records in %v): %w", errWindowTimeout, len(chunk), s.f.opts.WindowTime, err)
		}
		if s.cfg.MaxAttempts > 0 && attempts >= s.cfg.MaxAttempts {
			s.giveUp(chunk, recovery, attempts, err)
			return nil
		}
		if !backoff.Sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// giveUp accounts for a chunk whose attempts ran out on the transient
// error err: its records go to the quarantine lane with code
// retry-exhausted, and the caller covers them.
func (s *secondary) giveUp(chunk []sink.Positioned, recovery bool, attempts int, err error) {
	rej := make([]sink.Rejection, len(chunk))
	for i := range rej {
		rej[i] = sink.Rejection{Index: i, Reason: fmt.Sprintf("gave up after %d attempts: %v", attempts, err), Code: sink.CodeRetryExhausted}
	}
	s.f.log.Warn("secondary kept failing; its records go to quarantine as retry-exhausted", "sink", s.name,
		"records", len(chunk), "attempts", attempts, "recovery", recovery, "err", err)
	s.accounted(chunk, rej, recovery, attempts)
}

// accounted handles a chunk the sink accounted for after attempts
// commits: counts, quarantine.
func (s *secondary) accounted(chunk []sink.Positioned, rej []sink.Rejection, recovery bool, attempts int) {
	if recovery {
		s.recovered.Add(int64(len(chunk)))
	} else {
		s.delivered.Add(int64(len(chunk)))
	}
	s.f.obs.Delivered(s.name, len(chunk), recovery)
	if s.cfg.Tap.Active() {
		offerDelivered(s.cfg.Tap, chunk, rej)
	}
	if len(rej) == 0 {
		return
	}
	if recovery && s.f.opts.Mode == RecoverySkipQuarantine {
		s.skipped.Add(int64(len(rej)))
		s.f.obs.QuarantineSkipped(s.name, len(rej))
		return
	}
	qs, _ := quarantined(rej, len(chunk), func(i int) (sink.Record, uint64) { return chunk[i].Record, chunk[i].Pos },
		lane.Rejected{Sink: s.name, Recovery: recovery, Reject: record.Rejection{
			Stage: record.StageSecondary, Component: s.name, Attempts: attempts, FirstSeen: time.Now().UnixNano()}})
	if s.cfg.QuarantineTap.Active() {
		offerQuarantined(s.cfg.QuarantineTap, qs)
	}
	s.quarantined.Add(int64(len(qs)))
	lane.CountByCode(qs, func(code record.Code, n int) { s.f.obs.Quarantined(s.name, code, n, recovery) })
	shed := 0
	for _, q := range qs {
		if !s.enqueueQuarantine(q) {
			shed++
		}
	}
	if shed > 0 {
		s.shedQuarantine(shed, "quarantine lane full")
	}
}
