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

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/tap"
	"github.com/weir-io/weir/sink"
)

// Defaults for zero FanoutOptions and SecondaryConfig fields.
const (
	DefaultQueueBatches      = 64
	DefaultQueueBytes        = 64 << 20
	DefaultQuarantineBuffer  = 4096
	DefaultQuarantineBytes   = 16 << 20
	DefaultWindowRecords     = 4096
	DefaultWindowTime        = 10 * time.Second
	DefaultRecoveryInterval  = time.Second
	DefaultFlushInterval     = 250 * time.Millisecond
	DefaultRetryMin          = 50 * time.Millisecond
	DefaultRetryMax          = 5 * time.Second
	defaultCloseFlushTimeout = 10 * time.Second
)

// SecondaryConfig is one secondary sink.
type SecondaryConfig struct {
	Sink sink.Sink
	// Name keys the sink's coverage in the offset store; it must be unique
	// and stable across restarts. Empty means Sink.Name().
	Name string
	// QueueBatches bounds the live queue, in batches. Zero means
	// DefaultQueueBatches.
	QueueBatches int
	// QueueBytes bounds the live queue in bytes too: what its batches hold
	// in memory (sink.Record.MemSize). A batch that would take the queue
	// past it is dropped to recovery, unless the queue is empty. Zero
	// means DefaultQueueBytes.
	QueueBytes int64
	// Quarantine receives rejected records; nil logs and counts them.
	Quarantine lane.Lane
	// QuarantineBuffer bounds the quarantine lane, in records. Zero means
	// DefaultQuarantineBuffer.
	QuarantineBuffer int
	// QuarantineBytes bounds the quarantine lane in bytes too (what its
	// waiting records hold, sink.Record.MemSize): the lane's own budget,
	// never taken from FanoutOptions.Budget, so a stalled quarantine
	// writer cannot slow the clean path; past it records are shed. Zero
	// means DefaultQuarantineBytes.
	QuarantineBytes int64
	// StartAtEnd: a sink the offset store has never seen starts covered up
	// to raw's current end instead of being recovered from position 0.
	StartAtEnd bool
	// MaxAttempts bounds the commits of a batch that keeps failing with
	// transient errors: after the MaxAttempts-th its records are given up
	// on — accounted for, covered, and handed to the quarantine lane with
	// code retry-exhausted (raw still holds them). Zero retries until the
	// sink answers.
	MaxAttempts int
	// Tap is shown the records the sink acknowledged (live and recovered,
	// not those it refused), QuarantineTap those it refused, with their
	// reason code (weir tap; nil: none).
	Tap, QuarantineTap *tap.Point
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
	// HealthInterval is how often each secondary's health is polled and
	// reported (Observer.SecondaryHealth); zero means
	// DefaultHealthInterval.
	HealthInterval time.Duration
	// RetryMin and RetryMax bound the backoff between failed commits.
	RetryMin, RetryMax time.Duration
	Observer           Observer
	Logger             *slog.Logger

	// Budget is the node's memory budget (flow control). A batch offered
	// to the secondaries reserves what it holds once, without waiting, and
	// releases it when every secondary that queued it has committed it or
	// dropped it; a batch the budget cannot grant at once is dropped to
	// recovery, like one that finds a queue full, so raw is never held
	// back. A recovery window reserves its estimated size before it is
	// read from raw and releases it once committed. nil: no admission.
	Budget *flow.Budget
	// RecordSizeEstimate seeds (and floors) the estimate of a record's
	// size that sizes a recovery window's reservation; it then follows
	// what the windows read. Zero means flow.DefaultRecordSizeEstimate.
	RecordSizeEstimate int64
	// Audit is told every recovery window delivered to a secondary, with
	// the recovery mode (the dq-audit trail notes the windows whose
	// rejects were not quarantined: skip-quarantine). nil: not told.
	Audit RecoveryAudit
	// Pacer scales the batches committed to secondaries and the recovery
	// windows by flow control's state and profile, and is told how every
	// commit to a secondary went. nil: unscaled, nothing told.
	Pacer flow.Pacer

	// Claims shares recovery among the nodes on one raw: a secondary's
	// recovery works only on windows of ClaimPositions raw positions it
	// has claimed, and records their coverage under the claim's fencing
	// token (claimed.go); Store must then be a FencedStore. The windows
	// with a gap that no node holds are reported on every node
	// (Observer.RecoveryWindows), recovering or not. nil: this node is the
	// only one recovering its raw.
	Claims Claims
	// ClaimPositions is the size of a claimable window, in raw positions.
	// Zero means DefaultClaimPositions.
	ClaimPositions uint64
}

