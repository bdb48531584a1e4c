package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// Role is what a node does with a topology.
type Role int

const (
	// RoleBoth delivers live and recovers lagging secondaries (default).
	RoleBoth Role = iota
	// RoleIngest writes raw and delivers live to the secondaries; it runs
	// no recovery loop (a recovery node fills the gaps).
	RoleIngest
	// RoleRecovery only replays raw into lagging secondaries; Commit still
	// writes raw but hands nothing to the secondaries.
	RoleRecovery
)

func (r Role) String() string {
	switch r {
	case RoleBoth:
		return "both"
	case RoleIngest:
		return "ingest"
	case RoleRecovery:
		return "recovery"
	}
	return fmt.Sprintf("role(%d)", int(r))
}

// ParseRole reads "both", "ingest" or "recovery" ("" is both).
func ParseRole(s string) (Role, error) {
	switch s {
	case "", "both":
		return RoleBoth, nil
	case "ingest":
		return RoleIngest, nil
	case "recovery":
		return RoleRecovery, nil
	}
	return 0, fmt.Errorf("engine: role %q: want both, ingest or recovery", s)
}

func (r Role) live() bool     { return r == RoleBoth || r == RoleIngest }
func (r Role) recovers() bool { return r == RoleBoth || r == RoleRecovery }

// RecoveryMode says what recovery does with records a secondary rejects.
type RecoveryMode int

const (
	// RecoveryRehydrate sends them to the sink's quarantine lane, so that
	// the quarantine view is complete for recovered windows (default).
	RecoveryRehydrate RecoveryMode = iota
	// RecoverySkipQuarantine does not: clean records are recovered as
	// usual, rejected ones are only counted (Observer.QuarantineSkipped).
	// The quarantine view then stays incomplete for the windows recovered
	// this way; the records themselves remain in raw.
	RecoverySkipQuarantine
)

func (m RecoveryMode) String() string {
	if m == RecoverySkipQuarantine {
		return "skip-quarantine"
	}
	return "rehydrate"
}

// ParseRecoveryMode reads "rehydrate" or "skip-quarantine" ("" is
// rehydrate).
func ParseRecoveryMode(s string) (RecoveryMode, error) {
	switch s {
	case "", "rehydrate":
		return RecoveryRehydrate, nil
	case "skip-quarantine":
		return RecoverySkipQuarantine, nil
	}
	return 0, fmt.Errorf("engine: recovery mode %q: want rehydrate or skip-quarantine", s)
}

// Defaults for zero FanoutOptions and SecondaryConfig fields.
const (
	DefaultQueueBatches      = 64
	DefaultQuarantineBuffer  = 4096
	DefaultWindowRecords     = 4096
	DefaultWindowTime        = 10 * time.Second
	DefaultRecoveryInterval  = time.Second
	DefaultFlushInterval     = 250 * time.Millisecond
	DefaultRetryMin          = 50 * time.Millisecond
	DefaultRetryMax          = 5 * time.Second
	quarantineBatch          = 256
	quarantineLogEvery       = time.Second
	minWindowRecords         = 16
	liveTurns                = 8
	storeRetryLogEvery       = 10 * time.Second
	defaultCloseFlushTimeout = 10 * time.Second
)

// QuarantinedRecord is a record a secondary (or, at a raw gate, primary
// raw) refused permanently, with why.
type QuarantinedRecord struct {
	// Sink names the quarantine lane: the secondary's name, or the gate's.
	Sink string
	// Pos is the record's raw position (0 at the gate: not in raw).
	Pos    uint64
	Record sink.Record
	// Reject is the rejection: code, stage, component (the sink that
	// refused), error text (the sink's reason), attempts, first-seen time.
	Reject   record.Rejection
	Recovery bool // found by recovery rather than live delivery
}

// Quarantine receives a secondary's rejected records: a convenience view
// for inspection, not the system of record (raw keeps every record). It
// runs on its own goroutine and buffer; it can slow only itself.
type Quarantine interface {
	Quarantine(ctx context.Context, recs []QuarantinedRecord) error
}

// QuarantineFunc adapts a function to Quarantine.
type QuarantineFunc func(ctx context.Context, recs []QuarantinedRecord) error

// Quarantine implements Quarantine.
func (f QuarantineFunc) Quarantine(ctx context.Context, recs []QuarantinedRecord) error {
	return f(ctx, recs)
}

