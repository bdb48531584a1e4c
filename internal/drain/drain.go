// Package drain delivers sealed write-ahead-buffer segments to a sink.
//
// The drain is the only reader that removes data from the WAB. For each
// sealed segment it reads the records not yet confirmed, hands them to the
// sink in sub-batches of at most Sink.MaxBatchSize records, and after every
// sub-batch is fully accounted for — committed by the sink, and any rejected
// records durably written to the dead-letter lane — records the progress in
// the segment's .confirmed sidecar. A segment is deleted only once all of its
// records are confirmed.
//
// # Delivery guarantee
//
// Delivery is at least once. Progress is recorded only after the sink's
// Commit has returned and the sub-batch's dead letters are durable, so a
// crash (or a cancelled context) at any earlier point replays that sub-batch
// on the next run. Sinks deduplicate on the record id, which is a function
// of the segment and the record's position in it, so a replay carries the
// same ids.
//
// # States
//
// The drain is always in exactly one State:
//
//   - Idle: nothing to deliver; waiting for a seal notification, the poll
//     interval or the end of the context.
//   - Draining: committing sub-batches.
//   - RetryingTransient: the sink returned a transient error; the same
//     sub-batch is retried with capped exponential backoff. After
//     MaxRetries retries the segment is left on disk, logged at error, and
//     the drain moves on; the segment is attempted again on a later pass
//     (no sooner than RetryMax later, or as soon as the sink's health poll
//     finds it healthy again after it was not).
//   - BlockedDeadLetterFull: writing a sub-batch's dead letters would take
//     the dead-letter lane past DeadLetterMaxBytes. The drain wakes every
//     DeadLetterCheckInterval, rescans the lane (an operator may have removed
//     files) and, once there is room, sends the same sub-batch again.
//     Nothing of that sub-batch is confirmed while blocked.
//
// docs/drain.md has the transition diagram.
//
// # Dead-letter lane
//
// Records the sink refuses permanently are written to
// <wab_dir>/dead_letter/dl_NNNNNNNN.wab.sealed, one file per sub-batch that
// had rejections, in the WAB's own segment format (header shard
// wab.DeadLetterShard) so that the segment reader can read them back. Each
// record keeps its payload, durability tier and receive time; its Meta field
// is a record.Meta with the record's own metadata (key, headers, event
// time, origin), the id and source it was delivered under, and a
// record.Rejection: the reason code (the sink's Rejection.Code; a permanent
// batch error is sink-refused), stage "drain", the sink's name, the error
// text, the attempts made, the first-seen time and the record's place in
// the buffer. DecodeMeta reads it, and the version-1 metas of older files.
//
// Exhausted retries never dead-letter: the segment stays in the buffer and
// is attempted again (see RetryingTransient), so no dead letter carries
// record.CodeRetryExhausted.
package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

// Defaults for Options. A zero option falls back to its default.
const (
	// DefaultRetryBase is the first backoff after a transient sink error.
	DefaultRetryBase = 100 * time.Millisecond
	// DefaultRetryMax caps the backoff between retries. It is also how long
	// a segment whose retries were exhausted waits before it is attempted
	// again.
	DefaultRetryMax = 10 * time.Second
	// DefaultMaxRetries is how many times a sub-batch is retried after a
	// transient error before its segment is set aside.
	DefaultMaxRetries = 5
	// DefaultDeadLetterMaxBytes caps the dead-letter lane's size on disk.
	DefaultDeadLetterMaxBytes int64 = 1 << 30
	// DefaultDeadLetterCheckInterval is how often a drain blocked on a full
	// dead-letter lane rescans it.
	DefaultDeadLetterCheckInterval = 5 * time.Second
	// DefaultHealthInterval is how often the sink's health is polled,
	// whatever the drain's state.
	DefaultHealthInterval = 30 * time.Second
	// DefaultPollInterval is how often an idle drain lists sealed segments
	// even without a seal notification.
	DefaultPollInterval = time.Second
)

// RecordSource is the Source name given to records delivered from the WAB.
const RecordSource = "socket"

// State is the drain's state; see the package documentation.
type State int32

const (
	Idle State = iota
	Draining
	RetryingTransient
	BlockedDeadLetterFull
)

// States lists every State, so that a gauge can be initialised with all of
// its label values.
func States() []State {
	return []State{Idle, Draining, RetryingTransient, BlockedDeadLetterFull}
}

