package wab

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
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
	// synced: everything written so far has been fdatasynced (the next
	// batch's first frame carries the sync mark).
	synced  bool
	records uint64
	first   int64
	last    int64
	// firstWrite is when the first record was written (age rotation).
	firstWrite time.Time
	// written is the offset up to which writeback was started or the
	// file synced (see startWriteback).
	written int64
}

// writebackChunk is how many bytes written without fdatasync (Buffered
// batches) a segment lets pile up before the flusher starts writing them
// back (see startWriteback).
const writebackChunk = 1 << 20

// shard is one flusher: a queue and the goroutine that owns the shard's
// files. Only the flusher goroutine touches the fields below the line.
type shard struct {
	l     *Log
	id    int
	dir   string
	queue chan *Request

	// failed is the sticky error (it wraps ErrShardFailed), nil while the
	// shard is healthy; read without a lock on every Submit and batch, set
	// once under mu.
	failed atomic.Pointer[error]
	mu     sync.Mutex

	// submitting counts the Submits between their check of the log's
	// closed flag and their send (see Log.Submit), kept off the cache
	// lines the flusher writes.
	_          [64]byte
	submitting atomic.Int64
	_          [64]byte

	// queuedBytes is the payload and meta bytes in queue (bounded by
	// QueueCapacityBytes; see takeBytes); bytesWaiters counts the Submits
	// waiting for room, and roomMu guards room, the channel closed (and
	// replaced) when the flusher frees bytes while some wait.
	queuedBytes  atomic.Int64
	bytesWaiters atomic.Int32
	roomMu       sync.Mutex
	room         chan struct{}
	_            [64]byte

	// tail is the open segment's readable tail (tail.go), published by
	// whoever holds own and read by the drain without a lock; nil when
	// there is none.
	tail atomic.Pointer[Tail]

	// busySince is when the flusher took up its current batch or seal, in
	// nanoseconds on the monotonic clock (see monoNow); 0 while it waits
	// for work. Read by FlusherBusy.
	busySince atomic.Int64

	// own is held by whoever works on the shard's files and the fields
	// below: the flusher, from taking a request to the end of its batch
	// (and while it seals or shuts down), or a SubmitInline writing its
	// request itself on an idle shard (inline.go).
	own sync.Mutex

	// ---- guarded by own ----
	nextSeq uint64
	seg     *segment
	batch   []*Request
	// held are requests taken from the queue but not yet batched, oldest
	// first: the rest of a batch hand-off (see Log.SubmitBatch), and one
	// that did not fit the last batch.
	held        []*Request
	heldHead    int    // held[heldHead:] are held
	rotateAfter bool   // the last batch was cut because the segment is full
	buf         []byte // encode buffer, reused; at most keptBufBytes kept
	footBuf     []byte
	ageTimer    *time.Timer
	ageArmed    bool
	batchTimer  *time.Timer
	// chunk is how much is reserved ahead of the write offset: normally
	// PreallocateBytes, less after the disk could not hold that (see
	// prealloc.go).
	chunk int64
}

func newShard(l *Log, id int, nextSeq uint64) *shard {
	s := &shard{
		l:          l,
		id:         id,
		dir:        filepath.Join(l.dir, ShardDirName(id)),
		queue:      make(chan *Request, l.opts.QueueCapacity),
		room:       make(chan struct{}),
		nextSeq:    nextSeq,
		chunk:      l.opts.PreallocateBytes,
		ageTimer:   time.NewTimer(time.Hour),
		batchTimer: time.NewTimer(time.Hour),
	}
	s.ageTimer.Stop()
	s.batchTimer.Stop()
	return s
}

