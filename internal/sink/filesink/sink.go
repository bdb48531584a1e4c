// Package filesink is weir's NDJSON file sink: every committed record becomes
// one line of JSON in a file under a directory.
//
// # Format
//
// Each line is one object:
//
//	{"weir_record_id":"<32 hex digits>","durability":"durable"|"buffered",
//	 "received_at":"<RFC 3339, nanoseconds, UTC>","source":"socket",
//	 "payload":"…","payload_encoding":"utf8"|"base64"}
//
// The payload is written as a JSON string when it is valid UTF-8 and as
// standard base64 otherwise; payload_encoding says which.
//
// # Files
//
// Lines are appended to weir-<unix nanos, 20 digits>-<sequence, 6 digits>.ndjson.open.
// A file is finished — renamed to .ndjson — once it reaches MaxBytes or
// MaxAge (age is checked at every Commit and by Close), so names sort in the
// order files were started, and a finished file never changes again. Tools
// should read only .ndjson files; the one .open file is still growing.
//
// # Durability and duplicates
//
// Commit returns only after the batch's lines are written and fdatasynced,
// and, when the commit created or finished a file, after the directory has
// been fsynced too. A failed write or fdatasync leaves the file's contents
// past its last successful sync unknown, and a file is never synced again
// after a failure; the batch is reported as a transient error, so the drain
// retries it into another file. A file that held no committed record yet
// is removed. Otherwise the bytes committed before the failure are copied
// into a fresh file (which is synced, and becomes the current file), and
// the old file is closed and renamed to .ndjson.failed. A .failed file
// holds nothing that is not also elsewhere; it is not part of the output
// and may be removed once inspected.
//
// A long outage, retried again and again, leaves a bounded number of
// files: the sink keeps the newest MaxFailedFiles .failed files and removes
// older ones, and an abandoned file it cannot remove is tried again before
// every new file, which is not started while maxLitter such files remain
// (Commit fails transient, saying why).
//
// With Options.NoSync (a [[secondary]] with durable = false) a Commit is
// not fdatasynced: it returns once the lines are written, so a power loss
// (not a crash of the process) may lose the batches of the open file; a
// file is fdatasynced when it is finished, before the rename.
//
// Delivery is at least once, and this sink keeps duplicates: a retried
// batch, or a batch replayed after a crash, appears again. Every delivery of
// a record carries the same weir_record_id; readers deduplicate on it.
//
// # Recovery
//
// New finishes any .open file left behind by a crash: a partial last line
// (a write torn by the crash) is truncated, the file is synced and renamed
// to .ndjson, and the directory is synced. A line that is not valid JSON
// followed by valid ones is corruption, not a torn tail: New refuses to
// start and names the file and offset.
//
// # Raw mode
//
// With Options.Positions the sink is a primary-raw sink (sink.Raw): every
// committed record gets a position, the next integer after the previous
// record's, and files are named by the position of their first line,
// raw-<position, 20 digits>.ndjson, so that the file holding a position is
// the last one, in name order, whose first position is not above it. The
// record at line k (from 0) of a file is at the file's first position plus
// k; lines at or past the next file's first position hold nothing (they can
// only be what a failed batch left behind) and are never read.
//
// New re-derives the end position (one past the last record) from the last
// file's line count after its crash recovery. ReadFrom finds the file by
// name and scans it, remembering where the previous read stopped so that a
// sequence of reads does not rescan a file from its start.
//
// A failed write or fdatasync in raw mode does not rescue the file into a
// fresh one: the file is closed unsynced, left .open, and the sink refuses
// every later commit (a transient error) until it is reopened, when
// recovery finishes the file. Keeping one file per first position keeps the
// position-to-file mapping trivially crash-safe; the write-ahead buffer
// upstream holds the batches meanwhile.
package filesink

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// Defaults for zero Options fields.
const (
	DefaultMaxBytes     int64 = 128 << 20
	DefaultMaxAge             = time.Minute
	DefaultMaxBatchSize       = 4096
)

// File name parts.
const (
	filePrefix   = "weir-"
	SuffixDone   = ".ndjson"
	SuffixOpen   = ".ndjson.open"
	SuffixFailed = ".ndjson.failed"
	maxSeq       = 1_000_000
)

const (
	dirPerm  = 0o750
	filePerm = 0o640
)

// MaxFailedFiles is how many .ndjson.failed files the sink keeps for
// inspection; it removes the oldest ones beyond it.
const MaxFailedFiles = 4