// Observer sees what the fan-out does, for metrics. Calls come from the
// fan-out's goroutines and must not block. Embed NopObserver to implement
// only some of it.
type Observer interface {
	// LiveDropped: a batch for the sink found its queue full.
	LiveDropped(sinkName string, records int)
	// Delivered: records durably committed (or rejected) by the sink.
	Delivered(sinkName string, records int, recovery bool)
	// CommitFailed: a commit to the sink failed and will be retried.
	CommitFailed(sinkName string, err error, recovery bool)
	// Quarantined: rejected records handed to the sink's quarantine lane,
	// once per reason code among them.
	Quarantined(sinkName string, code record.Code, records int, recovery bool)
	// QuarantineShed: quarantine records dropped because the lane was full
	// or its writer failed.
	QuarantineShed(sinkName string, records int)
	// QuarantineSkipped: rejected records recovery did not quarantine
	// (RecoverySkipQuarantine).
	QuarantineSkipped(sinkName string, records int)
	// Coverage: the sink's contiguous covered prefix, how many positions
	// below raw's end it has not durably received (lag: queued for live
	// delivery or missing), and how many of those are not even queued
	// (missing: only recovery will deliver them). Reported every flush
	// interval.
	Coverage(sinkName string, prefix, lag, missing uint64)
	// Unrecoverable: positions the sink lacked that raw no longer keeps
	// (sink.PositionsGone): recovery stepped over them, and the sink will
	// never hold their records.
	Unrecoverable(sinkName string, positions uint64)
	// RecoveryBacklog: the largest lag over all secondaries — raw
	// positions the furthest-behind one has not durably received; 0 when
	// every secondary holds all of raw. Reported every flush interval.
	RecoveryBacklog(positions uint64)
}

// NopObserver ignores everything.
type NopObserver struct{}

func (NopObserver) LiveDropped(string, int)                    {}
func (NopObserver) Delivered(string, int, bool)                {}
func (NopObserver) CommitFailed(string, error, bool)           {}
func (NopObserver) Quarantined(string, record.Code, int, bool) {}
func (NopObserver) QuarantineShed(string, int)                 {}
func (NopObserver) QuarantineSkipped(string, int)              {}
func (NopObserver) Coverage(string, uint64, uint64, uint64)    {}
func (NopObserver) Unrecoverable(string, uint64)               {}
func (NopObserver) RecoveryBacklog(uint64)                     {}

// SecondaryConfig is one secondary sink.
type SecondaryConfig struct {
	Sink sink.Sink
	// Name keys the sink's coverage in the offset store; it must be unique
	// and stable across restarts. Empty means Sink.Name().
	Name string
	// QueueBatches bounds the live queue, in batches. Zero means
	// DefaultQueueBatches.
	QueueBatches int
	// Quarantine receives rejected records; nil logs and counts them.
	Quarantine Quarantine
	// QuarantineBuffer bounds the quarantine lane, in records. Zero means
	// DefaultQuarantineBuffer.
	QuarantineBuffer int
	// StartAtEnd: a sink the offset store has never seen starts covered up
	// to raw's current end instead of being recovered from position 0.
	StartAtEnd bool
}

// FanoutOptions configure NewFanout. Zero fields take their defaults.
type FanoutOptions struct {
	// Raw is the primary-raw sink: the gate of the pipeline when there is
	// no write-ahead buffer, and what recovery reads.
	Raw sink.Raw
	// Reader is what recovery reads instead of Raw (a read-only view of
	// another process's raw, for RoleRecovery); nil means Raw.
	Reader sink.RawReader
	// ExternalRaw says raw is written outside the fan-out, in this
	// process: a source that is its own raw (its origin files are raw).
	// Raw is then nil, Reader reads the origin, and the writer reports
	// every durable batch with Appended; Commit refuses.
	ExternalRaw bool
	Secondaries []SecondaryConfig
	// Store holds coverage; it must live with raw (the file OffsetStore in
	// raw's directory, or a table in raw's database).
	Store CoverageStore
	Role  Role
	Mode  RecoveryMode
	// WindowRecords and WindowTime bound one recovery window: at most that
	// many records read from raw, committed under a deadline of WindowTime.
	// A window that misses its deadline is retried at half the size.
	WindowRecords int
	WindowTime    time.Duration
	// RecoveryInterval is how often a caught-up secondary looks for gaps.
	RecoveryInterval time.Duration
	// FlushInterval is how often coverage is written to the offset store
	// (and the Observer's gauges are reported).
	FlushInterval time.Duration
	// RetryMin and RetryMax bound the backoff between failed commits.
	RetryMin, RetryMax time.Duration
	Observer           Observer
	Logger             *slog.Logger
}