func (s *shard) err() error {
	if p := s.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// fail makes cause the shard's sticky error (the first one wins) and
// returns the sticky error.
func (s *shard) fail(cause error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.failed.Load(); p != nil {
		return *p
	}
	err := fmt.Errorf("%w: shard %d: %w", ErrShardFailed, s.id, classify(cause))
	s.failed.Store(&err)
	s.l.logger.Error("shard failed; it accepts nothing until restart", "shard", s.id, "err", cause)
	return err
}

func (s *shard) run() {
	defer s.l.flushers.Done()
	if dstBuild {
		defer s.dstExit()
		s.dstStep()
	}
	defer s.ageTimer.Stop()
	defer s.batchTimer.Stop()
	s.own.Lock()
	defer s.own.Unlock()
	// A SubmitInline may have been first and opened one.
	if s.seg == nil {
		s.busySince.Store(monoNow())
		s.prepareSegment()
		s.busySince.Store(0)
	}
	for {
		if dstBuild {
			s.dstStep()
		}
		if !s.step() {
			return
		}
	}
}

// step takes the next request — a held one, else one from the queue,
// waiting for it — and works its batch, or seals a segment that has aged;
// it returns false once the flusher is to stop (the queue is closed or the
// log aborts), having shut the shard down. It is called, and returns,
// with own held: the flusher lets go of own only while it waits for work.
func (s *shard) step() bool {
	first := s.popHeld()
	if first == nil {
		select {
		case <-s.l.abort:
			s.abortQueued()
			s.shutdown()
			return false
		default:
		}
		s.own.Unlock()
		// The age timer is stopped while no segment age is pending (and a
		// stopped timer delivers nothing), so it is always waited on:
		// ageArmed may only be read under own.
		select {
		case r, ok := <-s.queue:
			s.own.Lock()
			if !ok {
				s.shutdown()
				return false
			}
			first = s.unpack(r)
		case <-s.ageTimer.C:
			s.own.Lock()
			if s.ageArmed {
				s.ageArmed = false
				if s.seg != nil && s.seg.records > 0 && s.err() == nil {
					s.busySince.Store(monoNow())
					s.rotate(true)
					s.busySince.Store(0)
				}
			}
			return true
		case <-s.l.abort:
			s.own.Lock()
			s.abortQueued()
			s.shutdown()
			return false
		}
	} else {
		select {
		case <-s.l.abort:
			first.Done(ErrClosed)
			s.abortQueued()
			s.shutdown()
			return false
		default:
		}
	}
	s.busySince.Store(monoNow())
	s.collect(first)
	s.process(true)
	s.busySince.Store(0)
	return true
}

// markIdle writes a sync mark frame after a synced batch when nothing is
// queued behind it (the flusher is about to wait for work): a later frame
// that proves the batch durable, so that damage to it is refused at
// recovery rather than cut as a torn tail (see FlagSyncMarks). Under load
// the next batch's first frame carries the mark instead, at no cost. The
// mark is written only into reserved space, within SegmentMaxBytes, and
// not while the log closes (the segment is about to be sealed); it is not
// synced (the next batch's sync covers it). A write that fails having
// written nothing for lack of space is ignored; any other failure fails
// the shard like a batch's.
func (s *shard) markIdle() {
	seg := s.seg
	if seg == nil || !seg.synced || seg.records == 0 || s.holding() || len(s.queue) > 0 ||
		seg.off+FrameOverhead+FooterFrameSize > min(seg.prealloc, s.l.opts.SegmentMaxBytes) {
		return
	}
	select {
	case <-s.l.closing:
		return
	default:
	}
	if s.err() != nil {
		return
	}
	s.footBuf = appendMark(s.footBuf[:0])
	n, err := seg.f.Write(s.footBuf)
	if err != nil {
		if n == 0 && isDiskFull(err) {
			return
		}
		s.fail(fmt.Errorf("write sync mark to %s at offset %d: %w", seg.path, seg.off, err))
		return
	}
	seg.off += FrameOverhead
	seg.synced = false
}

// abortQueued fails every request still held or queued (the queue is
// closed).
func (s *shard) abortQueued() {
	for r := s.popHeld(); r != nil; r = s.popHeld() {
		r.Done(ErrClosed)
	}
	for r := range s.queue {
		for r := s.unpack(r); r != nil; r = s.popHeld() {
			r.Done(ErrClosed)
		}
	}
}

// unpack returns the first request of what was taken from the queue: r
// itself, or the first of a batch hand-off, whose others are held behind
// any already held. Every request taken from the queue passes here: its
// bytes leave the queue's count.
func (s *shard) unpack(r *Request) *Request {
	if r.queued > 0 {
		s.giveBytes(r.queued)
		r.queued = 0
	}
	if r.batch == nil {
		return r
	}
	s.held = append(s.held, r.batch[1:]...)
	return r.batch[0]
}

// popHeld takes the oldest held request, or returns nil.
func (s *shard) popHeld() *Request {
	if s.heldHead == len(s.held) {
		return nil
	}
	r := s.held[s.heldHead]
	s.held[s.heldHead] = nil
	s.heldHead++
	if s.heldHead == len(s.held) {
		s.held, s.heldHead = s.held[:0], 0
	}
	return r
}

// holding reports whether any request is held.
func (s *shard) holding() bool { return s.heldHead < len(s.held) }

// unpop puts r, the request popHeld or unpack returned last, back as the
// oldest held request.
func (s *shard) unpop(r *Request) {
	if s.heldHead > 0 {
		s.heldHead--
		s.held[s.heldHead] = r
		return
	}
	s.held = append(s.held, nil)
	copy(s.held[1:], s.held)
	s.held[0] = r
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
		r := s.popHeld()
		if r == nil {
			var ok bool
			if r, ok = s.receive(deadline, &timerRunning); !ok {
				return
			}
		}
		rb := requestBytes(r)
		if records+len(r.Payloads) > maxRecords {
			s.unpop(r)
			return
		}
		if bytes+rb > room {
			s.unpop(r)
			s.rotateAfter = true
			return
		}
		s.batch = append(s.batch, r)
		records += len(r.Payloads)
		bytes += rb
	}
}

