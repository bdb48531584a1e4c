// Package parquetsink is weir's Parquet sink: committed records end up in
// zstd-compressed Parquet files under a directory, one row per record.
//
// # Schema
//
//	weir_record_id  fixed_len_byte_array(16)   the record id
//	payload         binary                     the bytes as received
//	source          binary (STRING)            where the record came from
//	durability      binary (STRING)            "durable" or "buffered"
//	received_at     int64 TIMESTAMP(NANOS, UTC) when the daemon accepted it
//	committed_at    int64 TIMESTAMP(NANOS, UTC) when this sink committed it
//	key             optional binary            the record's key (null: none)
//	headers         LIST of {key STRING, value binary}  in order; empty: none
//	event_time      optional int64 TIMESTAMP(NANOS, UTC) the record's own time
//
// key, headers and event_time came with the record model's version 2
// (source metadata); files written before them read as records without
// any (see the row type).
//
// # Files and durability
//
// A Parquet file cannot be made durable piece by piece: its footer, which
// says where every column chunk is, is written last. So the sink keeps two
// kinds of file per base name weir-<unix nanos, 20 digits>-<sequence, 6
// digits>-<writer id, 8 hex digits>:
//
//   - <base>.stage is the durable log of the file being built. Each Commit
//     appends one CRC-checked frame holding the batch and fdatasyncs it (and
//     fsyncs the directory when it created the file) before it returns.
//   - <base>.parquet is written once the stage reaches MaxBytes or MaxAge
//     (checked at every Commit), or at Close: the stage is encoded into
//     <base>.parquet.tmp, the footer written, the file fdatasynced, renamed
//     to <base>.parquet and the directory fsynced; then the stage is
//     removed. A .parquet file is therefore only ever visible complete, and
//     it never changes again.
//
// With Options.NoSync (a [[secondary]] with durable = false) the stage is
// not fdatasynced at each Commit: a power loss (not a crash of the
// process) may lose the batches staged since the last Parquet file.
//
// Each record is written twice (stage, then Parquet); in exchange a commit
// costs one append and one fdatasync, and the Parquet files are as large as
// MaxBytes allows instead of one small file per batch.
//
// # Failures
//
// After a failed write or fdatasync of a stage the sink never syncs that
// file again. Its synced prefix holds every earlier commit: it is encoded
// into the stage's Parquet file at once (read back, never synced), and the
// batch fails transient, so the drain retries it into a new stage. A failed
// conversion (of a roll or of such a rescue) leaves the stage in place,
// frozen: no more records are appended to it, the conversion is tried
// again at every Commit with a fresh temporary file, and the sink reports
// Degraded until it succeeds. None of this undoes a commit.
//
// # Recovery
//
// Outside raw mode, New takes a lock file (weir-<writer id>.lock) for its
// own writer id and then settles what writers that are no longer running
// left behind — those whose lock it can take; several writers may share a
// directory and never touch each other's files: .parquet.tmp files are
// removed; a stage is encoded into its Parquet file (a torn last frame is
// dropped; a bad frame followed by a valid one is corruption and New
// refuses to start, naming the file and offset) and removed.
//
// # Raw mode
//
// With Options.Positions the sink is a primary-raw sink (sink.Raw): it
// numbers every record it commits, in one total order, and reads records
// back by that number. A raw-mode directory has exactly one writer: New
// takes raw.lock (never removed) and refuses with ErrRawBusy while another
// writer holds it. Files are named raw-<first position, 20 digits> plus
// the usual suffixes, so names sort by position, and the row k of a file
// (from 0) is at the file's first position plus k. A new stage starts at
// the end: one past the last acknowledged position, which is the previous
// file's first position plus its rows.
//
// New settles every stage into Parquet as above and takes the end from the
// last file's row count (a torn last frame was never acknowledged and is
// dropped). A crash may leave frames that were written but never
// acknowledged; they survive as positions like any other, which is fine:
// nobody saw them.
//
// After a failed write or fdatasync the abandoned stage is rescued as
// usual: its Parquet file holds exactly the acknowledged rows (conversion
// checks the count), so the next stage can start at the acknowledged end
// and the failed batch's positions go to its retry. If the rescue cannot be
// finished in place (the conversion fails, or an abandoned stage without
// rows cannot be removed), the sink stops instead: every Commit fails
// transient and Health is Down until the sink is reopened and recovery
// settles the stage. A stage whose conversion fails after an ordinary roll
// holds only acknowledged rows and stays pending, readable, as outside raw
// mode.
//
// ReadFrom finds the file holding a position by name, reads a stage by
// scanning its frames (resuming where the previous read stopped) and a
// Parquet file through parquet-go's row seeking, keeping the last one open
// at its next row so that consecutive reads decode nothing twice. Rows at
// or past the next file's first position, and positions between a file's
// last row and the next file, hold nothing and are skipped (this writer
// leaves neither, but readers do not rely on it); a listing that shows
// such a gap, or a stage that was turned into Parquet under the read, is
// taken again before believing it. Positions below the oldest file are
// gone (sink.ErrPositionGone). OpenRawReader reads a directory another
// process writes, without writing or locking anything.
//
// An identical batch committed again into the current stage is answered
// with the positions it was given the first time: its records are durable
// there already.
//
// # Duplicates
//
// Delivery is at least once and this sink keeps duplicates: a batch
// replayed after a crash, or after a transient error that hid a success,
// is stored again, with the same weir_record_id. Readers deduplicate on it.
// An identical batch (same Batch.Token) committed again into the stage it
// already went to is skipped, which absorbs the commonest replay cheaply;
// nothing is indexed across files.
package parquetsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parquet-go/parquet-go/compress/zstd"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// Defaults for zero Options fields.
const (
	DefaultMaxBytes        int64 = 64 << 20
	DefaultMaxAge                = time.Minute
	DefaultMaxBatchSize          = 4096
	DefaultMaxPayloadBytes       = 16 << 20
	DefaultCompression           = "default"
)