// maxLitter is how many abandoned files that could not be removed the sink
// tolerates before it stops starting new files.
const maxLitter = 4

// ErrClosed is returned by Commit after Close.
var ErrClosed = errors.New("filesink: sink is closed")

// Options configure a Sink.
type Options struct {
	// FS is the file system; nil means vfs.OS.
	FS vfs.FS
	// Dir is the output directory; it is created (durably) if missing.
	Dir string
	// MaxBytes finishes a file once it holds this many bytes. A file can
	// exceed it by at most one batch: a batch is never split across files,
	// and one that would overflow a non-empty file goes to a new file.
	// Zero means DefaultMaxBytes.
	MaxBytes int64
	// MaxAge finishes a file once it is this old. Zero means DefaultMaxAge.
	MaxAge time.Duration
	// MaxBatchSize is what MaxBatchSize reports. Zero means
	// DefaultMaxBatchSize. Larger batches are still accepted.
	MaxBatchSize int
	// Logger receives file lifecycle and failure events; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Positions turns on raw mode (see the package documentation): the
	// sink numbers its records and can read them back by position. A
	// directory is written in one mode only.
	Positions bool
	// NoSync skips the fdatasync of each Commit (a [[secondary]] with
	// durable = false): a committed batch may be lost by a power loss
	// until its file is finished, which fdatasyncs it before the rename.
	// Not with Positions: raw is always durable.
	NoSync bool
}

// Sink writes records to NDJSON files. It implements sink.Sink.
type Sink struct {
	fs     vfs.FS
	dir    string
	opts   Options
	logger *slog.Logger
	now    func() time.Time

	mu  sync.Mutex // serialises Commit and Close
	cur *openFile
	buf []byte // encode buffer: at most about 2 × EncodeChunk kept between commits
	// encoded is how many of the batch's records encodedSize left in buf.
	encoded int
	seq     int   // next file's sequence number
	lastNs  int64 // start time of the newest file, Unix nanos
	closed  bool
	// finishErr is set when finishing a file failed during this Commit:
	// the commit stands but the sink stays degraded.
	finishErr error
	// orphan is set when an abandoned file holding committed records could
	// not be rescued; the sink stays degraded until restarted.
	orphan error
	// failed lists the .failed files, oldest first (at most
	// MaxFailedFiles); litter the abandoned files that could not be
	// removed yet (see sweep).
	failed  []string
	litter  []string
	healthM sync.Mutex
	health  sink.Health

	// Raw mode.
	end    atomic.Uint64 // one past the last acknowledged position
	broken error         // a failed write or sync: refuse commits until reopened
	raw    *rawDir       // reads by position
}

type openFile struct {
	f       vfs.File
	base    string // name without suffix
	size    int64
	created time.Time
	first   uint64 // raw mode: position of the file's first line
}

var _ sink.Raw = (*Sink)(nil)