// receive takes the next request from the queue for collect: what is
// queued now, or, with a positive deadline, what arrives before the batch
// timer (started on the first call) fires. ok is false when there is none
// (or the queue is closed, or the log aborts).
func (s *shard) receive(deadline time.Duration, timerRunning *bool) (r *Request, ok bool) {
	select {
	case q, ok := <-s.queue:
		if !ok {
			return nil, false
		}
		return s.unpack(q), true
	default:
	}
	if deadline <= 0 {
		return nil, false
	}
	if !*timerRunning {
		s.batchTimer.Reset(deadline)
		*timerRunning = true
	}
	select {
	case q, ok := <-s.queue:
		if !ok {
			return nil, false
		}
		return s.unpack(q), true
	case <-s.batchTimer.C:
		*timerRunning = false
		return nil, false
	case <-s.l.abort:
		return nil, false
	}
}

func doneAll(batch []*Request, err error) {
	for _, r := range batch {
		r.Done(err)
	}
}

// process writes s.batch: one write, one fdatasync if any request is
// Durable, then the acks; then, off the ack path, what the segment needs
// next (a seal or more reserved space). yield lets the goroutines the acks
// woke run first when nothing else waits (the flusher's batches; an
// inline write's caller answers its own request once process returns).
func (s *shard) process(yield bool) {
	batch := s.batch
	defer func() {
		clear(s.batch)
		s.batch = s.batch[:0]
	}()
	if err := s.err(); err != nil {
		doneAll(batch, err)
		return
	}
	records, size := 0, int64(0)
	for _, r := range batch {
		records += len(r.Payloads)
		size += requestBytes(r)
	}
	if records == 0 {
		doneAll(batch, nil)
		return
	}
	if err := s.segmentFor(size); err != nil {
		doneAll(batch, err)
		return
	}
	seg := s.seg
	if err := s.write(batch, records, size, seg.synced); err != nil {
		doneAll(batch, err)
		return
	}
	syncDur, ok := s.acknowledge(batch)
	if !ok {
		return
	}
	if yield && len(s.queue) == 0 && !s.holding() {
		// Nothing waits for the flusher: let the goroutines its acks woke
		// (the connections' writers) write them before the bookkeeping
		// below, which would otherwise come first on this P — on an idle
		// daemon, a lone producer's every round trip.
		runtime.Gosched()
	}
	if o := s.l.obs; o != nil {
		o.Batch(s.id, records, int(size), syncDur)
		o.QueueDepth(s.id, len(s.queue))
	}
	s.afterBatch(seg, size)
	s.markIdle()
}

// segmentFor makes sure there is an open segment that a batch of size
// bytes may go to: one is created if there is none, and a segment that
// holds records and has no room for the batch is sealed first (on this
// batch's path; the check after each batch makes this rare).
func (s *shard) segmentFor(size int64) error {
	if s.seg == nil {
		if err := s.openSegment(false); err != nil {
			return err
		}
	}
	if s.seg.records == 0 || s.seg.off+size+FooterFrameSize <= s.l.opts.SegmentMaxBytes {
		return nil
	}
	s.rotate(true)
	if err := s.err(); err != nil {
		return err
	}
	if s.seg == nil {
		return s.openSegment(false)
	}
	return nil
}

// encodeChunk is the most encoded bytes a flusher holds before writing
// them: a batch is encoded and written in chunks of about this size, so
// the buffer does not grow with the batch (docs/flow_control.md, "Buffers
// outside records"). A record larger than a chunk is encoded alone, and a
// buffer it grew beyond keptBufBytes is dropped after the batch.
const encodeChunk = 1 << 20

