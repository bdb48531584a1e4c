// Package filesrc tails newline-delimited files matched by a glob and
// writes their lines through a gate, saving its cursor only after the gate
// has made the lines durable.
//
// # Position regime
//
// Store-managed: nothing upstream keeps a position, so the source persists
// its own cursor through a source.CursorStore — for every file it tracks,
// the file's identity and the byte offset reading resumes at. A cursor is
// saved only after Gate.Write returned nil for every line before its
// offset. A crash between the write and the save re-reads that last batch
// (the same ids: duplicates that sinks drop); nothing is skipped.
//
// The origin is replayable: the files are still there, so losing the
// cursor costs a re-read, not data.
//
// # File identity, rotation, truncation
//
// A file is known by its device and inode number, not its name, plus a
// generation that the source bumps when the file is truncated or its
// content is replaced. The cursor also keeps a fingerprint: a hash of the
// file's first bytes (up to FingerprintBytes of what was consumed). When a
// tracked file is looked at again:
//
//   - size below the consumed offset: truncated (copytruncate rotation) —
//     read again from 0 under the next generation;
//   - first bytes no longer match the fingerprint: the inode was reused by
//     a new file or the file was rewritten — likewise from 0, next
//     generation.
//
// Rotation by rename keeps the inode: a file that no longer matches the
// glob (app.log renamed app.log.1) is still found by identity in the
// glob's directory, or read through the descriptor the source holds, and
// is read to its end; once it has not grown for RotateGrace it is
// dropped, its last unterminated line (if any) emitted as a record. The
// new file under the old name is a new identity, read from its start.
// Lines of rotated files are read before those of the files that replaced
// them.
//
// # Record ids
//
// source.TimedID(birth, name, device, inode, generation, offset, payload):
// the same line re-read after a crash has the same id. A line has no time
// of its own, and the time it was read changes when it is read again, so
// the time in its id is its file's birth time (statx's btime; ms 0 on a
// file system that does not record one): ids of one file share their
// leading 48 bits, and a newer file's ids sort after an older one's. A
// file copied to a new inode (restored from a backup, say) gets new ids.
//
// # Lines
//
// A record is one line without its newline. A line is emitted only once its
// newline is there, except at the end of a dropped rotated file. A line
// longer than MaxLineBytes is cut into pieces of MaxLineBytes (each a
// record) and a warning logged: nothing is lost, but the pieces are
// separate records.
//
// # Read-ahead and pausing
//
// What one batch reads — lines held until the gate (or, as its own raw,
// the origin) has them durably — is at most MaxBatchBytes. Given
// Options.Prefetch (the source's share of the memory budget, in memory
// bytes) and no explicit MaxBatchBytes, the source derives it once, at
// New: Prefetch ÷ the estimated expansion, at most DefaultMaxBatchBytes
// (StagedReadAhead). Either way it is at least MaxLineBytes + 1, or a line
// longer than a batch could never be read.
//
// Source implements source.Pausable: while paused it reads nothing (the
// batch in hand is still made durable and its cursor saved).
//
// # Its own raw
//
// Usually the gate makes a batch durable: the write-ahead buffer, and a
// primary-raw sink that keeps a copy of every record so that lagging sinks
// can be recovered from it. A file source can be its own raw instead
// (Options.Origin): the files it tails are the system of record, and an
// OriginRaw numbers their lines — a position is a line of a file
// generation, and no copy is kept. Only a replayable origin can play that
// part: a raw must give back every position after any crash, and a file
// still holds the line where it was read, while a socket feed that has
// been acknowledged is gone.
//
// Durable then means on the disk of the origin files. For each batch weir
// fdatasyncs every file the batch read from — whoever writes a log rarely
// syncs it — and, the first time it sees a file, its directory; then it
// appends to an index (OriginOptions.Dir) which byte ranges of which file
// generations hold the batch's positions, and fdatasyncs the index. Only
// then is the batch acknowledged: OnDurable sees it, and the cursor is
// saved. A failed fdatasync — of an origin file, its directory or the
// index — is never retried: the batch is not acknowledged, and the
// OriginRaw refuses every later batch until it is reopened (after a
// failed writeback Linux may mark the dirty pages clean, and a second
// fdatasync succeed although the lines never reached the disk). The index
// is authoritative: the cursor records how much of the index it reflects,
// and a restart first moves the cursor up to every entry past that, so
// neither a crash between the index append and the cursor save nor a
// cursor store that failed for several batches ever gives the same lines
// a second set of positions.
//
// Retention is the origin's. A position can be read back (to recover a
// lagging secondary sink) as long as its file still holds the line, under
// any name in the glob's directory. Once rotation deletes a file, or
// copytruncate empties it, its positions are gone: OriginRaw.ReadFrom
// returns a GoneError, which wraps sink.ErrPositionGone. Keep rotated files
// at least as long as the longest outage of a secondary sink. For the same
// reason a file deleted while the source reads it is not read on through
// the source's descriptor, as it is otherwise: its lines could be given
// only positions that are gone at once (OriginRaw.Append refuses a file
// that has no name left). The source drops it with a warning; its lines
// not yet acknowledged get no positions — deleting the origin deletes
// them.
package filesrc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