// New opens a file sink on opts.Dir, recovering any file a crash left open.
func New(ctx context.Context, opts Options) (*Sink, error) {
	if opts.Dir == "" {
		return nil, errors.New("filesink: no directory")
	}
	if opts.NoSync && opts.Positions {
		return nil, errors.New("filesink: raw mode is always durable (NoSync with Positions)")
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
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Sink{
		fs:     opts.FS,
		dir:    filepath.Clean(opts.Dir),
		opts:   opts,
		logger: opts.Logger.With("sink", "file", "dir", filepath.Clean(opts.Dir)),
		now:    opts.Now,
		health: sink.Health{State: sink.Healthy},
	}
	s.raw = &rawDir{fs: s.fs, dir: s.dir}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.fs.MkdirAll(s.dir, dirPerm); err != nil {
		return nil, fmt.Errorf("filesink: create %s: %w", s.dir, err)
	}
	if err := s.recover(ctx); err != nil {
		return nil, err
	}
	if opts.Positions {
		if err := s.recoverEnd(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Name implements sink.Sink.
func (s *Sink) Name() string { return "file" }

// MaxBatchSize implements sink.Sink.
func (s *Sink) MaxBatchSize() int { return s.opts.MaxBatchSize }

// Health implements sink.Sink: Degraded, with the reason, from a failure
// until the next successful Commit.
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

// Commit implements sink.Sink. Every record is committed or, on error,
// none may be assumed committed; the file sink never rejects a record. All
// I/O errors are transient: nothing about a batch makes it unwritable, and
// dead-lettering it would not fix a full or failing disk.
func (s *Sink) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	res, _, err := s.commitLocked(ctx, b)
	return res, err
}

func (s *Sink) commitLocked(ctx context.Context, b sink.Batch) (sink.CommitResult, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := s.end.Load()
	if s.closed {
		return sink.CommitResult{}, first, sink.Permanent(ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return sink.CommitResult{}, first, sink.Transient(fmt.Errorf("filesink: commit: %w", err))
	}
	if s.broken != nil {
		return sink.CommitResult{}, first, sink.Transient(s.broken)
	}
	s.finishErr = nil
	if err := s.commit(b); err != nil {
		s.setHealth(sink.Health{State: sink.Degraded, Reason: err.Error()})
		if s.broken != nil {
			s.setHealth(sink.Health{State: sink.Down, Reason: s.broken.Error()})
		}
		return sink.CommitResult{}, first, sink.Transient(err)
	}
	switch {
	case s.orphan != nil:
		s.setHealth(sink.Health{State: sink.Degraded, Reason: s.orphan.Error()})
	case s.finishErr == nil:
		s.setHealth(sink.Health{State: sink.Healthy})
	}
	return sink.CommitResult{}, first, nil
}

func (s *Sink) commit(b sink.Batch) error {
	now := s.now()
	if s.cur != nil && now.Sub(s.cur.created) >= s.opts.MaxAge {
		s.finish("age")
	}
	if len(b.Records) == 0 {
		return nil
	}
	size := s.encodedSize(b.Records)
	if s.cur != nil && s.cur.size > 0 && s.cur.size+size > s.opts.MaxBytes {
		s.finish("size")
	}
	created := false
	if s.cur == nil {
		if err := s.create(now); err != nil {
			return err
		}
		created = true
	}
	cur := s.cur
	if err := s.writeChunks(cur, b.Records); err != nil {
		s.abandon(err)
		return fmt.Errorf("filesink: write %s: %w", cur.base+SuffixOpen, err)
	}
	if err := s.syncCommit(cur); err != nil {
		s.abandon(err)
		return fmt.Errorf("filesink: fdatasync %s: %w", cur.base+SuffixOpen, err)
	}
	if created {
		if err := s.fs.SyncDir(s.dir); err != nil {
			// The data is synced but the new name may not be: the
			// batch cannot be called durable. Start over elsewhere.
			s.abandon(err)
			return fmt.Errorf("filesink: sync directory after creating %s: %w", cur.base+SuffixOpen, err)
		}
	}
	cur.size += size
	if s.opts.Positions {
		s.end.Add(uint64(len(b.Records)))
	}
	if cur.size >= s.opts.MaxBytes {
		// The batch is durable under the .open name, and a file left
		// .open is finished by recovery, so a failure here does not
		// undo the commit.
		s.finish("size")
	}
	return nil
}

// EncodeChunk is the most encoded bytes a commit holds before writing
// them: a batch is encoded and written in chunks of about this size, so
// the encode buffer does not grow with the batch (docs/flow_control.md,
// "Buffers outside records"). A single record larger than this is
// encoded alone, and its buffer is dropped after the commit.
const EncodeChunk = 1 << 20

// encodedSize is the batch's size once encoded. A batch that encodes
// within EncodeChunk is left encoded in s.buf for writeChunks; a larger
// one is measured record by record (encoding it twice costs less than
// holding its whole encoding).
func (s *Sink) encodedSize(recs []sink.Record) int64 {
	buf := s.buf[:0]
	i := 0
	for ; i < len(recs) && len(buf) < EncodeChunk; i++ {
		buf = appendRecord(buf, &recs[i])
	}
	size := int64(len(buf))
	if i == len(recs) {
		s.buf, s.encoded = buf, i
		return size
	}
	for ; i < len(recs); i++ {
		buf = appendRecord(buf[:0], &recs[i])
		size += int64(len(buf))
	}
	s.buf, s.encoded = buf[:0], 0
	return size
}

// writeChunks writes the batch to f in chunks of about EncodeChunk
// bytes (s.buf may already hold the whole batch, from encodedSize), then
// drops a buffer that a large record grew beyond EncodeChunk's worth.
func (s *Sink) writeChunks(cur *openFile, recs []sink.Record) error {
	defer func() {
		if cap(s.buf) > 2*EncodeChunk {
			s.buf = nil
		}
		s.encoded = 0
	}()
	if s.encoded == len(recs) {
		_, err := cur.f.Write(s.buf)
		return err
	}
	buf := s.buf[:0]
	for i := range recs {
		buf = appendRecord(buf, &recs[i])
		if len(buf) >= EncodeChunk || i == len(recs)-1 {
			if _, err := cur.f.Write(buf); err != nil {
				s.buf = buf
				return err
			}
			buf = buf[:0]
		}
	}
	s.buf = buf
	return nil
}

// create starts a new .open file as the current one. Its directory entry is
// synced by the commit that writes to it, before that commit returns.
func (s *Sink) create(now time.Time) error {
	f, err := s.newFile(now)
	if err != nil {
		return err
	}
	s.cur = f
	return nil
}

func (s *Sink) newFile(now time.Time) (*openFile, error) {
	if s.opts.Positions {
		first := s.end.Load()
		base := rawBase(first)
		f, err := s.fs.Create(filepath.Join(s.dir, base+SuffixOpen), filePerm)
		if err != nil {
			return nil, fmt.Errorf("filesink: create file: %w", err)
		}
		s.logger.Debug("file started", "file", base+SuffixOpen)
		return &openFile{f: f, base: base, created: now, first: first}, nil
	}
	if err := s.sweep(); err != nil {
		return nil, err
	}
	ns := now.UnixNano()
	if ns < s.lastNs {
		ns = s.lastNs // names must sort in creation order, whatever the clock does
	}
	base := fmt.Sprintf("%s%020d-%06d", filePrefix, ns, s.seq)
	f, err := s.fs.Create(filepath.Join(s.dir, base+SuffixOpen), filePerm)
	if err != nil {
		return nil, fmt.Errorf("filesink: create file: %w", err)
	}
	s.lastNs = ns
	s.seq = (s.seq + 1) % maxSeq
	s.logger.Debug("file started", "file", base+SuffixOpen)
	return &openFile{f: f, base: base, created: now}, nil
}

// syncCommit makes a commit's write durable, unless NoSync.
func (s *Sink) syncCommit(cur *openFile) error {
	if s.opts.NoSync {
		return nil
	}
	return cur.f.Sync()
}

// finish renames the current file to .ndjson. Its data is already synced
// (with NoSync it is synced here). Errors are logged and make the sink
// degraded; the file is dropped either way (a file left .open is finished
// by the next recovery).
func (s *Sink) finish(why string) error {
	cur := s.cur
	s.cur = nil
	open := filepath.Join(s.dir, cur.base+SuffixOpen)
	done := filepath.Join(s.dir, cur.base+SuffixDone)
	var err error
	if s.opts.NoSync {
		err = cur.f.Sync()
	}
	if cerr := cur.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.Rename(open, done)
	}
	if err == nil {
		err = s.fs.SyncDir(s.dir)
	}
	if err != nil {
		err = fmt.Errorf("filesink: finish %s: %w", open, err)
		s.logger.Error("could not finish file; it will be finished at the next start", "file", open, "err", err)
		s.setHealth(sink.Health{State: sink.Degraded, Reason: err.Error()})
		s.finishErr = err
		return err
	}
	s.logger.Debug("file finished", "file", cur.base+SuffixDone, "bytes", cur.size, "reason", why)
	return nil
}

// abandon gives up on the current file after a failed write or sync. Its
// state past the last successful sync is unknown and it must never be
// synced again, but everything before that point was committed by earlier
// batches and must stay readable. A file holding no committed byte is
// simply removed. Otherwise the committed prefix is copied into a fresh
// file, which becomes the current one, and only then is the old file
// renamed to .ndjson.failed. If the copy fails too, the old file is left as
// .ndjson.open — closed, never synced — for recovery at the next start to
// finish, and the sink stays degraded until then.
func (s *Sink) abandon(cause error) {
	cur := s.cur
	s.cur = nil
	if s.opts.Positions {
		// Raw mode: leave the file .open, unsynced, for recovery at the
		// next start; Commit refuses until then.
		_ = cur.f.Close()
		s.broken = fmt.Errorf("filesink: raw sink stopped after an I/O error on %s, reopen to recover: %w", cur.base+SuffixOpen, cause)
		s.logger.Error("raw file abandoned after an I/O error; commits refused until the sink is reopened",
			"file", cur.base+SuffixOpen, "committed_bytes", cur.size, "err", cause)
		return
	}
	open := filepath.Join(s.dir, cur.base+SuffixOpen)
	s.logger.Error("file abandoned after an I/O error; the batch will be retried into a new file",
		"file", open, "committed_bytes", cur.size, "err", cause)
	if cur.size == 0 {
		_ = cur.f.Close()
		s.discard(open)
		return
	}
	rescued, err := s.rescue(cur)
	_ = cur.f.Close() // no sync: that is the point
	if err != nil {
		s.orphan = fmt.Errorf("filesink: %s holds committed records and could not be copied (%w); it is finished at the next start", open, err)
		s.logger.Error("could not rescue committed records from abandoned file", "file", open, "err", err)
		return
	}
	s.cur = rescued
	s.retire(open, filepath.Join(s.dir, cur.base+SuffixFailed))
}

// retire renames an abandoned file whose committed records were copied
// elsewhere to .failed, and removes the oldest .failed files beyond
// MaxFailedFiles. A file that cannot be renamed is removed instead.
func (s *Sink) retire(open, failed string) {
	if err := s.fs.Rename(open, failed); err != nil {
		s.logger.Error("could not rename abandoned file; removing it", "file", open, "err", err)
		s.discard(open)
		return
	}
	s.failed = append(s.failed, failed)
	for len(s.failed) > MaxFailedFiles {
		old := s.failed[0]
		s.failed = s.failed[1:]
		if err := s.fs.Remove(old); err != nil {
			s.logger.Error("could not remove old abandoned file", "file", old, "err", err)
			s.litter = append(s.litter, old)
		}
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		s.logger.Error("could not sync directory after abandoning file", "file", failed, "err", err)
	}
}

// discard removes an abandoned file that holds no record only it has. One
// that cannot be removed becomes litter, removed again by sweep.
func (s *Sink) discard(path string) {
	if err := s.fs.Remove(path); err != nil {
		s.logger.Error("could not remove abandoned file", "file", path, "err", err)
		s.litter = append(s.litter, path)
		return
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		s.logger.Error("could not sync directory after removing abandoned file", "file", path, "err", err)
	}
}

// sweep tries again to remove the litter before a new file is started, and
// refuses to let one start while maxLitter files remain: failures must not
// fill the directory.
func (s *Sink) sweep() error {
	if len(s.litter) == 0 {
		return nil
	}
	var last error
	kept := s.litter[:0]
	for _, path := range s.litter {
		if err := s.fs.Remove(path); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			kept, last = append(kept, path), err
		}
	}
	if len(kept) < len(s.litter) {
		if err := s.fs.SyncDir(s.dir); err != nil {
			s.logger.Error("could not sync directory after removing abandoned files", "err", err)
		}
	}
	s.litter = kept
	if len(kept) >= maxLitter {
		return fmt.Errorf("filesink: %d abandoned files could not be removed, so no new file is started (last error: %w)", len(kept), last)
	}
	return nil
}

// rescue copies the committed prefix of cur into a new, synced file.
func (s *Sink) rescue(cur *openFile) (*openFile, error) {
	nf, err := s.newFile(s.now())
	if err != nil {
		return nil, err
	}
	nf.created = cur.created // the data is as old as it was
	path := filepath.Join(s.dir, nf.base+SuffixOpen)
	_, err = io.Copy(nf.f, io.NewSectionReader(cur.f, 0, cur.size))
	if err == nil {
		err = nf.f.Sync()
	}
	if err == nil {
		err = s.fs.SyncDir(s.dir)
	}
	if err != nil {
		_ = nf.f.Close()
		s.discard(path)
		return nil, fmt.Errorf("copy to %s: %w", path, err)
	}
	nf.size = cur.size
	s.logger.Warn("committed records of abandoned file copied to a new file", "from", cur.base+SuffixOpen, "to", nf.base+SuffixOpen, "bytes", cur.size)
	return nf, nil
}

// Close finishes the current file. Committed data is already durable.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.cur != nil {
		return s.finish("close")
	}
	return nil
}