func (s State) String() string {
	switch s {
	case Idle:
		return "idle"
	case Draining:
		return "draining"
	case RetryingTransient:
		return "retrying_transient"
	case BlockedDeadLetterFull:
		return "blocked_dead_letter_full"
	default:
		return fmt.Sprintf("state(%d)", int32(s))
	}
}

// Source lists the WAB's sealed segments. *wab.Log satisfies it.
type Source interface {
	// Sealed lists the sealed segments on disk, by shard then sequence.
	Sealed() ([]wab.SegmentRef, error)
	// Notify receives a value whenever a segment is sealed. A nil channel
	// is allowed: the drain then relies on polling.
	Notify() <-chan struct{}
}

// Observer receives the drain's measurements, for metrics. Every method
// must be cheap and must not block. A nil Observer is allowed; embed
// NopObserver to implement only some methods.
type Observer interface {
	// State is called with the new state on every transition, and once with
	// the initial state when Run starts.
	State(s State)
	// Commit is called after every Sink.Commit: the batch size, how many
	// records the sink rejected, how long the call took and its error (nil
	// on success).
	Commit(records, rejected int, d time.Duration, err error)
	// Fresh is called after a Sink.Commit that succeeded, with its records
	// and the time it returned (weir_freshness_seconds).
	Fresh(recs []sink.Record, at time.Time)
	// Retry is called before each backoff after a transient error; attempt
	// counts from 1.
	Retry(attempt int, delay time.Duration, err error)
	// DeadLettered is called after a dead-letter file is durably written,
	// once for each reason code among its records, with that code's count.
	DeadLettered(code record.Code, records int)
	// DeadLetterTotals reports the dead-letter lane's current size: called
	// when Run starts (derived from disk), after every write and after
	// every rescan.
	DeadLetterTotals(files int, bytes int64)
	// DeadLetterFull is called once per entry into BlockedDeadLetterFull.
	DeadLetterFull()
	// SinkHealth is called with every health poll's result.
	SinkHealth(h sink.Health)
	// SegmentDelivered is called after a segment is fully delivered and
	// removed.
	SegmentDelivered(ref wab.SegmentRef, records uint64)
	// SegmentDeferred is called when a segment is left on disk to be
	// attempted on a later pass (retries exhausted, read or write error).
	SegmentDeferred(ref wab.SegmentRef, err error)
	// SegmentsDamaged is called with the number of sealed segments set
	// aside because their next record to deliver is damaged (a
	// *wab.CorruptionError): once when Run starts, after it has looked
	// for them (see Run), then at every change — one more found, one
	// delivered after all, or one gone from the listing (weir repair).
	SegmentsDamaged(n int)
}

// NopObserver implements Observer and ignores everything.
type NopObserver struct{}

func (NopObserver) State(State)                             {}
func (NopObserver) Commit(int, int, time.Duration, error)   {}
func (NopObserver) Fresh([]sink.Record, time.Time)          {}
func (NopObserver) Retry(int, time.Duration, error)         {}
func (NopObserver) DeadLettered(record.Code, int)           {}
func (NopObserver) DeadLetterTotals(int, int64)             {}
func (NopObserver) DeadLetterFull()                         {}
func (NopObserver) SinkHealth(sink.Health)                  {}
func (NopObserver) SegmentDelivered(wab.SegmentRef, uint64) {}
func (NopObserver) SegmentDeferred(wab.SegmentRef, error)   {}
func (NopObserver) SegmentsDamaged(int)                     {}