// keptBufBytes is the most encode buffer a shard keeps between batches.
const keptBufBytes = 2 * encodeChunk

// write reserves room for the batch's size encoded bytes in the open
// segment and writes them, encoded chunk by chunk (one write(2) for a
// batch within encodeChunk); marked puts the sync mark on its first frame
// (everything before it is durable: see FlagSyncMarks). An out-of-space
// error before any byte reached the file fails only the batch; any other
// failure fails the shard.
func (s *shard) write(batch []*Request, records int, size int64, marked bool) error {
	seg := s.seg
	if err := s.reserve(size); err != nil {
		return err
	}
	buf := s.buf[:0]
	var written int64
	flush := func() error {
		n, err := seg.f.Write(buf)
		if err != nil {
			werr := fmt.Errorf("write %s at offset %d: %w", seg.path, seg.off+written, err)
			if written == 0 && n == 0 && isDiskFull(err) {
				// Nothing reached the file: this batch fails, the shard goes on.
				return fmt.Errorf("wab: shard %d: %w", s.id, classify(werr))
			}
			return s.fail(werr)
		}
		written += int64(n)
		buf = buf[:0]
		return nil
	}
	var err error
	// The readable prefix (tail.go): the records, and their bytes, before
	// the batch's first Durable request; all of them when it has none.
	prefixRecords, prefixBytes := uint64(records), size
	var encoded uint64
	durableSeen := false
	for _, r := range batch {
		if r.Durability != Buffered && !durableSeen {
			durableSeen = true
			prefixRecords, prefixBytes = encoded, written+int64(len(buf))
		}
		encoded += uint64(len(r.Payloads))
		for i, p := range r.Payloads {
			var meta []byte
			if r.Metas != nil {
				meta = r.Metas[i]
			}
			if marked {
				buf = appendMarkedRecord(buf, r.Durability, r.Received, meta, p)
				marked = false
			} else {
				buf = appendRecord(buf, r.Durability, r.Received, meta, p)
			}
			if len(buf) >= encodeChunk {
				if err = flush(); err != nil {
					break
				}
			}
		}
		if err != nil {
			break
		}
	}
	if err == nil && len(buf) > 0 {
		err = flush()
	}
	if cap(buf) > keptBufBytes {
		buf = nil
	}
	s.buf = buf[:0]
	if err != nil {
		return err
	}
	seg.synced = false
	if seg.records == 0 {
		seg.first = batch[0].Received
		seg.firstWrite = time.Now()
		if s.l.opts.SegmentMaxAge > 0 {
			s.ageTimer.Reset(s.l.opts.SegmentMaxAge)
			s.ageArmed = true
		}
	}
	prevRecords, prevOff := seg.records, seg.off
	seg.off += written
	seg.records += uint64(records)
	if dstBuild && dstTailBeforeSync() {
		// A deliberately broken build for the simulation tests only.
		s.publishTail(seg, seg.records, seg.off)
	} else {
		s.publishTail(seg, prevRecords+prefixRecords, prevOff+prefixBytes)
	}
	for i := len(batch) - 1; i >= 0; i-- {
		if len(batch[i].Payloads) > 0 {
			seg.last = batch[i].Received
			break
		}
	}
	return nil
}

// acknowledge answers the batch's Buffered requests, then, if any request
// is Durable, fdatasyncs once and answers the Durable ones. It returns the
// sync's duration (0 without one) and false if the sync failed, which
// fails the shard: the Durable requests get its error, and the file is
// never synced again.
//
// The flusher lets go of each request as it calls its Done: the caller may
// then give back the memory the request's bytes were reserved with, so
// they must not stay reachable from the batch while the flusher goes on —
// through the sync, and through a seal after the batch, which may take
// hundreds of milliseconds on a busy disk.
func (s *shard) acknowledge(batch []*Request) (time.Duration, bool) {
	durable := false
	for i, r := range batch {
		if r.Durability == Buffered {
			batch[i] = nil
			r.Done(nil)
		} else {
			durable = true
		}
	}
	if !durable {
		return 0, true
	}
	if dstBuild {
		dstBeforeSync(batch)
	}
	seg := s.seg
	t0 := time.Now()
	err := seg.f.Sync()
	syncDur := time.Since(t0)
	if err != nil {
		err = s.fail(fmt.Errorf("fdatasync %s: %w", seg.path, err))
	} else {
		seg.synced = true
		s.publishTail(seg, seg.records, seg.off)
	}
	for i, r := range batch {
		if r != nil {
			batch[i] = nil
			r.Done(err)
		}
	}
	return syncDur, err == nil
}

