package wab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weir-io/weir/internal/vfs"
)

// Log is an open write-ahead buffer directory: one flusher per shard.
type Log struct {
	opts     Options // with defaults applied
	fs       vfs.FS
	dir      string
	logger   *slog.Logger
	obs      Observer
	instance [16]byte
	lock     io.Closer
	shards   []*shard
	notify   chan struct{}
	// tailNotify is signalled when an open segment's readable tail grows
	// (tail.go).
	tailNotify chan struct{}

	mu         sync.Mutex // serializes Close
	closed     bool
	closedFlag atomic.Bool   // set by Close before it waits for Submits
	closing    chan struct{} // closed when Close begins
	abort      chan struct{} // closed when Close's context ends
	flushers   sync.WaitGroup
}

func (o Options) withDefaults() (Options, error) {
	if o.FS == nil {
		o.FS = vfs.OS
	}
	if o.Dir == "" {
		return o, errors.New("wab: Options.Dir is required")
	}
	if o.Shards < 1 || o.Shards >= DeadLetterShard {
		return o, fmt.Errorf("wab: Options.Shards = %d, want 1..%d", o.Shards, DeadLetterShard-1)
	}
	if o.SegmentMaxBytes == 0 {
		o.SegmentMaxBytes = DefaultSegmentMaxBytes
	}
	if o.SegmentMaxBytes < HeaderSize+FooterFrameSize {
		return o, fmt.Errorf("wab: Options.SegmentMaxBytes = %d is too small", o.SegmentMaxBytes)
	}
	if o.SegmentMaxAge == 0 {
		o.SegmentMaxAge = DefaultSegmentMaxAge
	}
	if o.PreallocateBytes == 0 {
		o.PreallocateBytes = DefaultPreallocateBytes
	}
	if o.BatchMaxRecords <= 0 {
		o.BatchMaxRecords = DefaultBatchMaxRecords
	}
	if o.BatchDeadline < 0 {
		o.BatchDeadline = 0
	}
	if o.QueueCapacity <= 0 {
		o.QueueCapacity = DefaultQueueCapacity
	}
	if o.QueueCapacityBytes <= 0 {
		o.QueueCapacityBytes = DefaultQueueCapacityBytes
	}
	if o.MaxRecordBytes <= 0 {
		o.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if o.MaxRecordBytes > RecordLimit {
		return o, fmt.Errorf("wab: Options.MaxRecordBytes = %d exceeds the format limit %d", o.MaxRecordBytes, RecordLimit)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// Open locks the directory, recovers it (torn tails of open segments are
// truncated to the last valid record and the segments sealed; a corrupt
// sealed segment is a *CorruptionError and Open fails) and starts one
// flusher per shard.
//
// Shard directories beyond opts.Shards (left by an earlier configuration)
// are recovered and listed by Sealed, but get no flusher.
func Open(ctx context.Context, opts Options) (*Log, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := o.FS.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("wab: create %s: %w", o.Dir, err)
	}
	lk, err := o.FS.Lock(filepath.Join(o.Dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("wab: lock %s: %w", o.Dir, err)
	}
	l := &Log{
		opts:       o,
		fs:         o.FS,
		dir:        o.Dir,
		logger:     o.Logger.With("component", "wab"),
		obs:        o.Observer,
		lock:       lk,
		notify:     make(chan struct{}, 1),
		tailNotify: make(chan struct{}, 1),
		closing:    make(chan struct{}),
		abort:      make(chan struct{}),
	}
	next, err := l.recoverDir(ctx)
	if err != nil {
		lk.Close()
		return nil, err
	}
	l.shards = make([]*shard, o.Shards)
	for i := range l.shards {
		l.shards[i] = newShard(l, i, next[i])
	}
	l.flushers.Add(len(l.shards))
	for _, s := range l.shards {
		go s.run()
	}
	// Let the caller's drain pick up what recovery sealed.
	l.signal()
	return l, nil
}

// Shards is the number of shards.
func (l *Log) Shards() int { return len(l.shards) }

// Instance is the directory's instance id (created once, kept in the
// directory).
func (l *Log) Instance() [16]byte { return l.instance }

// Dir is the WAB directory.
func (l *Log) Dir() string { return l.dir }

// Submit queues a request on a shard, waiting at most wait for queue space
// — a place among QueueCapacity and room for its bytes within
// QueueCapacityBytes — (ErrQueueTimeout after that). A nil return means
// Done will be called.
//
// Submit fails at once, without calling Done, for a shard out of range, a
// malformed request, a payload over MaxRecordBytes (ErrRecordTooLarge), a
// failed shard (an error wrapping ErrShardFailed) or a closing log
// (ErrClosed).
func (l *Log) Submit(ctx context.Context, shard int, req *Request, wait time.Duration) error {
	return l.submit(ctx, shard, req, wait, false)
}

// SubmitInline is Submit for a caller that waits for the answer anyway (a
// producer connection's lone frame): when the shard is idle — its flusher
// waiting for work, nothing queued — it writes req on the caller's
// goroutine as a batch of its own, with the flusher's code and promises
// (write, fdatasync for Durable, then Done), and Done has been called when
// it returns; otherwise it queues req like Submit. A caller must not hold
// what Done waits for, and must accept being held for a write and an
// fdatasync (see inline.go).
func (l *Log) SubmitInline(ctx context.Context, shard int, req *Request, wait time.Duration) error {
	return l.submit(ctx, shard, req, wait, true)
}

func (l *Log) submit(ctx context.Context, shard int, req *Request, wait time.Duration, inline bool) error {
	if shard < 0 || shard >= len(l.shards) {
		return fmt.Errorf("wab: shard %d out of range [0, %d)", shard, len(l.shards))
	}
	n, err := l.check(req)
	if err != nil {
		return err
	}
	req.queued = n
	return l.queue(ctx, l.shards[shard], req, wait, inline)
}

// SubmitBatch is Submit for several requests to one shard, in order, with
// a single hand-off to the flusher (one place in the shard's queue, one
// channel operation, where Submit takes one per request: a producer
// connection submits every frame it read at once this way). Either every
// request is queued (nil: each Done will be called) or none is (the error,
// from the first request Submit would refuse). The flusher takes over
// reqs: the caller must not change the slice afterwards.
func (l *Log) SubmitBatch(ctx context.Context, shard int, reqs []*Request, wait time.Duration) error {
	if shard < 0 || shard >= len(l.shards) {
		return fmt.Errorf("wab: shard %d out of range [0, %d)", shard, len(l.shards))
	}
	switch len(reqs) {
	case 0:
		return nil
	case 1:
		return l.submit(ctx, shard, reqs[0], wait, false)
	}
	var total int64
	for _, r := range reqs {
		n, err := l.check(r)
		if err != nil {
			return err
		}
		total += n
	}
	return l.queue(ctx, l.shards[shard], &Request{batch: reqs, queued: total}, wait, false)
}

// check refuses a malformed request; it returns the request's payload and
// meta bytes.
func (l *Log) check(req *Request) (int64, error) {
	if req == nil || req.Done == nil {
		return 0, errors.New("wab: request without Done")
	}
	if req.Durability != Durable && req.Durability != Buffered {
		return 0, fmt.Errorf("wab: unknown durability %d", req.Durability)
	}
	if req.Metas != nil && len(req.Metas) != len(req.Payloads) {
		return 0, fmt.Errorf("wab: request has %d metas for %d payloads", len(req.Metas), len(req.Payloads))
	}
	var n int64
	for i := range req.Metas {
		if len(req.Metas[i]) > MaxMetaBytes {
			return 0, fmt.Errorf("%w: meta of %d bytes, limit %d", ErrRecordTooLarge, len(req.Metas[i]), MaxMetaBytes)
		}
		n += int64(len(req.Metas[i]))
	}
	for _, p := range req.Payloads {
		if len(p) > l.opts.MaxRecordBytes {
			return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrRecordTooLarge, len(p), l.opts.MaxRecordBytes)
		}
		n += int64(len(p))
	}
	return n, nil
}

// queue hands req (a request or a batch carrier) to s's flusher, or, with
// inline and an idle shard, writes it (SubmitInline).
func (l *Log) queue(ctx context.Context, s *shard, req *Request, wait time.Duration, inline bool) error {
	if err := s.err(); err != nil {
		return err
	}
	// Announce the send before looking at closedFlag; Close sets the flag
	// before it waits for the shard's count to reach zero. Either Close
	// sees this Submit and waits for it, or this Submit sees the flag:
	// no send on a closed queue, and every queued request is answered.
	// Per shard, not per log: a log-wide lock or counter here was one
	// cache line written by every connection on every frame.
	s.submitting.Add(1)
	defer s.submitting.Add(-1)
	if l.closedFlag.Load() {
		return ErrClosed
	}
	if inline && s.writeInline(req) {
		return nil
	}

	// Room for the bytes first, then a place in the queue; one wait
	// covers both. A hand-off holds at least one byte of the count until
	// the flusher takes it (or the send fails): no bytes counted means no
	// hand-off on its way to the flusher, which writeInline relies on.
	req.queued = max(req.queued, 1)
	var t *time.Timer
	if !s.takeBytes(req.queued) {
		if wait <= 0 {
			return ErrQueueTimeout
		}
		t = time.NewTimer(wait)
		defer t.Stop()
		if err := s.waitBytes(ctx, req.queued, t.C); err != nil {
			return err
		}
	}
	select {
	case s.queue <- req:
		return nil
	default:
	}
	if wait <= 0 {
		s.giveBytes(req.queued)
		return ErrQueueTimeout
	}
	if t == nil {
		t = time.NewTimer(wait)
		defer t.Stop()
	}
	var err error
	select {
	case s.queue <- req:
		return nil
	case <-t.C:
		err = ErrQueueTimeout
	case <-ctx.Done():
		err = ctx.Err()
	case <-l.closing:
		err = ErrClosed
	}
	s.giveBytes(req.queued)
	return err
}

// QueueFill is how full shard's queue is, from 0 to 1: the larger of its
// share of QueueCapacity and of QueueCapacityBytes (0 for a shard out of
// range). Flow control samples it.
func (l *Log) QueueFill(shard int) float64 {
	if shard < 0 || shard >= len(l.shards) {
		return 0
	}
	s := l.shards[shard]
	f := max(float64(len(s.queue))/float64(cap(s.queue)),
		float64(s.queuedBytes.Load())/float64(l.opts.QueueCapacityBytes))
	return min(f, 1)
}

// ShardErr is nil for a healthy shard, else the sticky error.
func (l *Log) ShardErr(shard int) error {
	if shard < 0 || shard >= len(l.shards) {
		return fmt.Errorf("wab: shard %d out of range [0, %d)", shard, len(l.shards))
	}
	return l.shards[shard].err()
}

// FlusherBusy is how long shard's flusher has been working on its current
// batch (collecting, writing, syncing, acknowledging, sealing); zero while
// it waits for work or for an out-of-range shard. A flusher that stays busy
// for long is stuck, typically in an fdatasync that does not return.
func (l *Log) FlusherBusy(shard int) time.Duration {
	if shard < 0 || shard >= len(l.shards) {
		return 0
	}
	since := l.shards[shard].busySince.Load()
	if since == 0 {
		return 0
	}
	return time.Duration(max(monoNow()-since, 1))
}

// monoEpoch anchors monoNow.
var monoEpoch = time.Now()

// monoNow is a monotonic clock reading in nanoseconds, never 0.
func monoNow() int64 { return int64(time.Since(monoEpoch)) + 1 }

// Sealed lists the sealed segments on disk, by shard then sequence.
func (l *Log) Sealed() ([]SegmentRef, error) { return ListSealed(l.fs, l.dir) }

// ListSealed lists the sealed segments under a WAB directory, by shard then
// sequence, without opening or locking it.
func ListSealed(fsys vfs.FS, dir string) ([]SegmentRef, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	var refs []SegmentRef
	err := eachSegment(fsys, dir, func(shard int, seq uint64, kind segKind, path string) {
		if kind == kindSealedSeg {
			refs = append(refs, SegmentRef{Shard: shard, Seq: seq, Path: path})
		}
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(refs, func(a, b SegmentRef) int {
		if a.Shard != b.Shard {
			return a.Shard - b.Shard
		}
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	return refs, nil
}

// eachSegment calls fn for every open or sealed segment in the shard
// directories under dir.
func eachSegment(fsys vfs.FS, dir string, fn func(shard int, seq uint64, kind segKind, path string)) error {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("wab: list %s: %w", dir, err)
	}
	for _, name := range names {
		id, ok := parseShardDir(name)
		if !ok {
			continue
		}
		sdir := filepath.Join(dir, name)
		segs, err := fsys.ReadDir(sdir)
		if err != nil {
			return fmt.Errorf("wab: list %s: %w", sdir, err)
		}
		for _, seg := range segs {
			if seq, kind := parseSegmentName(seg); kind == kindOpenSeg || kind == kindSealedSeg {
				fn(id, seq, kind, filepath.Join(sdir, seg))
			}
		}
	}
	return nil
}

// Notify receives a value (coalesced) whenever a segment is sealed.
func (l *Log) Notify() <-chan struct{} { return l.notify }

func (l *Log) signal() {
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// Close stops accepting requests, completes those queued, seals every open
// segment and releases the lock. Requests still queued when ctx ends get
// ErrClosed. The returned error joins the context's error (if it ended)
// and every shard's sticky error. A second Close returns nil.
func (l *Log) Close(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.closedFlag.Store(true)
	close(l.closing)
	l.mu.Unlock()

	// Wait for the Submits already past the flag (see Submit); a blocked
	// one returns at once now that closing is closed.
	for _, s := range l.shards {
		for s.submitting.Load() != 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	for _, s := range l.shards {
		close(s.queue)
	}
	done := make(chan struct{})
	go func() {
		l.flushers.Wait()
		close(done)
	}()
	var errs []error
	select {
	case <-done:
	case <-ctx.Done():
		close(l.abort)
		<-done
		errs = append(errs, fmt.Errorf("wab: close: %w", ctx.Err()))
	}
	for _, s := range l.shards {
		if err := s.err(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := l.lock.Close(); err != nil {
		errs = append(errs, fmt.Errorf("wab: release lock: %w", err))
	}
	return errors.Join(errs...)
}