// Fanout is the raw-first topology's delivery side. To the drain it is one
// sink.Sink: Commit writes the batch to raw and returns raw's result, so
// raw's durable ack is what lets the drain delete the buffer's segment.
// The committed records, with their raw positions, are then offered to
// each secondary's bounded queue without waiting; a full queue drops the
// batch for that secondary (counted), and recovery later replays it from
// raw. A per-secondary worker commits queued batches, retrying transient
// errors with capped backoff, sends rejected records to the secondary's
// quarantine lane, and records coverage in the offset store only after the
// secondary's durable ack. Between live batches the same worker recovers
// the secondary's gaps below raw's end in bounded windows. No secondary
// can slow Commit.
type Fanout struct {
	opts   FanoutOptions
	raw    sink.Raw
	reader sink.RawReader
	store  CoverageStore
	obs    Observer
	log    *slog.Logger
	secs   []*secondary

	end    atomic.Uint64 // raw end acknowledged to this process
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
	mu     sync.Mutex // Close
}

type liveBatch struct {
	first uint64
	recs  []sink.Positioned
}

type secondary struct {
	f    *Fanout
	cfg  SecondaryConfig
	name string
	snk  sink.Sink

	queue chan liveBatch
	qmu   sync.Mutex
	inQ   SpanSet // positions queued or being delivered live

	quar     chan QuarantinedRecord
	lastShed atomic.Int64 // unix nanos of the last shed log line

	window int // current recovery window, records

	dropped, delivered, recovered, quarantined, shed, skipped, failures, unrecoverable atomic.Int64
}

var _ sink.Sink = (*Fanout)(nil)

