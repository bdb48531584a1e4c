package wab

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weir-io/weir/internal/vfs"
)

// segment is the open segment a flusher appends to. Owned by the flusher.
type segment struct {
	f        vfs.File
	path     string // the open (.wab) path
	hdr      Header
	off      int64 // current size = next write offset
	prealloc int64 // end of the region reserved with Preallocate
	records  uint64
	first    int64
	last     int64
	// firstWrite is when the first record was written (age rotation).
	firstWrite time.Time
}

// shard is one flusher: a queue and the goroutine that owns the shard's
// files. Only the flusher goroutine touches the fields below the line.
type shard struct {
	l     *Log
	id    int
	dir   string
	queue chan *Request

	mu     sync.Mutex
	failed error // sticky; wraps ErrShardFailed

	// busySince is when the flusher took up its current batch or seal, in
	// nanoseconds on the monotonic clock (see monoNow); 0 while it waits
	// for work. Read by FlusherBusy.
	busySince atomic.Int64

	// ---- owned by the flusher goroutine ----
	nextSeq     uint64
	seg         *segment
	batch       []*Request
	pending     *Request // taken from the queue, did not fit the last batch
	rotateAfter bool     // the last batch was cut because the segment is full
	buf         []byte   // batch encoding buffer, reused
	footBuf     []byte
	ageTimer    *time.Timer
	ageArmed    bool
	batchTimer  *time.Timer
}

func newShard(l *Log, id int, nextSeq uint64) *shard {
	s := &shard{
		l:          l,
		id:         id,
		dir:        filepath.Join(l.dir, ShardDirName(id)),
		queue:      make(chan *Request, l.opts.QueueCapacity),
		nextSeq:    nextSeq,
		ageTimer:   time.NewTimer(time.Hour),
		batchTimer: time.NewTimer(time.Hour),
	}
	s.ageTimer.Stop()
	s.batchTimer.Stop()
	return s
}

func (s *shard) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// fail makes cause the shard's sticky error (the first one wins) and
// returns the sticky error.
func (s *shard) fail(cause error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		s.failed = fmt.Errorf("%w: shard %d: %w", ErrShardFailed, s.id, classify(cause))
		s.l.logger.Error("shard failed; it accepts nothing until restart", "shard", s.id, "err", cause)
	}
	return s.failed
}

func (s *shard) run() {
	defer s.l.flushers.Done()
	if dstBuild {
		defer s.dstExit()
		s.dstStep()
	}
	defer s.ageTimer.Stop()
	defer s.batchTimer.Stop()
	s.busySince.Store(monoNow())
	if err := s.openSegment(); err != nil {
		s.l.logger.Warn("cannot prepare segment; will retry on the next batch", "shard", s.id, "err", err)
	}
	s.busySince.Store(0)
	for {
		if dstBuild {
			s.dstStep()
		}
		first := s.pending
		s.pending = nil
		if first == nil {
			select {
			case <-s.l.abort:
				s.abortQueued()
				s.shutdown()
				return
			default:
			}
			var ageC <-chan time.Time
			if s.ageArmed {
				ageC = s.ageTimer.C
			}
			select {
			case r, ok := <-s.queue:
				if !ok {
					s.shutdown()
					return
				}
				first = r
			case <-ageC:
				s.ageArmed = false
				if s.seg != nil && s.seg.records > 0 && s.err() == nil {
					s.busySince.Store(monoNow())
					s.rotate(true)
					s.busySince.Store(0)
				}
				continue
			case <-s.l.abort:
				s.abortQueued()
				s.shutdown()
				return
			}
		} else {
			select {
			case <-s.l.abort:
				first.Done(ErrClosed)
				s.abortQueued()
				s.shutdown()
				return
			default:
			}
		}
		s.busySince.Store(monoNow())
		s.collect(first)
		s.process()
		s.busySince.Store(0)
	}
}

// abortQueued fails every request still queued (the queue is closed).
func (s *shard) abortQueued() {
	if s.pending != nil {
		s.pending.Done(ErrClosed)
		s.pending = nil
	}
	for r := range s.queue {
		r.Done(ErrClosed)
	}
}

func requestBytes(r *Request) int64 {
	var n int64
	for i, p := range r.Payloads {
		m := 0
		if r.Metas != nil {
			m = len(r.Metas[i])
		}
		n += RecordSize(m, len(p))
	}
	return n
}