// parseName splits weir-<ns>-<seq><suffix>.
func parseName(name string) (ns int64, seq int, suffix string, ok bool) {
	for _, suf := range []string{SuffixOpen, SuffixFailed, SuffixDone} {
		if strings.HasSuffix(name, suf) {
			suffix = suf
			break
		}
	}
	if suffix == "" || !strings.HasPrefix(name, filePrefix) {
		return 0, 0, "", false
	}
	mid := strings.TrimSuffix(strings.TrimPrefix(name, filePrefix), suffix)
	a, b, found := strings.Cut(mid, "-")
	if !found || len(a) != 20 || len(b) != 6 {
		return 0, 0, "", false
	}
	n, err1 := strconv.ParseInt(a, 10, 64)
	q, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		return 0, 0, "", false
	}
	return n, q, suffix, true
}

// recover finishes .open files and picks up the naming sequence.
func (s *Sink) recover(ctx context.Context) error {
	names, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("filesink: list %s: %w", s.dir, err)
	}
	changed := false
	for _, name := range names {
		var ns int64
		var seq int
		var suffix string
		var ok bool
		if s.opts.Positions {
			_, suffix, ok = parseRawName(name)
		} else {
			ns, seq, suffix, ok = parseName(name)
		}
		if !ok {
			continue
		}
		if ns > s.lastNs || (ns == s.lastNs && seq >= s.seq) {
			s.lastNs, s.seq = ns, (seq+1)%maxSeq
		}
		if suffix == SuffixFailed {
			s.failed = append(s.failed, filepath.Join(s.dir, name))
		}
		if suffix != SuffixOpen {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.recoverFile(name); err != nil {
			return err
		}
		changed = true
	}
	if changed {
		if err := s.fs.SyncDir(s.dir); err != nil {
			return fmt.Errorf("filesink: recovery: %w", err)
		}
	}
	return nil
}