// Options configure New. Zero values fall back to the Default constants.
type Options struct {
	// FS is the file system; default vfs.OS.
	FS vfs.FS
	// WABDir is the write-ahead buffer directory; the dead-letter lane is
	// its dead_letter subdirectory. Required.
	WABDir string
	// Source lists sealed segments. Required.
	Source Source
	// Sink receives the records. Required. The drain never calls Close.
	Sink sink.Sink
	// Logger; default discards.
	Logger *slog.Logger

	// RetryBase and RetryMax shape the backoff after a transient error: the
	// n-th retry (n from 1) waits RetryBase·2^(n-1), at most RetryMax.
	RetryBase time.Duration
	RetryMax  time.Duration
	// MaxRetries is how many retries follow the first failed attempt before
	// the segment is set aside. Negative means no retries.
	MaxRetries int
	// DeadLetterMaxBytes caps the dead-letter lane's size on disk.
	DeadLetterMaxBytes int64
	// DeadLetterCheckInterval is how often a blocked drain rescans the lane.
	DeadLetterCheckInterval time.Duration
	// HealthInterval is how often Sink.Health is polled.
	HealthInterval time.Duration
	// SinkOpened, when not nil, is closed once a sink that was not open
	// when the drain started (the daemon opens sinks in the background)
	// opens: what a sink error set aside is attempted at once, not at
	// the next health poll or RetryMax later.
	SinkOpened <-chan struct{}
	// PollInterval is how often an idle drain lists segments without a
	// notification.
	PollInterval time.Duration
	// Linger is how long records readable in an open segment, fewer than
	// a full sub-batch, wait for more before they are delivered (a
	// TailSource only); 0 means DefaultLinger, negative none.
	Linger time.Duration
	// SealedOnly makes the drain deliver sealed segments only, even from
	// a TailSource.
	SealedOnly bool

	// Now returns the current time; default time.Now.
	Now func() time.Time
	// Sleep waits for d or until ctx ends, returning ctx's error in that
	// case. It is used for retry backoff and for the blocked state's wakes.
	// Default: a timer.
	Sleep func(ctx context.Context, d time.Duration) error

	// Observer receives measurements; nil is allowed.
	Observer Observer

	// Budget is the node's memory budget (flow control): each sub-batch's
	// estimated in-memory size is reserved from it before the records are
	// read into memory and released once the sub-batch is confirmed or
	// abandoned. A record larger than the budget can grant goes to the
	// dead-letter lane with code oversize. nil: no admission.
	Budget *flow.Budget
	// Estimator estimates a record's in-memory size from its size in the
	// segment, and learns from what the records read occupy; nil makes one
	// with flow.DefaultRecordSizeEstimate as its floor. Used with Budget.
	Estimator *flow.Estimator
	// Pacer scales every sub-batch by flow control's state and profile, and
	// is told how every Commit went; nil: full sub-batches, nothing told.
	Pacer flow.Pacer
	// Oversize, if set, is called for every record dead-lettered as larger
	// than the budget can grant (a metric).
	Oversize func()
}

// Drain delivers sealed segments to a sink. Create it with New and run it
// with Run.
type Drain struct {
	fs           vfs.FS
	wabDir       string
	src          Source
	sink         sink.Sink
	log          *slog.Logger
	obs          Observer
	now          func() time.Time
	sleep        func(context.Context, time.Duration) error
	retryBase    time.Duration
	retryMax     time.Duration
	maxRetries   int
	dlCheck      time.Duration
	healthEvery  time.Duration
	pollInterval time.Duration
	linger       time.Duration

	// tails is the Source when it is a TailSource (nil with SealedOnly).
	tails TailSource
	// tailSeen and tailUntil hold, by shard, a lingering tail's start and
	// a tail set aside until when. Used only by Run's goroutine.
	tailSeen  map[int]tailSeen
	tailUntil map[int]time.Time
	// tailDue is when the earliest lingering (or set aside) tail is due.
	tailDue time.Time

	dl *deadLetters

	adm      admission
	pacer    flow.Pacer // nil: none
	oversize func()     // never nil

	state   atomic.Int32
	running atomic.Bool
	// busySince is when Run's goroutine last started work of its own
	// (listing, reading, confirming, dead-lettering), in nanoseconds on the
	// monotonic clock (see monoNow); 0 while it waits (for work, a backoff,
	// a dead-letter rescan) or a Sink.Commit is in progress. Read by Busy.
	busySince atomic.Int64
	// healthNudge asks the health loop for an extra poll (coalesced).
	healthNudge chan struct{}
	// sinkBack is signalled by the health loop when the sink turns
	// healthy again: segments a sink error set aside are attempted at once.
	sinkBack chan struct{}
	// sinkOpened is Options.SinkOpened until it has been seen closed.
	sinkOpened <-chan struct{}
	// deferred holds segments set aside, by path, with the time before
	// which they are not attempted again. Used only by Run's goroutine.
	deferred map[string]deferral
	// damaged holds, by path, the segments set aside for damage, until
	// they are delivered or leave the listing. Unlike deferred, an entry
	// stays while its segment is attempted again. Used only by Run's
	// goroutine.
	damaged map[string]struct{}
	// damageReported is set once Run has reported the count found at
	// start; changes are reported from then on.
	damageReported bool
}

// deferral is a segment set aside: until when, and whether for damage
// (which a healthy sink does not mend) rather than a sink error.
type deferral struct {
	until   time.Time
	corrupt bool
}