// Defaults for Options.
const (
	DefaultPollInterval     = 250 * time.Millisecond
	DefaultMaxBatchRecords  = 1024
	DefaultMaxBatchBytes    = 4 << 20
	DefaultMaxLineBytes     = 1 << 20
	DefaultFingerprintBytes = 1024
	DefaultRotateGrace      = 10 * time.Second
)

// Options configure New. Name and Glob are required.
type Options struct {
	// Name is the source's name and its key in the cursor store.
	Name string
	// Glob selects the files (filepath.Match syntax), e.g.
	// "/var/log/app/*.log". Rotated files are looked for in the glob's
	// directory, so keep the wildcard in the file name part.
	Glob string
	// PollInterval: how often the files are looked at when there was
	// nothing to read (default DefaultPollInterval).
	PollInterval time.Duration
	// MaxBatchRecords, MaxBatchBytes bound one gate write (defaults
	// DefaultMaxBatchRecords, and DefaultMaxBatchBytes or, with Prefetch,
	// StagedReadAhead; never below MaxLineBytes + 1). MaxBatchBytes is
	// the read-ahead: all a batch reads into memory.
	MaxBatchRecords int
	MaxBatchBytes   int
	// MaxLineBytes: longer lines are cut (default DefaultMaxLineBytes).
	MaxLineBytes int
	// FingerprintBytes: how many leading bytes identify a file's content
	// (default DefaultFingerprintBytes).
	FingerprintBytes int
	// RotateGrace: how long a file that no longer matches the glob is
	// kept open, waiting for a writer that still has it open (default
	// DefaultRotateGrace).
	RotateGrace time.Duration
	Logger      *slog.Logger
	// OnCommit, if set, is called before each cursor save for every file
	// whose offset moved, with FileKey of the file and the new offset
	// (every line starting before it is claimed durable).
	OnCommit func(file string, next int64)
	// Origin, if set, makes the source its own raw (see "Its own raw"):
	// each batch is appended to Origin instead of being written through a
	// gate, which Run then does not need.
	Origin *OriginRaw
	// OnDurable, in origin mode, is called with each batch once Origin
	// has made it durable, before the cursor is saved, with the position
	// of recs[0]. It runs on Run's goroutine; the next batch waits for it.
	OnDurable func(first uint64, recs []source.Record)
	// Admit, in origin mode, holds memory for each batch from before
	// Origin makes it durable until OnDurable returned (nil: nothing is
	// held): without a gate, the source reserves for itself.
	Admit func(ctx context.Context, recs []source.Record) (release func(), err error)
	// Prefetch, if > 0, bounds the read-ahead in memory bytes (see the
	// package doc, Read-ahead and pausing).
	Prefetch int64
	// Estimator, if set, is told each batch's data size against the
	// memory it takes, and sizes the read-ahead.
	Estimator *flow.Estimator
}

// Source is a file-tailing source.
type Source struct {
	opts  Options
	log   *slog.Logger
	dir   string // where rotated files are looked for ("" if the directory has wildcards)
	files []*file
	pause source.Pauser
}

var (
	_ source.Source   = (*Source)(nil)
	_ source.Pausable = (*Source)(nil)
)