func (s *Sink) recoverFile(name string) error {
	path := filepath.Join(s.dir, name)
	f, err := s.fs.OpenReadWrite(path)
	if err != nil {
		return fmt.Errorf("filesink: recover %s: %w", path, err)
	}
	defer f.Close()
	keep, size, err := validPrefix(f)
	if err != nil {
		return fmt.Errorf("filesink: recover %s: %w", path, err)
	}
	if keep == 0 {
		if err := s.fs.Remove(path); err != nil {
			return fmt.Errorf("filesink: recover %s: remove empty file: %w", path, err)
		}
		s.logger.Info("removed empty file left open by a crash", "file", name)
		return nil
	}
	if keep < size {
		if err := f.Truncate(keep); err != nil {
			return fmt.Errorf("filesink: recover %s: truncate to %d: %w", path, keep, err)
		}
		s.logger.Warn("truncated torn tail of file left open by a crash", "file", name, "offset", keep, "dropped_bytes", size-keep)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("filesink: recover %s: fdatasync: %w", path, err)
	}
	done := filepath.Join(s.dir, strings.TrimSuffix(name, SuffixOpen)+SuffixDone)
	if err := s.fs.Rename(path, done); err != nil {
		return fmt.Errorf("filesink: recover %s: %w", path, err)
	}
	s.logger.Info("finished file left open by a crash", "file", filepath.Base(done), "bytes", keep)
	return nil
}