const (
	dirPerm  = 0o750
	filePerm = 0o640
)

// ErrClosed is returned by Commit after Close.
var ErrClosed = errors.New("parquetsink: sink is closed")

// Compression levels of zstd by name.
var compressionLevels = map[string]zstd.Level{
	"fastest": zstd.SpeedFastest,
	"default": zstd.SpeedDefault,
	"better":  zstd.SpeedBetterCompression,
	"best":    zstd.SpeedBestCompression,
}

// CompressionLevels are the accepted Options.Compression values.
var CompressionLevels = []string{"fastest", "default", "better", "best"}

// Options configure a Sink.
type Options struct {
	// FS is the file system; nil means vfs.OS.
	FS vfs.FS
	// Dir is the output directory; it is created (durably) if missing.
	Dir string
	// MaxBytes turns the stage into a Parquet file once it holds this many
	// bytes (records as staged, before compression). A stage exceeds it by
	// at most one batch; a batch that would overflow a non-empty stage
	// starts a new one. Zero means DefaultMaxBytes.
	MaxBytes int64
	// MaxAge turns the stage into a Parquet file once it is this old; age
	// is checked at every Commit. Zero means DefaultMaxAge.
	MaxAge time.Duration
	// MaxBatchSize is what MaxBatchSize reports. Zero means
	// DefaultMaxBatchSize.
	MaxBatchSize int
	// MaxPayloadBytes rejects (dead-letters) a record whose payload is
	// larger. Zero means DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// Compression is the zstd level: "fastest", "default", "better" or
	// "best". Empty means DefaultCompression.
	Compression string
	// Logger receives file lifecycle and failure events; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Positions turns on raw mode (see the package documentation): every
	// committed record gets a position and the sink implements sink.Raw.
	// A raw-mode directory has exactly one writer.
	Positions bool
	// NoSync skips the fdatasync of the stage at each Commit (a
	// [[secondary]] with durable = false): a committed batch may be lost
	// by a power loss until its stage becomes a Parquet file, which is
	// fdatasynced. Not with Positions: raw is always durable.
	NoSync bool
}