// New checks opts and returns a source.
func New(opts Options) (*Source, error) {
	opts, err := withDefaults(opts)
	if err != nil {
		return nil, err
	}
	if opts.Origin != nil {
		if err := checkOrigin(opts); err != nil {
			return nil, err
		}
	}
	s := &Source{opts: opts, log: opts.Logger.With("component", "source", "source", opts.Name), dir: globDir(opts.Glob)}
	s.pause.OnChange = func(paused bool) { s.log.Info("file source paused (reading stopped) or resumed", "paused", paused) }
	if opts.Prefetch > 0 {
		s.log.Info("file read-ahead from the memory budget", "prefetch_bytes", opts.Prefetch, "max_batch_bytes", opts.MaxBatchBytes)
	}
	return s, nil
}

// StagedReadAhead is the read-ahead derived from prefetch, the memory a
// batch may take (bytes as held), and ratio, the memory per byte read:
// prefetch ÷ ratio, at most DefaultMaxBatchBytes, at least maxLine + 1.
func StagedReadAhead(prefetch int64, ratio float64, maxLine int) int {
	n := min(int64(float64(prefetch)/max(ratio, 1)), DefaultMaxBatchBytes)
	return int(max(n, int64(maxLine)+1))
}

// Pause stops reading; the batch in hand is still made durable.
// Idempotent, safe from any goroutine.
func (s *Source) Pause() { s.pause.Pause() }

// Resume reads again.
func (s *Source) Resume() { s.pause.Resume() }