// afterBatch runs off the ack path once a batch of size bytes is written to
// seg: it seals the segment when it is full or old enough, or else extends
// its reservation.
func (s *shard) afterBatch(seg *segment, size int64) {
	aged := s.l.opts.SegmentMaxAge > 0 && time.Since(seg.firstWrite) >= s.l.opts.SegmentMaxAge
	// Seal when the room left would not hold a batch like this one, so that
	// the next batch rarely has to wait for a seal.
	if s.rotateAfter || aged || seg.off+size+FooterFrameSize > s.l.opts.SegmentMaxBytes {
		s.rotate(true)
		return
	}
	s.startWriteback(seg)
	s.preallocAhead()
}

// startWriteback starts writing back (vfs.StartWriteback: it does not wait,
// and promises nothing) the whole pages a segment holds beyond the last
// fdatasync or writeback, once they are writebackChunk or more. Buffered
// batches are never synced on their own, so without this a segment's
// seal — on the flusher, ahead of the next batch — would have to write a
// whole segment age's worth of them in its fdatasync: the Buffered tier's
// tail latency. Durable batches leave nothing behind.
func (s *shard) startWriteback(seg *segment) {
	const page = 4096
	end := seg.off &^ (page - 1)
	if seg.synced {
		seg.written = end
		return
	}
	if end-seg.written < writebackChunk {
		return
	}
	if err := vfs.StartWriteback(seg.f, seg.written, end-seg.written); err != nil {
		s.l.logger.Debug("start writeback failed", "shard", s.id, "path", seg.path, "err", err)
	}
	seg.written = end
}

// errNoRoomAhead is openSegment's answer, ahead of work, when the disk
// cannot hold a full chunk: the segment is left for a batch to create.
var errNoRoomAhead = errors.New("wab: no room for a full chunk ahead of work; the next batch creates the segment")

// openSegment creates the next segment durably: create (exclusive), header,
// preallocate, fdatasync, directory fsync. Nothing is written to it before
// that has returned. Out-of-space and other errors before the syncs remove
// the file and fail only the caller's batch; a failed sync fails the shard.
//
// ahead is set when no batch waits for the segment (the flusher's start,
// right after a seal): then it gets a full chunk or is not made at all
// (errNoRoomAhead). On a nearly full disk an empty segment would hold,
// for as long as no record comes, space the drain needs to deliver what
// is stored — and so to free it; a batch's own segment falls back to
// less and is sealed within SegmentMaxAge, releasing what it did not use.
func (s *shard) openSegment(ahead bool) error {
	seq := s.nextSeq
	s.nextSeq++
	uid, err := randomUID()
	if err != nil {
		return err
	}
	h := Header{
		Version:  Version,
		Shard:    uint16(s.id),
		Flags:    FlagSyncMarks | FlagTimeOrderedIDs,
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
		// Always a full chunk first: a new segment is where a reduced
		// reservation goes back to normal once there is space again.
		want := min(chunk, s.l.opts.SegmentMaxBytes)
		if ahead {
			if err := f.Preallocate(0, want); err != nil {
				if isDiskFull(err) {
					abandon(f, "preallocate", err)
					return errNoRoomAhead
				}
				return abandon(f, "preallocate", err)
			}
			prealloc = want
			s.noteChunk(path, want, want)
		} else if prealloc, err = s.preallocate(f, path, HeaderSize, 0, want, 0); err != nil {
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
	s.seg = &segment{f: f, path: path, hdr: h, off: HeaderSize, prealloc: prealloc, synced: true}
	return nil
}

// rotate seals the open segment and, when prepare is set, creates the next
// one so that the next batch does not wait for it.
func (s *shard) rotate(prepare bool) {
	seg := s.seg
	s.seg = nil
	s.tail.Store(nil)
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
		s.prepareSegment()
	}
}

// prepareSegment creates the next segment ahead of work, if it can.
func (s *shard) prepareSegment() {
	switch err := s.openSegment(true); {
	case errors.Is(err, errNoRoomAhead):
		s.l.logger.Debug("disk nearly full: the next segment is created when a batch needs it", "shard", s.id)
	case err != nil:
		s.l.logger.Warn("cannot prepare segment; will retry on the next batch", "shard", s.id, "err", err)
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