// New checks opts, creates the dead-letter directory if needed and derives
// the lane's totals from disk.
func New(opts Options) (*Drain, error) {
	if opts.WABDir == "" {
		return nil, errors.New("drain: WABDir is required")
	}
	if opts.Source == nil {
		return nil, errors.New("drain: Source is required")
	}
	if opts.Sink == nil {
		return nil, errors.New("drain: Sink is required")
	}
	if n := opts.Sink.MaxBatchSize(); n < 1 {
		return nil, fmt.Errorf("drain: sink %s: MaxBatchSize %d, want at least 1", opts.Sink.Name(), n)
	}
	d := &Drain{
		fs:           opts.FS,
		wabDir:       opts.WABDir,
		src:          opts.Source,
		sink:         opts.Sink,
		log:          opts.Logger,
		obs:          opts.Observer,
		now:          opts.Now,
		sleep:        opts.Sleep,
		retryBase:    orDuration(opts.RetryBase, DefaultRetryBase),
		retryMax:     orDuration(opts.RetryMax, DefaultRetryMax),
		maxRetries:   opts.MaxRetries,
		dlCheck:      orDuration(opts.DeadLetterCheckInterval, DefaultDeadLetterCheckInterval),
		healthEvery:  orDuration(opts.HealthInterval, DefaultHealthInterval),
		pollInterval: orDuration(opts.PollInterval, DefaultPollInterval),
		healthNudge:  make(chan struct{}, 1),
		sinkBack:     make(chan struct{}, 1),
		sinkOpened:   opts.SinkOpened,
		deferred:     make(map[string]deferral),
		damaged:      make(map[string]struct{}),
		tailSeen:     make(map[int]tailSeen),
		tailUntil:    make(map[int]time.Time),
	}
	if ts, ok := opts.Source.(TailSource); ok && !opts.SealedOnly {
		d.tails = ts
	}
	switch {
	case opts.Linger == 0:
		d.linger = DefaultLinger
	case opts.Linger > 0:
		d.linger = opts.Linger
	}
	if d.fs == nil {
		d.fs = vfs.OS
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.log = d.log.With("component", "drain", "sink", opts.Sink.Name())
	if d.obs == nil {
		d.obs = NopObserver{}
	}
	d.pacer, d.oversize = opts.Pacer, opts.Oversize
	if d.oversize == nil {
		d.oversize = func() {}
	}
	d.adm = newAdmission(opts.Budget, opts.Estimator, func(waiting bool) {
		if waiting {
			d.markIdle()
		} else {
			d.markBusy()
		}
	})
	if d.now == nil {
		d.now = time.Now
	}
	if d.sleep == nil {
		d.sleep = sleepCtx
	}
	switch {
	case d.maxRetries == 0:
		d.maxRetries = DefaultMaxRetries
	case d.maxRetries < 0:
		d.maxRetries = 0
	}
	if d.retryMax < d.retryBase {
		d.retryMax = d.retryBase
	}
	maxBytes := opts.DeadLetterMaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultDeadLetterMaxBytes
	}
	dl, err := openDeadLetters(d.fs, DeadLetterDir(opts.WABDir), maxBytes, d.now)
	if err != nil {
		return nil, err
	}
	d.dl = dl
	return d, nil
}

// State is the drain's current state.
func (d *Drain) State() State { return State(d.state.Load()) }

// DeadLetterTotals is the dead-letter lane's current file count and size
// in bytes, as last derived from disk and updated by writes.
func (d *Drain) DeadLetterTotals() (files int, bytes int64) { return d.dl.totals() }

// Busy is how long the drain has been doing work of its own without
// reaching a wait or a sink call; zero while it waits for work, sleeps
// before a retry or a dead-letter rescan, calls Sink.Commit, or is not
// running. Time spent in the sink never counts: a slow or failing sink is
// not a stuck drain. A drain that stays busy for long is stuck, typically
// on its own disk I/O.
func (d *Drain) Busy() time.Duration {
	since := d.busySince.Load()
	if since == 0 {
		return 0
	}
	return time.Duration(max(monoNow()-since, 1))
}

func (d *Drain) markBusy() { d.busySince.Store(monoNow()) }
func (d *Drain) markIdle() { d.busySince.Store(0) }

// wait is d.sleep, not counted as busy.
func (d *Drain) wait(ctx context.Context, dur time.Duration) error {
	d.markIdle()
	defer d.markBusy()
	return d.sleep(ctx, dur)
}

// monoEpoch anchors monoNow.
var monoEpoch = time.Now()

// monoNow is a monotonic clock reading in nanoseconds, never 0.
func monoNow() int64 { return int64(time.Since(monoEpoch)) + 1 }