// collect fills s.batch starting with first: whatever is queued, up to
// BatchMaxRecords records, waiting up to BatchDeadline for more, and no
// more bytes than the open segment has room for.
func (s *shard) collect(first *Request) {
	s.batch = append(s.batch[:0], first)
	s.rotateAfter = false
	records := len(first.Payloads)
	bytes := requestBytes(first)
	room := s.l.opts.SegmentMaxBytes - FooterFrameSize
	if s.seg != nil {
		room -= s.seg.off
	} else {
		room -= HeaderSize
	}
	maxRecords := s.l.opts.BatchMaxRecords
	deadline := s.l.opts.BatchDeadline
	timerRunning := false
	defer func() {
		if timerRunning {
			s.batchTimer.Stop()
		}
	}()
	for records < maxRecords {
		var r *Request
		select {
		case q, ok := <-s.queue:
			if !ok {
				return
			}
			r = q
		default:
			if deadline <= 0 {
				return
			}
			if !timerRunning {
				s.batchTimer.Reset(deadline)
				timerRunning = true
			}
			select {
			case q, ok := <-s.queue:
				if !ok {
					return
				}
				r = q
			case <-s.batchTimer.C:
				timerRunning = false
				return
			case <-s.l.abort:
				return
			}
		}
		rb := requestBytes(r)
		if records+len(r.Payloads) > maxRecords {
			s.pending = r
			return
		}
		if bytes+rb > room {
			s.pending = r
			s.rotateAfter = true
			return
		}
		s.batch = append(s.batch, r)
		records += len(r.Payloads)
		bytes += rb
	}
}

func doneAll(batch []*Request, err error) {
	for _, r := range batch {
		r.Done(err)
	}
}

// process writes s.batch: one write, one fdatasync if any request is
// Durable, then the acks.
func (s *shard) process() {
	batch := s.batch
	defer func() {
		clear(s.batch)
		s.batch = s.batch[:0]
	}()
	if err := s.err(); err != nil {
		doneAll(batch, err)
		return
	}
	buf := s.buf[:0]
	records := 0
	for _, r := range batch {
		for i, p := range r.Payloads {
			var meta []byte
			if r.Metas != nil {
				meta = r.Metas[i]
			}
			buf = appendRecord(buf, r.Durability, r.Received, meta, p)
		}
		records += len(r.Payloads)
	}
	s.buf = buf
	if records == 0 {
		doneAll(batch, nil)
		return
	}
	if s.seg == nil {
		if err := s.openSegment(); err != nil {
			doneAll(batch, err)
			return
		}
	}
	if s.seg.records > 0 && s.seg.off+int64(len(buf))+FooterFrameSize > s.l.opts.SegmentMaxBytes {
		// The first request did not fit: seal now (on this batch's path;
		// the check after each batch makes this rare).
		s.rotate(true)
		if err := s.err(); err != nil {
			doneAll(batch, err)
			return
		}
		if s.seg == nil {
			if err := s.openSegment(); err != nil {
				doneAll(batch, err)
				return
			}
		}
	}
	seg := s.seg
	if err := s.reserve(int64(len(buf))); err != nil {
		doneAll(batch, err)
		return
	}
	n, err := seg.f.Write(buf)
	if err != nil {
		werr := fmt.Errorf("write %s at offset %d: %w", seg.path, seg.off, err)
		if n == 0 && isDiskFull(err) {
			// Nothing reached the file: this batch fails, the shard goes on.
			doneAll(batch, fmt.Errorf("wab: shard %d: %w", s.id, classify(werr)))
			return
		}
		doneAll(batch, s.fail(werr))
		return
	}
	if seg.records == 0 {
		seg.first = batch[0].Received
		seg.firstWrite = time.Now()
		if s.l.opts.SegmentMaxAge > 0 {
			s.ageTimer.Reset(s.l.opts.SegmentMaxAge)
			s.ageArmed = true
		}
	}
	seg.off += int64(len(buf))
	seg.records += uint64(records)
	for i := len(batch) - 1; i >= 0; i-- {
		if len(batch[i].Payloads) > 0 {
			seg.last = batch[i].Received
			break
		}
	}
	durable := false
	for _, r := range batch {
		if r.Durability == Buffered {
			r.Done(nil)
		} else {
			durable = true
		}
	}
	var syncDur time.Duration
	if durable {
		if dstBuild {
			dstBeforeSync(batch)
		}
		t0 := time.Now()
		err := seg.f.Sync()
		syncDur = time.Since(t0)
		if err != nil {
			ferr := s.fail(fmt.Errorf("fdatasync %s: %w", seg.path, err))
			for _, r := range batch {
				if r.Durability == Durable {
					r.Done(ferr)
				}
			}
			return
		}
		for _, r := range batch {
			if r.Durability == Durable {
				r.Done(nil)
			}
		}
	}
	if o := s.l.obs; o != nil {
		o.Batch(s.id, records, len(buf), syncDur)
		o.QueueDepth(s.id, len(s.queue))
	}
	// Off the ack path from here on.
	aged := s.l.opts.SegmentMaxAge > 0 && time.Since(seg.firstWrite) >= s.l.opts.SegmentMaxAge
	// Seal when the room left would not hold a batch like this one, so that
	// the next batch rarely has to wait for a seal.
	if s.rotateAfter || aged || seg.off+int64(len(buf))+FooterFrameSize > s.l.opts.SegmentMaxBytes {
		s.rotate(true)
		return
	}
	s.preallocAhead()
}