// Sink writes records to Parquet files. It implements sink.Sink.
type Sink struct {
	fs     vfs.FS
	dir    string
	opts   Options
	logger *slog.Logger
	now    func() time.Time
	conv   converter
	writer string
	lock   interface{ Close() error }

	mu      sync.Mutex // serialises Commit and Close
	cur     *stage
	pending []*stage // frozen stages whose conversion failed
	buf     []byte
	seq     int
	lastNs  int64
	closed  bool
	rollErr error // last failed conversion, while pending is not empty
	// broken (raw mode) stops every commit until the sink is reopened:
	// an abandoned stage could not be settled in place.
	broken error

	raw *rawDir       // raw mode: reads by position
	end atomic.Uint64 // raw mode: one past the last acknowledged position

	healthM sync.Mutex
	health  sink.Health
}

// stage is a stage file open for appending (cur) or frozen (pending).
type stage struct {
	f       vfs.File
	base    string
	size    int64 // bytes committed (synced)
	rows    int64
	created time.Time
	// tokens holds the batches committed into this stage, with what they
	// were answered with.
	tokens map[sink.DedupToken]answer
}

// answer is what a committed batch was answered with: its rejections and,
// in raw mode, the position of its first committed record.
type answer struct {
	rejected []sink.Rejection
	first    uint64
}

var (
	_ sink.Sink = (*Sink)(nil)
	_ sink.Raw  = (*Sink)(nil)
)