// RecoveryAudit hears of recovered windows (*dqaudit.Trail).
type RecoveryAudit interface {
	// Recovered: raw positions [lo, hi) were recovered into the sink in
	// mode ("rehydrate" or "skip-quarantine").
	Recovered(sinkName string, lo, hi uint64, mode string)
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
	fenced FencedStore // the store, with Claims
	obs    Observer
	log    *slog.Logger
	secs   []*secondary

	end    atomic.Uint64 // raw end acknowledged to this process
	held   atomic.Int64  // bytes live batches hold from the budget
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
	mu     sync.Mutex // Close
}

var _ sink.Sink = (*Fanout)(nil)

// NewFanout validates the topology, loads coverage from the store and
// starts the workers. It stops them when Close is called.
func NewFanout(ctx context.Context, opts FanoutOptions) (*Fanout, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	f := &Fanout{opts: opts, raw: opts.Raw, reader: opts.Reader, store: opts.Store, obs: opts.Observer,
		log: opts.Logger.With("component", "fanout", "role", opts.Role.String())}
	f.fenced, _ = opts.Store.(FencedStore)
	end, err := f.startEnd(ctx)
	if err != nil {
		return nil, err
	}
	f.end.Store(end)
	seen := map[string]bool{}
	for i, c := range opts.Secondaries {
		s, err := f.newSecondary(i, c, end, seen)
		if err != nil {
			return nil, err
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
	f.wg.Add(2)
	go f.flusher(wctx)
	go f.healthPoller(wctx)
	return f, nil
}

// check refuses a topology the fan-out cannot run.
func (o *FanoutOptions) check() error {
	if o.Raw == nil && (o.Role != RoleRecovery && !o.ExternalRaw || o.Reader == nil) {
		return errors.New("engine: fan-out: no primary raw")
	}
	if o.ExternalRaw && o.Raw != nil {
		return errors.New("engine: fan-out: ExternalRaw with a Raw sink: raw has one writer")
	}
	if o.Raw != nil && !o.Raw.Replayable() {
		return fmt.Errorf("engine: fan-out: %s cannot be primary raw: it is not replayable", o.Raw.Name())
	}
	if o.Store == nil {
		return errors.New("engine: fan-out: no offset store")
	}
	if _, ok := o.Store.(FencedStore); o.Claims != nil && !ok {
		return fmt.Errorf("engine: fan-out: claimed recovery needs an offset store that checks fencing tokens; %s does not", o.Store.Where())
	}
	return nil
}

func (o FanoutOptions) withDefaults() FanoutOptions {
	if o.Reader == nil {
		o.Reader = o.Raw
	}
	if o.WindowRecords <= 0 {
		o.WindowRecords = DefaultWindowRecords
	}
	if o.WindowTime <= 0 {
		o.WindowTime = DefaultWindowTime
	}
	if o.RecoveryInterval <= 0 {
		o.RecoveryInterval = DefaultRecoveryInterval
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = DefaultHealthInterval
	}
	if o.RetryMin <= 0 {
		o.RetryMin = DefaultRetryMin
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(DefaultRetryMax, o.RetryMin)
	}
	if o.Observer == nil {
		o.Observer = NopObserver{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ClaimPositions == 0 {
		o.ClaimPositions = DefaultClaimPositions
	}
	if o.RecordSizeEstimate <= 0 {
		o.RecordSizeEstimate = flow.DefaultRecordSizeEstimate
	}
	return o
}

// startEnd is the raw end the fan-out starts from: raw's own, noted in
// the store by a writer; for a recovery-only node, no further than the
// end a writer recorded after its acks (positions may lag, never lead).
func (f *Fanout) startEnd(ctx context.Context) (uint64, error) {
	end, err := f.reader.End(ctx)
	if err != nil {
		return 0, fmt.Errorf("engine: fan-out: raw end: %w", err)
	}
	if f.opts.Role != RoleRecovery {
		f.store.NoteRawEnd(end)
		return end, nil
	}
	if err := f.store.Reload(ctx); err != nil {
		return 0, fmt.Errorf("engine: fan-out: %w", err)
	}
	return min(end, f.store.RawEnd()), nil
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
	f.offer(newLiveBatch(first, positioned(first, records, res, n)))
}

// positioned numbers the n records of a batch that raw committed from
// first on, leaving out those it rejected.
func positioned(first uint64, records []sink.Record, res sink.CommitResult, n int) []sink.Positioned {
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
	return recs
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
	for _, s := range f.secs {
		s.discardQueue() // left to recovery at the next start
	}
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