// reserve makes sure the preallocated region covers need more bytes and a
// footer. An out-of-space error fails only the batch.
func (s *shard) reserve(need int64) error {
	seg := s.seg
	chunk := s.l.opts.PreallocateBytes
	if chunk <= 0 || seg.off+need+FooterFrameSize <= seg.prealloc {
		return nil
	}
	end := max(seg.off+need+FooterFrameSize, min(seg.prealloc+chunk, s.l.opts.SegmentMaxBytes))
	if err := seg.f.Preallocate(seg.prealloc, end-seg.prealloc); err != nil {
		perr := fmt.Errorf("wab: shard %d: preallocate %s: %w", s.id, seg.path, err)
		if isDiskFull(err) {
			return classify(perr)
		}
		return s.fail(perr)
	}
	seg.prealloc = end
	return nil
}

// preallocAhead extends the reservation once less than half a chunk is
// left, after the batch was acked. Failures are left for reserve to report
// to the batch that actually needs the space.
func (s *shard) preallocAhead() {
	seg := s.seg
	chunk := s.l.opts.PreallocateBytes
	if chunk <= 0 || seg.prealloc-seg.off >= chunk/2 || seg.prealloc >= s.l.opts.SegmentMaxBytes {
		return
	}
	end := min(seg.prealloc+chunk, s.l.opts.SegmentMaxBytes)
	if err := seg.f.Preallocate(seg.prealloc, end-seg.prealloc); err != nil {
		s.l.logger.Debug("preallocate ahead failed", "shard", s.id, "path", seg.path, "err", err)
		return
	}
	seg.prealloc = end
}

// openSegment creates the next segment durably: create (exclusive), header,
// preallocate, fdatasync, directory fsync. Nothing is written to it before
// that has returned. Out-of-space and other errors before the syncs remove
// the file and fail only the caller's batch; a failed sync fails the shard.
func (s *shard) openSegment() error {
	seq := s.nextSeq
	s.nextSeq++
	uid, err := randomUID()
	if err != nil {
		return err
	}
	h := Header{
		Version:  Version,
		Shard:    uint16(s.id),
		Seq:      seq,
		UID:      uid,
		Created:  time.Now().UnixNano(),
		Instance: s.l.instance,
	}
	fsys := s.l.fs
	path := filepath.Join(s.dir, SegmentName(seq))
	abandon := func(f vfs.File, what string, err error) error {
		if f != nil {
			f.Close()
			if rerr := fsys.Remove(path); rerr != nil {
				s.l.logger.Warn("cannot remove abandoned segment", "path", path, "err", rerr)
			}
		}
		return classify(fmt.Errorf("wab: shard %d: new segment %s: %s: %w", s.id, path, what, err))
	}
	f, err := fsys.Create(path, 0o600)
	if err != nil {
		return abandon(nil, "create", err)
	}
	var hb [HeaderSize]byte
	encodeHeader(hb[:], h)
	if _, err := f.Write(hb[:]); err != nil {
		return abandon(f, "write header", err)
	}
	var prealloc int64
	if chunk := s.l.opts.PreallocateBytes; chunk > 0 {
		prealloc = min(chunk, s.l.opts.SegmentMaxBytes)
		if err := f.Preallocate(0, prealloc); err != nil {
			return abandon(f, "preallocate", err)
		}
	}
	if err := f.Sync(); err != nil {
		f.Close() // never synced again; recovery removes a header-only file
		return s.fail(fmt.Errorf("new segment %s: fdatasync: %w", path, err))
	}
	if dstBuild && dstSkipNewSegmentDirSync() {
		// A deliberately broken build for the simulation tests only.
	} else if err := fsys.SyncDir(s.dir); err != nil {
		f.Close()
		return s.fail(fmt.Errorf("new segment %s: sync directory: %w", path, err))
	}
	s.seg = &segment{f: f, path: path, hdr: h, off: HeaderSize, prealloc: prealloc}
	return nil
}