// Run delivers segments until ctx ends, then returns nil once every
// goroutine it started has exited. Work in progress when ctx ends is left
// unconfirmed and is replayed by the next Run. Run may be called only once.
func (d *Drain) Run(ctx context.Context) error {
	if !d.running.CompareAndSwap(false, true) {
		return errors.New("drain: Run called twice")
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer d.markIdle()

	d.obs.State(d.State())
	files, bytes := d.dl.totals()
	d.obs.DeadLetterTotals(files, bytes)

	wg.Add(1)
	go func() {
		defer wg.Done()
		d.healthLoop(ctx)
	}()

	d.findDamaged(ctx)
	d.obs.SegmentsDamaged(len(d.damaged))
	d.damageReported = true

	for ctx.Err() == nil {
		d.markBusy()
		progressed, err := d.pass(ctx)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			d.log.Error("listing sealed segments", "err", err)
		}
		if progressed {
			continue // there may be newly sealed segments already
		}
		d.setState(Idle)
		d.waitForWork(ctx)
	}
	return nil
}

// pass lists the sealed segments and attempts each one that is not set
// aside, interleaving shards. It reports whether any segment was delivered.
func (d *Drain) pass(ctx context.Context) (bool, error) {
	refs, err := d.src.Sealed()
	if err != nil {
		return false, fmt.Errorf("drain: list sealed segments: %w", err)
	}
	d.forgetVanished(refs)
	progressed := false
	pending := make(map[int]bool) // shards with a sealed segment left
	now := d.now()
	for _, ref := range interleave(refs) {
		if ctx.Err() != nil {
			return progressed, nil
		}
		if def, ok := d.deferred[ref.Path]; ok {
			if now.Before(def.until) {
				pending[ref.Shard] = true
				continue
			}
			delete(d.deferred, ref.Path)
		}
		d.setState(Draining)
		d.nudgeHealth()
		err := d.drainSegment(ctx, ref)
		switch {
		case err == nil:
			progressed = true
			d.setDamaged(ref.Path, false)
		case ctx.Err() != nil:
			return progressed, nil
		default:
			pending[ref.Shard] = true
			d.setAside(ref, err)
			d.setState(Draining)
		}
		now = d.now()
	}
	tailed, due := d.passTails(ctx, pending)
	d.tailDue = due
	return progressed || tailed, nil
}

// waitForWork waits for a seal notification, the poll interval (or the
// earliest deferred segment's due time, if sooner), the sink turning
// healthy again or opening (either ends the deferral of every segment a
// sink error set aside) or the end of ctx.
func (d *Drain) waitForWork(ctx context.Context) {
	wait := d.pollInterval
	now := d.now()
	for _, def := range d.deferred {
		if w := def.until.Sub(now); w < wait {
			wait = max(w, time.Millisecond)
		}
	}
	var tailGrew <-chan struct{}
	if d.tails != nil {
		tailGrew = d.tails.TailNotify()
		if !d.tailDue.IsZero() {
			// A lingering tail is due: wait for it alone (what joins it
			// meanwhile goes out with it).
			tailGrew = nil
			wait = min(wait, max(d.tailDue.Sub(now), 0))
		}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	d.markIdle()
	select {
	case <-ctx.Done():
	case <-d.src.Notify():
	case <-tailGrew:
	case <-t.C:
	case <-d.sinkBack:
		d.undefer()
	case <-d.sinkOpened:
		d.sinkOpened = nil // seen once
		d.undefer()
	}
}

// undefer ends the deferral of every segment a sink error set aside.
func (d *Drain) undefer() {
	for p, def := range d.deferred {
		if !def.corrupt {
			delete(d.deferred, p)
		}
	}
}

// interleave orders segments oldest first within each shard and takes one
// segment from each shard in turn, so that a backlog on one shard does not
// starve the others.
func interleave(refs []wab.SegmentRef) []wab.SegmentRef {
	byShard := make(map[int][]wab.SegmentRef)
	var shards []int
	for _, r := range refs {
		if _, ok := byShard[r.Shard]; !ok {
			shards = append(shards, r.Shard)
		}
		byShard[r.Shard] = append(byShard[r.Shard], r)
	}
	sort.Ints(shards)
	for _, s := range shards {
		q := byShard[s]
		sort.Slice(q, func(i, j int) bool { return q[i].Seq < q[j].Seq })
	}
	out := make([]wab.SegmentRef, 0, len(refs))
	for round := 0; len(out) < len(refs); round++ {
		for _, s := range shards {
			if q := byShard[s]; round < len(q) {
				out = append(out, q[round])
			}
		}
	}
	return out
}