// New opens a Parquet sink on opts.Dir, settling whatever a crashed writer
// left behind.
func New(ctx context.Context, opts Options) (*Sink, error) {
	if opts.Dir == "" {
		return nil, errors.New("parquetsink: no directory")
	}
	if opts.NoSync && opts.Positions {
		return nil, errors.New("parquetsink: raw mode is always durable (NoSync with Positions)")
	}
	if opts.FS == nil {
		opts.FS = vfs.OS
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.MaxBatchSize <= 0 {
		opts.MaxBatchSize = DefaultMaxBatchSize
	}
	if opts.MaxPayloadBytes <= 0 {
		opts.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if opts.Compression == "" {
		opts.Compression = DefaultCompression
	}
	level, ok := compressionLevels[opts.Compression]
	if !ok {
		return nil, fmt.Errorf("parquetsink: compression %q: want one of %v", opts.Compression, CompressionLevels)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir := filepath.Clean(opts.Dir)
	s := &Sink{
		fs:     opts.FS,
		dir:    dir,
		opts:   opts,
		logger: opts.Logger.With("sink", "parquet", "dir", dir),
		now:    opts.Now,
		conv:   converter{fs: opts.FS, dir: dir, level: level},
		health: sink.Health{State: sink.Healthy},
	}
	if err := s.fs.MkdirAll(dir, dirPerm); err != nil {
		return nil, fmt.Errorf("parquetsink: create %s: %w", dir, err)
	}
	if opts.Positions {
		return s.openRaw(ctx)
	}
	if err := s.takeWriterID(); err != nil {
		return nil, err
	}
	if err := s.recover(ctx); err != nil {
		_ = s.releaseLock()
		return nil, err
	}
	return s, nil
}

// takeWriterID picks a writer id no running writer holds and locks it.
func (s *Sink) takeWriterID() error {
	for range 8 {
		id, err := newWriterID()
		if err != nil {
			return err
		}
		l, err := s.fs.Lock(filepath.Join(s.dir, lockName(id)))
		if errors.Is(err, vfs.ErrLocked) {
			continue
		}
		if err != nil {
			return fmt.Errorf("parquetsink: lock writer id: %w", err)
		}
		s.writer, s.lock = id, l
		s.logger = s.logger.With("writer", id)
		return nil
	}
	return errors.New("parquetsink: no free writer id")
}

func (s *Sink) releaseLock() error {
	if s.lock == nil {
		return nil
	}
	if !s.opts.Positions {
		// A writer id's lock file is never used again. The raw-mode
		// lock file stays: removing a lock file another process may have
		// opened would let two processes lock two different files.
		_ = s.fs.Remove(filepath.Join(s.dir, lockName(s.writer)))
	}
	err := s.lock.Close()
	s.lock = nil
	return err
}

// Name implements sink.Sink.
func (s *Sink) Name() string { return "parquet" }

// MaxBatchSize implements sink.Sink.
func (s *Sink) MaxBatchSize() int { return s.opts.MaxBatchSize }

// WriterID is the id this sink puts in its file names; empty in raw mode,
// whose names carry positions instead.
func (s *Sink) WriterID() string { return s.writer }

// Health implements sink.Sink: Degraded, with the reason, from a failure
// until a Commit succeeds with nothing left to settle.
func (s *Sink) Health(context.Context) sink.Health {
	s.healthM.Lock()
	defer s.healthM.Unlock()
	return s.health
}

func (s *Sink) setHealth(h sink.Health) {
	s.healthM.Lock()
	s.health = h
	s.healthM.Unlock()
}

// Commit implements sink.Sink. Records whose payload exceeds
// MaxPayloadBytes are rejected; every other record is committed or, on
// error, none may be assumed committed. All I/O errors are transient:
// nothing about a batch makes it unwritable.
func (s *Sink) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	res, _, err := s.commitLocked(ctx, b)
	return res, err
}

// commitLocked is Commit, also returning (in raw mode) the position of the
// batch's first committed record.
func (s *Sink) commitLocked(ctx context.Context, b sink.Batch) (sink.CommitResult, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return sink.CommitResult{}, 0, sink.Permanent(ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return sink.CommitResult{}, 0, sink.Transient(fmt.Errorf("parquetsink: commit: %w", err))
	}
	if s.broken != nil {
		return sink.CommitResult{}, 0, sink.Transient(s.broken)
	}
	s.settle()
	res, first, err := s.commit(b)
	if err != nil {
		if s.broken != nil {
			s.setHealth(sink.Health{State: sink.Down, Reason: s.broken.Error()})
		} else {
			s.setHealth(sink.Health{State: sink.Degraded, Reason: err.Error()})
		}
		return sink.CommitResult{}, 0, sink.Transient(err)
	}
	if len(s.pending) > 0 {
		s.setHealth(sink.Health{State: sink.Degraded, Reason: s.rollErr.Error()})
	} else {
		s.setHealth(sink.Health{State: sink.Healthy})
	}
	return res, first, nil
}

func (s *Sink) commit(b sink.Batch) (sink.CommitResult, uint64, error) {
	now := s.now()
	if s.cur != nil && now.Sub(s.cur.created) >= s.opts.MaxAge {
		s.roll("age")
	}
	// In raw mode the current stage (if any) ends at end: it holds every
	// position from its first up to end, and the batch goes right after.
	first := s.end.Load()
	if len(b.Records) == 0 {
		return sink.CommitResult{}, first, nil
	}
	if s.cur != nil {
		if a, ok := s.cur.tokens[b.Token]; ok {
			// The same batch is already durable in this stage, at the
			// positions it was given then.
			return sink.CommitResult{Rejected: a.rejected}, a.first, nil
		}
	}
	var res sink.CommitResult
	var skip map[int]bool
	for i := range b.Records {
		if n := len(b.Records[i].Payload); n > s.opts.MaxPayloadBytes {
			if skip == nil {
				skip = map[int]bool{}
			}
			skip[i] = true
			res.Rejected = append(res.Rejected, sink.Rejection{Index: i, Code: sink.CodeOversize,
				Reason: fmt.Sprintf("parquetsink: payload of %d bytes exceeds max_payload_bytes (%d)", n, s.opts.MaxPayloadBytes)})
		}
	}
	if len(skip) == len(b.Records) {
		return res, first, nil
	}
	s.buf = appendFrame(s.buf[:0], now, b.Token, b.Records, skip)
	defer s.releaseBuf()
	if s.cur != nil && s.cur.size > stageHeaderLen && s.cur.size+int64(len(s.buf)) > s.opts.MaxBytes {
		s.roll("size")
	}
	created := false
	if s.cur == nil {
		if err := s.create(now); err != nil {
			return sink.CommitResult{}, 0, err
		}
		created = true
	}
	cur := s.cur
	if _, err := cur.f.Write(s.buf); err != nil {
		s.abandon(err)
		return sink.CommitResult{}, 0, fmt.Errorf("parquetsink: write %s: %w", cur.base+SuffixStage, err)
	}
	if err := s.syncStage(cur); err != nil {
		s.abandon(err)
		return sink.CommitResult{}, 0, fmt.Errorf("parquetsink: fdatasync %s: %w", cur.base+SuffixStage, err)
	}
	if created {
		if err := s.fs.SyncDir(s.dir); err != nil {
			// The data is synced but the name may not be: the batch is
			// not durable. Start over in a new stage.
			s.abandon(err)
			return sink.CommitResult{}, 0, fmt.Errorf("parquetsink: sync directory after creating %s: %w", cur.base+SuffixStage, err)
		}
	}
	n := len(b.Records) - len(skip)
	cur.size += int64(len(s.buf))
	cur.rows += int64(n)
	cur.tokens[b.Token] = answer{rejected: res.Rejected, first: first}
	if s.opts.Positions {
		s.end.Add(uint64(n))
	}
	if cur.size >= s.opts.MaxBytes {
		s.roll("size")
	}
	return res, first, nil
}

// KeptBufBytes is the most staging buffer the sink keeps between
// commits. A batch's frame is encoded whole (its checksum covers it), so
// while it is written the buffer is the batch's size; a buffer grown
// beyond this is dropped afterwards instead of kept at the largest
// batch's size (docs/flow_control.md, "Buffers outside records").
const KeptBufBytes = 2 << 20

// releaseBuf drops a staging buffer larger than KeptBufBytes.
func (s *Sink) releaseBuf() {
	if cap(s.buf) > KeptBufBytes {
		s.buf = nil
	}
}

// create starts a new stage as the current one. Its header is synced with
// the first frame, and its directory entry by the commit that creates it.
func (s *Sink) create(now time.Time) error {
	if s.broken != nil {
		return s.broken
	}
	ns := max(now.UnixNano(), s.lastNs) // names sort in creation order, whatever the clock does
	base := baseName(ns, s.seq, s.writer)
	if s.opts.Positions {
		base = rawBase(s.end.Load())
	}
	f, err := s.fs.Create(filepath.Join(s.dir, base+SuffixStage), filePerm)
	if err != nil {
		return fmt.Errorf("parquetsink: create stage: %w", err)
	}
	if !s.opts.Positions {
		s.lastNs = ns
		s.seq = (s.seq + 1) % maxSeq
	}
	if _, err := f.Write([]byte(stageMagic)); err != nil {
		_ = f.Close()
		if rerr := s.fs.Remove(filepath.Join(s.dir, base+SuffixStage)); rerr != nil {
			s.logger.Warn("could not remove stage after a failed write", "file", base+SuffixStage, "err", rerr)
			s.stopRaw(rerr) // raw mode would create it again under the same name
		}
		return fmt.Errorf("parquetsink: write %s: %w", base+SuffixStage, err)
	}
	s.cur = &stage{f: f, base: base, size: stageHeaderLen, created: now, tokens: map[sink.DedupToken]answer{}}
	s.logger.Debug("stage started", "file", base+SuffixStage)
	return nil
}

// roll freezes the current stage and turns it into its Parquet file. A
// failed conversion keeps the stage pending; it never fails a commit, whose
// records are durable in the stage.
func (s *Sink) roll(why string) {
	st := s.cur
	s.cur = nil
	if st.rows == 0 {
		if err := s.drop(st); err != nil {
			s.stopRaw(err)
		}
		return
	}
	if err := s.finish(st); err != nil {
		s.logger.Error("could not write Parquet file; the stage is kept and retried", "file", st.base+SuffixStage, "reason", why, "err", err)
		s.rollErr = err
		s.pending = append(s.pending, st)
		return
	}
	s.logger.Debug("parquet file finished", "file", st.base+SuffixParquet, "rows", st.rows, "reason", why)
}

// finish converts a frozen stage, then closes and removes it.
func (s *Sink) finish(st *stage) error {
	n, err := s.conv.convert(st.f, st.base+SuffixStage, st.size, st.base, st.rows)
	if err != nil {
		return err
	}
	s.logger.Debug("parquet file written", "file", st.base+SuffixParquet, "rows", st.rows, "bytes", n)
	_ = s.drop(st) // the Parquet file is complete: a stage left behind is harmless
	return nil
}

// drop closes a stage whose records are all in its Parquet file (or that
// has none) and removes it. A stage left behind by a failure here is
// removed by recovery, which sees the Parquet file (or no rows). The error
// is the failed removal's.
func (s *Sink) drop(st *stage) error {
	_ = st.f.Close()
	if err := s.fs.Remove(filepath.Join(s.dir, st.base+SuffixStage)); err != nil {
		s.logger.Warn("could not remove finished stage", "file", st.base+SuffixStage, "err", err)
		return fmt.Errorf("parquetsink: remove %s: %w", st.base+SuffixStage, err)
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		s.logger.Warn("could not sync directory after removing stage", "file", st.base+SuffixStage, "err", err)
	}
	return nil
}

// settle retries the conversion of pending stages.
func (s *Sink) settle() {
	if len(s.pending) == 0 {
		return
	}
	kept := s.pending[:0]
	for _, st := range s.pending {
		if err := s.finish(st); err != nil {
			s.rollErr = err
			kept = append(kept, st)
			continue
		}
		s.logger.Info("pending stage written as Parquet", "file", st.base+SuffixParquet, "rows", st.rows)
	}
	clear(s.pending[len(kept):])
	s.pending = kept
}

// syncStage makes a commit's stage append durable, unless NoSync.
func (s *Sink) syncStage(cur *stage) error {
	if s.opts.NoSync {
		return nil
	}
	return cur.f.Sync()
}

// abandon gives up on the current stage after a failed write or sync. Its
// state past the last successful sync is unknown and it is never synced
// again, but its synced prefix holds committed records: they are written
// into the stage's Parquet file now (or, if that fails, later; see settle).
func (s *Sink) abandon(cause error) {
	st := s.cur
	s.cur = nil
	s.logger.Error("stage abandoned after an I/O error; the batch will be retried into a new stage",
		"file", st.base+SuffixStage, "committed_rows", st.rows, "err", cause)
	if st.rows == 0 {
		if err := s.drop(st); err != nil {
			s.stopRaw(err)
		}
		return
	}
	if err := s.finish(st); err != nil {
		if s.opts.Positions {
			// Its Parquet file must hold exactly the acknowledged rows
			// before a new stage may start at the end position.
			_ = st.f.Close()
			s.stopRaw(fmt.Errorf("parquetsink: committed records of abandoned %s not written as Parquet: %w", st.base+SuffixStage, err))
			return
		}
		s.rollErr = fmt.Errorf("parquetsink: committed records of abandoned %s not yet in Parquet: %w", st.base+SuffixStage, err)
		s.pending = append(s.pending, st)
		s.logger.Error("could not rescue committed records of abandoned stage; retrying at the next commit", "file", st.base+SuffixStage, "err", err)
		return
	}
	s.logger.Warn("committed records of abandoned stage written as Parquet", "file", st.base+SuffixParquet, "rows", st.rows)
}

// Close turns the current stage into its Parquet file and releases the
// writer id. Committed data is already durable; a stage that cannot be
// converted now is converted by the next New on the directory.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.cur != nil {
		s.roll("close")
	}
	s.settle()
	var err error
	for _, st := range s.pending {
		_ = st.f.Close()
		err = errors.Join(err, fmt.Errorf("parquetsink: %s left for recovery: %w", st.base+SuffixStage, s.rollErr))
	}
	s.pending = nil
	if s.raw != nil {
		err = errors.Join(err, s.raw.close())
	}
	return errors.Join(err, s.releaseLock())
}