// rotate seals the open segment and, when prepare is set, creates the next
// one so that the next batch does not wait for it.
func (s *shard) rotate(prepare bool) {
	seg := s.seg
	s.seg = nil
	s.rotateAfter = false
	if s.ageArmed {
		s.ageTimer.Stop()
		s.ageArmed = false
	}
	if err := s.seal(seg); err != nil {
		s.fail(err)
		return
	}
	if prepare {
		if err := s.openSegment(); err != nil {
			s.l.logger.Warn("cannot prepare next segment; will retry on the next batch", "shard", s.id, "err", err)
		}
	}
}

// seal closes a segment for good: footer, truncate away the unused
// reservation, fdatasync, rename to .wab.sealed, directory fsync, notify.
// An empty segment is removed instead.
func (s *shard) seal(seg *segment) error {
	fsys := s.l.fs
	if seg.records == 0 {
		seg.f.Close()
		if err := fsys.Remove(seg.path); err != nil {
			s.l.logger.Warn("cannot remove empty segment", "path", seg.path, "err", err)
			return nil
		}
		if err := fsys.SyncDir(s.dir); err != nil {
			return fmt.Errorf("remove empty segment %s: sync directory: %w", seg.path, err)
		}
		return nil
	}
	s.footBuf = appendFooter(s.footBuf[:0], Footer{Records: seg.records, FirstReceived: seg.first, LastReceived: seg.last})
	if _, err := seg.f.Write(s.footBuf); err != nil {
		seg.f.Close()
		return fmt.Errorf("seal %s: write footer: %w", seg.path, err)
	}
	size := seg.off + int64(len(s.footBuf))
	if seg.prealloc > 0 {
		if err := seg.f.Truncate(size); err != nil {
			seg.f.Close()
			return fmt.Errorf("seal %s: truncate: %w", seg.path, err)
		}
	}
	if err := seg.f.Sync(); err != nil {
		seg.f.Close()
		return fmt.Errorf("seal %s: fdatasync: %w", seg.path, err)
	}
	if err := seg.f.Close(); err != nil {
		return fmt.Errorf("seal %s: close: %w", seg.path, err)
	}
	sealed := seg.path + ".sealed"
	if err := fsys.Rename(seg.path, sealed); err != nil {
		return fmt.Errorf("seal %s: rename: %w", seg.path, err)
	}
	if err := fsys.SyncDir(s.dir); err != nil {
		return fmt.Errorf("seal %s: sync directory: %w", seg.path, err)
	}
	ref := SegmentRef{Shard: s.id, Seq: seg.hdr.Seq, Path: sealed}
	if o := s.l.obs; o != nil {
		o.Sealed(ref, seg.records, size)
	}
	s.l.logger.Debug("segment sealed", "shard", s.id, "seq", seg.hdr.Seq, "records", seg.records, "bytes", size)
	s.l.signal()
	return nil
}

// shutdown seals the open segment at Close. A failed shard's segment is
// only closed: a file whose write or sync failed is never synced again;
// the next Open recovers it.
func (s *shard) shutdown() {
	if s.seg == nil {
		return
	}
	if s.err() != nil {
		s.seg.f.Close()
		s.seg = nil
		return
	}
	s.rotate(false)
}