// withDefaults checks opts and fills in the defaults.
func withDefaults(opts Options) (Options, error) {
	if opts.Name == "" || opts.Glob == "" {
		return opts, errors.New("filesrc: Name and Glob are required")
	}
	if _, err := filepath.Match(opts.Glob, ""); err != nil {
		return opts, fmt.Errorf("filesrc: bad glob %q: %w", opts.Glob, err)
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.MaxBatchRecords <= 0 {
		opts.MaxBatchRecords = DefaultMaxBatchRecords
	}
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = DefaultMaxLineBytes
	}
	if opts.MaxBatchBytes <= 0 {
		opts.MaxBatchBytes = DefaultMaxBatchBytes
		if opts.Prefetch > 0 {
			ratio := flow.DefaultColdRatio
			if opts.Estimator != nil {
				ratio = opts.Estimator.Ratio()
			}
			opts.MaxBatchBytes = StagedReadAhead(opts.Prefetch, ratio, opts.MaxLineBytes)
		}
	}
	// A batch must hold the longest line, or reading stops at it.
	opts.MaxBatchBytes = max(opts.MaxBatchBytes, opts.MaxLineBytes+1)
	if opts.FingerprintBytes <= 0 {
		opts.FingerprintBytes = DefaultFingerprintBytes
	}
	if opts.RotateGrace <= 0 {
		opts.RotateGrace = DefaultRotateGrace
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return opts, nil
}

// globDir is where rotated files are looked for: the glob's directory, or
// "" if the directory part has wildcards.
func globDir(glob string) string {
	if d := filepath.Dir(glob); !strings.ContainsAny(d, `*?[\`) {
		return d
	}
	return ""
}

// Name implements source.Source.
func (s *Source) Name() string { return s.opts.Name }

// Regime is store-managed: the source's cursor lives in the offset store.
func (s *Source) Regime() source.Regime { return source.StoreManaged }

// Replayable is true: the files can be read again.
func (s *Source) Replayable() bool { return true }

// FileKey names a file generation in positions: "dev:ino:gen".
func FileKey(dev, ino uint64, gen uint32) string {
	return strconv.FormatUint(dev, 10) + ":" + strconv.FormatUint(ino, 10) + ":" + strconv.FormatUint(uint64(gen), 10)
}

// Identify returns the device and inode of the file at path.
func Identify(path string) (dev, ino uint64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, fmt.Errorf("filesrc: %s: no inode information", path)
	}
	return uint64(st.Dev), uint64(st.Ino), nil
}

// file is one tracked file. The exported fields are the cursor.
type file struct {
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
	Gen    uint32 `json:"gen"`
	Offset int64  `json:"off"`  // durable: every line before it is in the gate
	FPLen  int    `json:"fpl"`  // fingerprint covers the first FPLen bytes
	FP     uint64 `json:"fp"`   // FNV-1a of those bytes
	Path   string `json:"path"` // last seen under this name (informational)

	f        *os.File
	born     time.Time // f's birth time (vfs.Birth): the time in its lines' ids
	size     int64
	matched  bool      // matches the glob now
	lastGrow time.Time // last time size changed (for rotated files)
}

type cursor struct {
	Version int     `json:"v"`
	Files   []*file `json:"files"`
	// Origin, in origin mode, is the origin raw's End when the cursor was
	// saved: the index entries below it are in Files (see catchUp).
	Origin *uint64 `json:"origin,omitempty"`
}

func (f *file) key() string { return FileKey(f.Dev, f.Ino, f.Gen) }

// Run tails until ctx ends (then it returns nil) or the gate (in origin
// mode: the origin raw) or the cursor store fails. In origin mode gate may
// be nil.
func (s *Source) Run(ctx context.Context, gate source.Gate, cursors source.CursorStore) error {
	if cursors == nil {
		return errors.New("filesrc: a cursor store is required")
	}
	if gate == nil && s.opts.Origin == nil {
		return errors.New("filesrc: a gate is required")
	}
	defer s.closeAll()
	c, err := cursors.Load(ctx, s.opts.Name)
	if err != nil {
		return fmt.Errorf("filesrc: %s: load cursor: %w", s.opts.Name, err)
	}
	s.files = nil
	var cur cursor
	if len(c) > 0 {
		if err := json.Unmarshal(c, &cur); err != nil || cur.Version != 1 {
			return fmt.Errorf("filesrc: %s: unreadable cursor (%v): refusing to guess a position", s.opts.Name, err)
		}
		s.files = cur.Files
	}
	if s.opts.Origin != nil {
		if moves, save := s.catchUp(cur.Origin); save {
			if err := s.commit(ctx, cursors, moves); err != nil {
				return err
			}
		}
	}
	for {
		if err := s.pause.Wait(ctx); err != nil {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return nil
		}
		s.scan()
		recs, moves := s.collect()
		if len(recs) == 0 {
			t := time.NewTimer(s.opts.PollInterval)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		if e := s.opts.Estimator; e != nil {
			e.Observe(source.Sizes(recs))
		}
		if err := s.durable(ctx, gate, recs, moves); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// A file deleted since scan: drop it and collect the batch
			// again without it (nothing of this one was acknowledged).
			var de *deletedError
			if errors.As(err, &de) {
				if f := s.find(de.dev, de.ino); f != nil && f.f != nil && s.deleted(f) {
					continue
				}
			}
			return err
		}
		if err := s.commit(ctx, cursors, moves); err != nil {
			return err
		}
	}
}

// move is a file's new offset once a batch is durable.
type move struct {
	f    *file
	next int64
	n    int  // records read from f in this batch
	drop bool // the file is done (rotated away and finished)
}

func (s *Source) commit(ctx context.Context, cursors source.CursorStore, moves []move) error {
	for _, m := range moves {
		m.f.Offset = m.next
		s.fingerprint(m.f)
	}
	if s.opts.OnCommit != nil {
		for _, m := range moves {
			s.opts.OnCommit(m.f.key(), m.next)
		}
	}
	for _, m := range moves {
		if m.drop {
			s.dropFile(m.f)
		}
	}
	cur := cursor{Version: 1, Files: s.files}
	if s.opts.Origin != nil {
		end, err := s.opts.Origin.End(ctx)
		if err != nil {
			return fmt.Errorf("filesrc: %s: origin raw end: %w", s.opts.Name, err)
		}
		cur.Origin = &end
	}
	b, err := json.Marshal(cur)
	if err != nil {
		return fmt.Errorf("filesrc: %s: encode cursor: %w", s.opts.Name, err)
	}
	// The batch is durable: save even if ctx has just ended, so a clean
	// stop re-reads nothing.
	if err := cursors.Save(context.WithoutCancel(ctx), s.opts.Name, b); err != nil {
		return fmt.Errorf("filesrc: %s: save cursor: %w", s.opts.Name, err)
	}
	return nil
}

// fingerprint extends f's fingerprint over the consumed prefix, up to
// FingerprintBytes.
func (s *Source) fingerprint(f *file) {
	want := int(min(int64(s.opts.FingerprintBytes), f.Offset))
	if want <= f.FPLen || f.f == nil {
		return
	}
	if h, ok := hashPrefix(f.f, want); ok {
		f.FPLen, f.FP = want, h
	}
}

func hashPrefix(r io.ReaderAt, n int) (uint64, bool) {
	b := make([]byte, n)
	if _, err := r.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
		return 0, false
	}
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64(), true
}

func (s *Source) find(dev, ino uint64) *file {
	for _, f := range s.files {
		if f.Dev == dev && f.Ino == ino {
			return f
		}
	}
	return nil
}

// scan finds the files: the glob's matches, then tracked files under other
// names in the glob's directory; it opens what is not open and checks each
// for truncation and reuse.
func (s *Source) scan() {
	for _, f := range s.files {
		f.matched = false
	}
	paths, _ := filepath.Glob(s.opts.Glob) // the pattern was checked in New
	seen := map[*file]bool{}
	for _, p := range paths {
		if f := s.track(p, true); f != nil {
			seen[f] = true
		}
	}
	// Tracked files not found by the glob: renamed in the same directory?
	var missing bool
	for _, f := range s.files {
		if !seen[f] {
			missing = true
		}
	}
	if missing && s.dir != "" {
		if names, err := os.ReadDir(s.dir); err == nil {
			for _, de := range names {
				if !de.Type().IsRegular() {
					continue
				}
				p := filepath.Join(s.dir, de.Name())
				dev, ino, err := Identify(p)
				if err != nil {
					continue
				}
				if f := s.find(dev, ino); f != nil && !seen[f] {
					seen[f] = true
					s.track(p, false)
				}
			}
		}
	}
	for _, f := range slices.Clone(s.files) {
		if seen[f] {
			continue
		}
		if f.f == nil {
			// Gone before it could be opened again (after a restart).
			s.log.Warn("tracked file is gone; forgetting it", "file", f.key(), "path", f.Path, "offset", f.Offset)
			s.dropFile(f)
			continue
		}
		if s.opts.Origin != nil && s.deleted(f) {
			continue
		}
		// Deleted (or moved out of the glob's directory), but still
		// readable through the descriptor.
		s.refresh(f)
	}
}

// deleted drops f, in origin mode, if it has been deleted: its lines
// could not be given positions that can be read back (OriginRaw.Append
// refuses them), and with the origin as raw the application's deleting
// the file deletes its lines, those not yet read too.
func (s *Source) deleted(f *file) bool {
	fi, err := f.f.Stat()
	if err != nil || !unlinked(fi) {
		return false
	}
	s.log.Warn("tracked file deleted; dropping it, its unread lines with it (the source is its own raw)",
		"file", f.key(), "path", f.Path, "offset", f.Offset, "size", fi.Size())
	s.dropFile(f)
	return true
}

// track looks at the file at path: starts tracking a new one, reopens a
// tracked one, refreshes its size.
func (s *Source) track(path string, matched bool) *file {
	fd, err := os.Open(path)
	if err != nil {
		return nil
	}
	fi, err := fd.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		fd.Close()
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		fd.Close()
		return nil
	}
	dev, ino := uint64(st.Dev), uint64(st.Ino)
	f := s.find(dev, ino)
	if f == nil {
		f = &file{Dev: dev, Ino: ino}
		s.files = append(s.files, f)
		s.log.Info("tailing file", "path", path, "file", f.key())
	}
	if f.f == nil {
		f.f, f.born = fd, vfs.Birth(fd)
		f.lastGrow = time.Now()
	} else {
		fd.Close()
	}
	f.Path, f.matched = path, matched
	s.refresh(f)
	return f
}

// refresh reads f's size and checks it against the cursor.
func (s *Source) refresh(f *file) {
	fi, err := f.f.Stat()
	if err != nil {
		return
	}
	if fi.Size() != f.size {
		f.size, f.lastGrow = fi.Size(), time.Now()
	}
	reason := ""
	if f.size < f.Offset {
		reason = "truncated"
	} else if f.FPLen > 0 {
		if h, ok := hashPrefix(f.f, f.FPLen); !ok || h != f.FP {
			reason = "content replaced"
		}
	}
	if reason != "" {
		s.log.Warn("file "+reason+"; reading it again from the start", "path", f.Path, "file", f.key(), "offset", f.Offset, "size", f.size)
		f.Gen++
		f.Offset, f.FPLen, f.FP = 0, 0, 0
	}
}

func (s *Source) dropFile(f *file) {
	if f.f != nil {
		f.f.Close()
		f.f = nil
	}
	s.files = slices.DeleteFunc(s.files, func(g *file) bool { return g == f })
}

func (s *Source) closeAll() {
	for _, f := range s.files {
		if f.f != nil {
			f.f.Close()
			f.f = nil
		}
	}
}

// collect reads complete lines, rotated files first, within the batch
// limits. Nothing changes until the batch is durable (see commit).
func (s *Source) collect() ([]source.Record, []move) {
	order := slices.Clone(s.files)
	slices.SortStableFunc(order, func(a, b *file) int {
		if a.matched != b.matched {
			if !a.matched {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Path, b.Path)
	})
	var recs []source.Record
	var moves []move
	budget := s.opts.MaxBatchBytes
	now := time.Now()
	for _, f := range order {
		if f.f == nil || len(recs) >= s.opts.MaxBatchRecords || budget <= 0 {
			continue
		}
		final := !f.matched && now.Sub(f.lastGrow) >= s.opts.RotateGrace
		off, n := f.Offset, 0
		for off < f.size && len(recs) < s.opts.MaxBatchRecords && budget > 0 {
			buf := make([]byte, int(min(f.size-off, int64(min(budget, s.opts.MaxLineBytes)+1))))
			m, err := f.f.ReadAt(buf, off)
			if m == 0 && err != nil {
				break
			}
			buf = buf[:m]
			atEnd := final && int64(len(buf)) == f.size-off
			consumed := 0
			for len(recs) < s.opts.MaxBatchRecords {
				line, k, cut := nextLine(buf[consumed:], s.opts.MaxLineBytes, atEnd)
				if k == 0 {
					break
				}
				if cut {
					s.log.Warn("line longer than MaxLineBytes; cut", "file", f.key(), "offset", off+int64(consumed), "limit", s.opts.MaxLineBytes)
				}
				recs = append(recs, s.record(f, off+int64(consumed), line, now))
				consumed += k
				n++
			}
			if consumed == 0 {
				break
			}
			budget -= consumed
			off += int64(consumed)
		}
		done := final && off >= f.size
		if off != f.Offset || done {
			moves = append(moves, move{f: f, next: off, n: n, drop: done})
		}
	}
	if len(recs) == 0 {
		// Finished rotated files with nothing left: drop them now.
		for _, m := range moves {
			if m.drop {
				s.log.Info("rotated file finished", "path", m.f.Path, "file", m.f.key())
				s.dropFile(m.f)
			}
		}
		return nil, nil
	}
	return recs, moves
}

// nextLine cuts the record at the start of buf, the one way lines are cut
// (the source and OriginRaw's re-reads share it): up to the first newline
// within maxLine+1 bytes; else, if buf holds more than maxLine bytes, a
// piece of maxLine bytes (cut); else, if atEnd (buf reaches the end of what
// may be read: a dropped rotated file's end), all of buf. It returns the
// record's bytes and how many bytes it consumes, 0 when no record can be
// cut yet.
func nextLine(buf []byte, maxLine int, atEnd bool) (line []byte, consumed int, cut bool) {
	if i := bytes.IndexByte(buf[:min(len(buf), maxLine+1)], '\n'); i >= 0 {
		return buf[:i], i + 1, false
	}
	if len(buf) > maxLine {
		return buf[:maxLine], maxLine, true
	}
	if atEnd && len(buf) > 0 {
		return buf, len(buf), false
	}
	return nil, 0, false
}

// record makes the record of a line read at off; every record of a batch
// gets the batch's read time as Received. A line has no time of its own:
// no event time (Time stays zero), and no key or headers.
func (s *Source) record(f *file, off int64, line []byte, now time.Time) source.Record {
	p := slices.Clone(line)
	return source.Record{
		ID:       recordID(s.opts.Name, f.born, f.Dev, f.Ino, f.Gen, off, p),
		Payload:  p,
		Source:   s.opts.Name,
		Received: now,
	}
}

// recordID is a line's id: source.TimedID(born, name, device, inode,
// generation, offset, payload), born being the file's birth time.
func recordID(name string, born time.Time, dev, ino uint64, gen uint32, off int64, payload []byte) sink.RecordID {
	return source.TimedID(born, []byte(name), source.Uint64(dev), source.Uint64(ino),
		source.Uint64(uint64(gen)), source.Uint64(uint64(off)), payload)
}