// NewFanout validates the topology, loads coverage from the store and
// starts the workers. It stops them when Close is called.
func NewFanout(ctx context.Context, opts FanoutOptions) (*Fanout, error) {
	if opts.Raw == nil && (opts.Role != RoleRecovery && !opts.ExternalRaw || opts.Reader == nil) {
		return nil, errors.New("engine: fan-out: no primary raw")
	}
	if opts.ExternalRaw && opts.Raw != nil {
		return nil, errors.New("engine: fan-out: ExternalRaw with a Raw sink: raw has one writer")
	}
	if opts.Raw != nil && !opts.Raw.Replayable() {
		return nil, fmt.Errorf("engine: fan-out: %s cannot be primary raw: it is not replayable", opts.Raw.Name())
	}
	if opts.Store == nil {
		return nil, errors.New("engine: fan-out: no offset store")
	}
	if opts.Reader == nil {
		opts.Reader = opts.Raw
	}
	if opts.WindowRecords <= 0 {
		opts.WindowRecords = DefaultWindowRecords
	}
	if opts.WindowTime <= 0 {
		opts.WindowTime = DefaultWindowTime
	}
	if opts.RecoveryInterval <= 0 {
		opts.RecoveryInterval = DefaultRecoveryInterval
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = DefaultRetryMin
	}
	if opts.RetryMax < opts.RetryMin {
		opts.RetryMax = max(DefaultRetryMax, opts.RetryMin)
	}
	if opts.Observer == nil {
		opts.Observer = NopObserver{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Fanout{opts: opts, raw: opts.Raw, reader: opts.Reader, store: opts.Store, obs: opts.Observer,
		log: opts.Logger.With("component", "fanout", "role", opts.Role.String())}
	end, err := f.reader.End(ctx)
	if err != nil {
		return nil, fmt.Errorf("engine: fan-out: raw end: %w", err)
	}
	if opts.Role == RoleRecovery {
		if err := f.store.Reload(ctx); err != nil {
			return nil, fmt.Errorf("engine: fan-out: %w", err)
		}
		end = min(end, f.store.RawEnd())
	} else {
		f.store.NoteRawEnd(end)
	}
	f.end.Store(end)
	seen := map[string]bool{}
	for i, c := range opts.Secondaries {
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
		s := &secondary{f: f, cfg: c, name: name, snk: c.Sink,
			queue: make(chan liveBatch, c.QueueBatches), quar: make(chan QuarantinedRecord, c.QuarantineBuffer),
			window: opts.WindowRecords}
		if !f.store.Known(name) && c.StartAtEnd {
			f.store.Cover(name, 0, end)
		} else {
			f.store.Cover(name, 0, 0) // register
		}
		if f.store.Clamp(name, end) {
			f.log.Error("coverage claimed positions raw does not hold; dropped the claim so recovery delivers them",
				"sink", name, "raw_end", end)
		}
		f.secs = append(f.secs, s)
	}
	if err := f.store.Flush(ctx); err != nil {
		return nil, fmt.Errorf("engine: fan-out: %w", err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	for _, s := range f.secs {
		f.wg.Add(2)
		go s.run(wctx)
		go s.runQuarantine(wctx)
	}
	f.wg.Add(1)
	go f.flusher(wctx)
	return f, nil
}

// Name implements sink.Sink: raw's name.
func (f *Fanout) Name() string {
	if f.raw == nil {
		return "fanout"
	}
	return f.raw.Name()
}

// MaxBatchSize implements sink.Sink: raw's.
func (f *Fanout) MaxBatchSize() int {
	if f.raw == nil {
		return 1
	}
	return f.raw.MaxBatchSize()
}

// Health implements sink.Sink: raw's health, since raw alone gates. A
// secondary's trouble shows in its coverage and the Observer, not here.
func (f *Fanout) Health(ctx context.Context) sink.Health {
	if f.raw == nil {
		return sink.Health{State: sink.Down, Reason: "no primary raw on this node"}
	}
	return f.raw.Health(ctx)
}

// Commit implements sink.Sink: the batch is committed to raw, and raw's
// result is returned. On success the committed records are offered to
// each secondary's queue; Commit never waits for a secondary. The batch's
// records and payloads must not be modified after Commit returns.
func (f *Fanout) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	if f.closed.Load() {
		return sink.CommitResult{}, sink.Permanent(errors.New("engine: fan-out is closed"))
	}
	if f.raw == nil {
		return sink.CommitResult{}, sink.Permanent(errors.New("engine: fan-out: no primary raw on this node"))
	}
	res, first, err := f.raw.CommitRaw(ctx, b)
	if err != nil {
		return res, err
	}
	f.appended(first, b.Records, res)
	return res, nil
}

// Appended is Commit's second half for a raw written outside the fan-out
// (FanoutOptions.ExternalRaw): recs are durable in raw at positions
// [first, first+len(recs)), and are offered to every secondary's queue
// without waiting. recs must not be modified afterwards.
func (f *Fanout) Appended(first uint64, recs []sink.Record) {
	if f.closed.Load() || len(recs) == 0 {
		return
	}
	f.appended(first, recs, sink.CommitResult{})
}

// appended records raw's new end and offers the committed records of a
// batch, numbered from first, to the secondaries.
func (f *Fanout) appended(first uint64, records []sink.Record, res sink.CommitResult) {
	n := res.Committed(len(records))
	if n == 0 {
		return
	}
	end := first + uint64(n)
	for {
		old := f.end.Load()
		if end <= old || f.end.CompareAndSwap(old, end) {
			break
		}
	}
	f.store.NoteRawEnd(end)
	if !f.opts.Role.live() || len(f.secs) == 0 {
		return
	}
	recs := make([]sink.Positioned, 0, n)
	var rejected []bool
	if len(res.Rejected) > 0 {
		rejected = make([]bool, len(records))
		for _, r := range res.Rejected {
			if r.Index >= 0 && r.Index < len(rejected) {
				rejected[r.Index] = true
			}
		}
	}
	pos := first
	for i := range records {
		if rejected != nil && rejected[i] {
			continue
		}
		recs = append(recs, sink.Positioned{Pos: pos, Record: records[i]})
		pos++
	}
	lb := liveBatch{first: first, recs: recs}
	for _, s := range f.secs {
		s.offer(lb)
	}
}

// offer enqueues without blocking, or drops and counts.
func (s *secondary) offer(lb liveBatch) {
	hi := lb.first + uint64(len(lb.recs))
	s.qmu.Lock()
	select {
	case s.queue <- lb:
		s.inQ.Add(lb.first, hi)
		s.qmu.Unlock()
	default:
		s.qmu.Unlock()
		s.dropped.Add(int64(len(lb.recs)))
		s.f.obs.LiveDropped(s.name, len(lb.recs))
	}
}

func (s *secondary) unqueue(lo, hi uint64) {
	s.qmu.Lock()
	s.inQ.Remove(lo, hi)
	s.qmu.Unlock()
}

// run is the secondary's worker: live batches first, recovery windows in
// between.
func (s *secondary) run(ctx context.Context) {
	defer s.f.wg.Done()
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
			did, err := s.recoverWindow(ctx)
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

func (s *secondary) deliverLive(ctx context.Context, lb liveBatch) {
	hi := lb.first + uint64(len(lb.recs))
	defer s.unqueue(lb.first, hi)
	_ = s.deliver(ctx, lb.first, lb.recs, false)
}

// deliver commits recs (positions from lo on; positions between lo and a
// record hold nothing) in chunks of the sink's MaxBatchSize, retrying each
// until it is accounted for, and covers each chunk after its ack.
func (s *secondary) deliver(ctx context.Context, lo uint64, recs []sink.Positioned, recovery bool) error {
	max := s.snk.MaxBatchSize()
	if max <= 0 {
		max = len(recs)
	}
	for len(recs) > 0 {
		chunk := recs[:min(max, len(recs))]
		recs = recs[len(chunk):]
		if err := s.commitChunk(ctx, chunk, recovery); err != nil {
			return err
		}
		hi := chunk[len(chunk)-1].Pos + 1
		s.f.store.Cover(s.name, lo, hi)
		lo = hi
	}
	return nil
}

// errWindowTimeout says a recovery commit missed its window deadline.
var errWindowTimeout = errors.New("engine: recovery window deadline exceeded")

func (s *secondary) commitChunk(ctx context.Context, chunk []sink.Positioned, recovery bool) error {
	recs := make([]sink.Record, len(chunk))
	for i := range chunk {
		recs[i] = chunk[i].Record
	}
	b := sink.NewBatch(recs)
	backoff := s.f.opts.RetryMin
	for attempts := 1; ; attempts++ {
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if recovery {
			cctx, cancel = context.WithTimeout(ctx, s.f.opts.WindowTime)
		}
		res, err := s.snk.Commit(cctx, b)
		timedOut := cctx.Err() != nil && ctx.Err() == nil
		cancel()
		if err == nil {
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
		s.f.log.Debug("secondary commit failed; retrying", "sink", s.name, "recovery", recovery, "backoff", backoff, "err", err)
		if recovery && timedOut && len(chunk) > minWindowRecords {
			// Too big for the window's time: let the caller shrink it.
			return fmt.Errorf("%w (%d records in %v): %w", errWindowTimeout, len(chunk), s.f.opts.WindowTime, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, s.f.opts.RetryMax)
	}
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
	if len(rej) == 0 {
		return
	}
	if recovery && s.f.opts.Mode == RecoverySkipQuarantine {
		s.skipped.Add(int64(len(rej)))
		s.f.obs.QuarantineSkipped(s.name, len(rej))
		return
	}
	qs, _ := quarantined(rej, len(chunk), func(i int) (sink.Record, uint64) { return chunk[i].Record, chunk[i].Pos },
		QuarantinedRecord{Sink: s.name, Recovery: recovery, Reject: record.Rejection{
			Stage: record.StageSecondary, Component: s.name, Attempts: attempts, FirstSeen: time.Now().UnixNano()}})
	s.quarantined.Add(int64(len(qs)))
	countByCode(qs, func(code record.Code, n int) { s.f.obs.Quarantined(s.name, code, n, recovery) })
	shed := 0
	for _, q := range qs {
		select {
		case s.quar <- q:
		default:
			shed++
		}
	}
	if shed > 0 {
		s.shedQuarantine(shed, "quarantine lane full")
	}
}

func (s *secondary) shedQuarantine(n int, why string) {
	s.shed.Add(int64(n))
	s.f.obs.QuarantineShed(s.name, n)
	now := time.Now().UnixNano()
	if last := s.lastShed.Load(); now-last >= int64(quarantineLogEvery) && s.lastShed.CompareAndSwap(last, now) {
		s.f.log.Warn("quarantine records shed; they remain in raw", "sink", s.name, "records", n,
			"shed_total", s.shed.Load(), "reason", why)
	}
}

// runQuarantine writes the sink's quarantine lane.
func (s *secondary) runQuarantine(ctx context.Context) {
	defer s.f.wg.Done()
	q := s.cfg.Quarantine
	for {
		var first QuarantinedRecord
		select {
		case <-ctx.Done():
			return
		case first = <-s.quar:
		}
		recs := []QuarantinedRecord{first}
	fill:
		for len(recs) < quarantineBatch {
			select {
			case r := <-s.quar:
				recs = append(recs, r)
			default:
				break fill
			}
		}
		if q == nil {
			for _, r := range recs {
				s.f.log.Warn("record rejected by secondary (no quarantine lane configured)", "sink", s.name,
					"pos", r.Pos, "id", r.Record.ID.String(), "code", r.Reject.Code.String(), "reason", r.Reject.Error, "recovery", r.Recovery)
			}
			continue
		}
		if err := q.Quarantine(ctx, recs); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.shedQuarantine(len(recs), "quarantine write failed: "+err.Error())
		}
	}
}

// recoverWindow replays one window of the first gap in the sink's
// coverage (positions queued for live delivery count as covered). It
// reports whether there was anything to do.
func (s *secondary) recoverWindow(ctx context.Context) (bool, error) {
	end := s.f.end.Load()
	cov := s.f.store.Coverage(s.name)
	s.qmu.Lock()
	cov.AddSet(&s.inQ)
	s.qmu.Unlock()
	gap, ok := cov.FirstGap(end)
	if !ok {
		return false, nil
	}
	want := int(min(uint64(s.window), gap.Len()))
	rctx, cancel := context.WithTimeout(ctx, s.f.opts.WindowTime)
	recs, err := s.f.reader.ReadFrom(rctx, gap.Lo, want)
	cancel()
	var gone sink.PositionsGone
	if errors.As(err, &gone) && errors.Is(err, sink.ErrPositionGone) {
		return s.stepOver(gap, gone)
	}
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		s.sleep(ctx, s.f.opts.RetryMax)
		return true, fmt.Errorf("read raw from %d: %w", gap.Lo, err)
	}
	keep := 0
	for keep < len(recs) && recs[keep].Pos < gap.Hi {
		keep++
	}
	if keep == 0 {
		if len(recs) > 0 {
			// Raw holds nothing in the gap: the next record is past it.
			s.f.store.Cover(s.name, gap.Lo, gap.Hi)
			return true, nil
		}
		// Raw returned nothing below an end it acknowledged: never
		// guess that the gap is empty; look again later.
		return false, fmt.Errorf("raw returned nothing from %d below its end %d", gap.Lo, end)
	}
	err = s.deliver(ctx, gap.Lo, recs[:keep], true)
	switch {
	case errors.Is(err, errWindowTimeout):
		s.window = max(minWindowRecords, s.window/2)
		s.f.log.Warn("recovery window too slow; halving it", "sink", s.name, "window_records", s.window, "err", err)
		return true, nil
	case err != nil:
		return true, err
	}
	if s.window < s.f.opts.WindowRecords {
		s.window = min(s.f.opts.WindowRecords, s.window*2)
	}
	return true, nil
}

// stepOver records that the part of gap raw reports gone will never
// reach the sink: it is covered — there is nothing left to deliver — and
// counted and logged as unrecoverable, so that recovery goes on with what
// raw still keeps instead of asking for the lost span forever.
func (s *secondary) stepOver(gap Span, gone sink.PositionsGone) (bool, error) {
	lo, hi := gone.GonePositions()
	if lo > gap.Lo || hi <= gap.Lo {
		return false, fmt.Errorf("raw reported positions [%d, %d) gone when asked for %d: %w", lo, hi, gap.Lo, gone)
	}
	hi = min(hi, gap.Hi)
	s.f.store.Cover(s.name, gap.Lo, hi)
	s.unrecoverable.Add(int64(hi - gap.Lo))
	s.f.obs.Unrecoverable(s.name, hi-gap.Lo)
	s.f.log.Error("positions the secondary lacks are no longer kept by raw; they cannot be recovered into it",
		"sink", s.name, "from", gap.Lo, "to", hi, "err", gone)
	return true, nil
}

func (s *secondary) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// flusher writes coverage and reports gauges every FlushInterval.
func (f *Fanout) flusher(ctx context.Context) {
	defer f.wg.Done()
	t := time.NewTicker(f.opts.FlushInterval)
	defer t.Stop()
	var lastErrLog time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if f.opts.Role == RoleRecovery {
			if err := f.store.Reload(ctx); err == nil {
				if re, err := f.reader.End(ctx); err == nil {
					e := min(re, f.store.RawEnd())
					if e > f.end.Load() {
						f.end.Store(e)
					}
				}
			}
		}
		if err := f.store.Flush(ctx); err != nil && ctx.Err() == nil && time.Since(lastErrLog) > storeRetryLogEvery {
			lastErrLog = time.Now()
			f.log.Error("offset store write failed; coverage lags until it succeeds", "err", err)
		}
		f.report()
	}
}

func (f *Fanout) report() {
	var backlog uint64
	for _, st := range f.Stats().Sinks {
		f.obs.Coverage(st.Name, st.CoveredPrefix, st.Lag, st.Missing)
		backlog = max(backlog, st.Lag)
	}
	f.obs.RecoveryBacklog(backlog)
}

// SinkStats is one secondary's state.
type SinkStats struct {
	Name string
	// CoveredPrefix: every position below it is covered.
	CoveredPrefix uint64
	// Lag: positions below raw's end the sink has not durably received
	// (covered by neither an ack nor a recovery): Queued plus Missing.
	Lag uint64
	// Missing: positions below raw's end neither covered nor queued; only
	// recovery will deliver them.
	Missing uint64
	// Queued: positions waiting in (or being delivered from) the queue.
	Queued uint64
	// Counters since start.
	LiveDelivered, Recovered, LiveDropped, Quarantined, QuarantineShed, QuarantineSkipped, CommitFailures int64
	// Unrecoverable counts positions stepped over because raw no longer
	// keeps them.
	Unrecoverable int64
}

// FanoutStats is the fan-out's state.
type FanoutStats struct {
	RawEnd uint64
	// Backlog is the largest Lag over the secondaries.
	Backlog uint64
	Sinks   []SinkStats
}

// Stats reports the fan-out's state.
func (f *Fanout) Stats() FanoutStats {
	st := FanoutStats{RawEnd: f.end.Load()}
	for _, s := range f.secs {
		cov := s.f.store.Coverage(s.name)
		s.qmu.Lock()
		queued := s.inQ.Count(st.RawEnd)
		all := cov.Clone()
		all.AddSet(&s.inQ)
		s.qmu.Unlock()
		ss := SinkStats{Name: s.name, CoveredPrefix: cov.Prefix(), Lag: cov.Missing(st.RawEnd), Missing: all.Missing(st.RawEnd), Queued: queued,
			LiveDelivered: s.delivered.Load(), Recovered: s.recovered.Load(), LiveDropped: s.dropped.Load(),
			Quarantined: s.quarantined.Load(), QuarantineShed: s.shed.Load(), QuarantineSkipped: s.skipped.Load(),
			CommitFailures: s.failures.Load(), Unrecoverable: s.unrecoverable.Load()}
		st.Backlog = max(st.Backlog, ss.Lag)
		st.Sinks = append(st.Sinks, ss)
	}
	return st
}

// Close stops the workers (records queued for live delivery and not yet
// acknowledged are left to recovery at the next start), writes the
// coverage recorded so far, and closes the secondaries, their quarantine
// lanes (those that are io.Closers) and raw.
func (f *Fanout) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed.Swap(true) {
		return nil
	}
	f.cancel()
	f.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), defaultCloseFlushTimeout)
	defer cancel()
	var errs []error
	if err := f.store.Flush(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, s := range f.secs {
		if err := s.snk.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", s.name, err))
		}
		if c, ok := s.cfg.Quarantine.(io.Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close %s quarantine: %w", s.name, err))
			}
		}
	}
	if f.raw != nil {
		if err := f.raw.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close raw %s: %w", f.raw.Name(), err))
		}
	}
	return errors.Join(errs...)
}