// recoverReadBytes is the read buffer of validPrefix.
const recoverReadBytes = 64 << 10

// validPrefix reads r to its end and returns the length of its data up to
// the end of its last valid line, and the length of all of it. Anything
// after that line — a partial line, zeros, junk — is a torn tail. A bad
// line followed by a good one is corruption and an error. It holds one
// line at a time, not the file: a file left open by a crash may be as
// large as MaxBytes, and it is read at start, outside any memory budget
// (docs/flow_control.md, "Buffers outside records").
func validPrefix(r io.Reader) (keep, size int64, err error) {
	br := bufio.NewReaderSize(r, recoverReadBytes)
	badAt := int64(-1)
	var long []byte // a line longer than br's buffer
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		size += int64(len(line))
		switch {
		case errors.Is(err, io.EOF):
			return keep, size, nil // a partial last line, if any
		case err != nil:
			return 0, 0, fmt.Errorf("read: %w", err)
		}
		if validLine(line[:len(line)-1]) {
			if badAt >= 0 {
				return 0, 0, fmt.Errorf("corrupt line at offset %d followed by valid lines; refusing to truncate committed data", badAt)
			}
			keep = size
		} else if badAt < 0 {
			badAt = size - int64(len(line))
		}
	}
}

func validLine(line []byte) bool {
	return bytes.HasPrefix(line, []byte(`{"weir_record_id":"`)) && json.Valid(line)
}
