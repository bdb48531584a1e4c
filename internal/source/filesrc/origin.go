package filesrc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

// OriginOptions configure OpenOriginRaw.
type OriginOptions struct {
	// FS holds the index, and origin files are opened through it for
	// re-reading (nil: vfs.OS).
	FS vfs.FS
	// Dir is where the index lives; it holds nothing else of the source's.
	Dir string
	// Source is the Options the Source is created with (the same Name,
	// Glob, MaxLineBytes and FingerprintBytes).
	Source Options
	// Logger defaults to Source.Logger.
	Logger *slog.Logger
}

// Extent is the part of one origin file a batch read: Count records cut
// from bytes [Start, End) of the file generation (Dev, Ino, Gen).
type Extent struct {
	Dev, Ino   uint64
	Gen        uint32
	Path       string // the file's name when it was read
	Start, End int64
	Count      int
	// Final: the batch finished the file (a rotated file, dropped after
	// it; its last line may be unterminated).
	Final bool
	// File is the source's open descriptor of the file, which Append
	// fdatasyncs. If nil, Append opens Path and checks its identity.
	File *os.File
}

// GoneError reports that positions [First, End), cut from the file
// generation File (see FileKey) last seen at Path, can no longer be read:
// the file was deleted, truncated below what was read or rewritten. It
// wraps sink.ErrPositionGone: this is how an origin raw's retention
// shows — positions last as long as the origin files keep their lines.
type GoneError struct {
	First, End uint64
	File, Path string
	Reason     string
}

func (e *GoneError) Error() string {
	return fmt.Sprintf("filesrc: origin raw: positions [%d, %d) from %s (file %s): %s: %v",
		e.First, e.End, e.Path, e.File, e.Reason, sink.ErrPositionGone)
}

func (e *GoneError) Unwrap() error { return sink.ErrPositionGone }

// GonePositions implements sink.PositionsGone.
func (e *GoneError) GonePositions() (from, to uint64) { return e.First, e.End }

var _ sink.PositionsGone = (*GoneError)(nil)

// OriginRaw is the raw system of record of a file source that is its own
// raw (see the package doc, "Its own raw"): positions address lines in the
// origin files, and a durable index in Dir maps positions to byte ranges
// of file generations. It implements sink.RawReader.
//
// Append is called by the source only; ReadFrom and End may be called
// concurrently with it.
type OriginRaw struct {
	fs      vfs.FS
	dir     string
	path    string // the index file
	name    string
	glob    string
	globDir string
	maxLine int
	fpBytes int
	log     *slog.Logger

	wmu    sync.Mutex // Append, Close
	w      vfs.File   // the index, open for appending; nil once closed
	lock   io.Closer
	broken error // a failed write, fdatasync or directory fsync: sticky
	// synced is, for each file whose directory entry is known durable,
	// the descriptor it was read through when its directory was fsynced.
	// An inode is reused only once every descriptor of the file that had
	// it is closed, so a new file on a reused inode comes with another
	// descriptor, and its directory is fsynced again. (A file seen again
	// through a new descriptor — after a restart of the source — costs one
	// more directory fsync.)
	synced map[inode]*os.File

	mu      sync.Mutex // the acknowledged index
	entries []entry

	rmu   sync.Mutex // ReadFrom
	cache readCache
	where map[inode]string // where a file was last found under another name
}

var _ sink.RawReader = (*OriginRaw)(nil)

// OpenOriginRaw opens (or starts) the index in opts.Dir, taking an
// advisory lock on the directory. A torn last entry — an Append the
// process did not finish — is cut off; anything else wrong with the index
// is ErrCorruptIndex, naming the file and the offset.
func OpenOriginRaw(ctx context.Context, opts OriginOptions) (*OriginRaw, error) {
	src, err := withDefaults(opts.Source)
	if err != nil {
		return nil, err
	}
	if opts.Dir == "" {
		return nil, errors.New("filesrc: origin raw: Dir is required")
	}
	if opts.FS == nil {
		opts.FS = vfs.OS
	}
	if opts.Logger == nil {
		opts.Logger = src.Logger
	}
	o := &OriginRaw{
		fs: opts.FS, dir: opts.Dir, path: filepath.Join(opts.Dir, originIndexName),
		name: src.Name, glob: src.Glob, globDir: globDir(src.Glob),
		maxLine: src.MaxLineBytes, fpBytes: src.FingerprintBytes,
		log:    opts.Logger.With("component", "origin-raw", "source", src.Name),
		synced: map[inode]*os.File{}, where: map[inode]string{},
	}
	if err := o.fs.MkdirAll(o.dir, 0o700); err != nil {
		return nil, fmt.Errorf("filesrc: origin raw: create %s: %w", o.dir, err)
	}
	if o.lock, err = o.fs.Lock(filepath.Join(o.dir, originLockName)); err != nil {
		return nil, fmt.Errorf("filesrc: origin raw: %w", err)
	}
	if err := o.open(ctx); err != nil {
		o.lock.Close()
		return nil, err
	}
	return o, nil
}

// open reads the index (creating it first if needed) and opens it for
// appending.
func (o *OriginRaw) open(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tmp := o.path + originTmpSuffix
	if err := o.fs.Remove(tmp); err == nil {
		if err := o.fs.SyncDir(o.dir); err != nil {
			return fmt.Errorf("filesrc: origin raw: %w", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("filesrc: origin raw: remove %s: %w", tmp, err)
	}
	data, err := o.readIndex()
	if errors.Is(err, fs.ErrNotExist) {
		if err := o.create(); err != nil {
			return err
		}
		data, err = o.readIndex()
	}
	if err != nil {
		return err
	}
	name, off, err := decodeHeader(data)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorruptIndex, o.path, err)
	}
	if name != o.name {
		return fmt.Errorf("filesrc: origin raw: %s is the index of source %q, not %q", o.path, name, o.name)
	}
	es, good, err := decodeIndex(o.path, data, off)
	if err != nil {
		return err
	}
	if o.w, err = o.fs.OpenReadWrite(o.path); err != nil {
		return fmt.Errorf("filesrc: origin raw: open %s: %w", o.path, err)
	}
	if good < len(data) {
		o.log.Warn("origin index: cutting a torn last entry", "index", o.path, "offset", good, "bytes", len(data)-good)
		if err := o.w.Truncate(int64(good)); err != nil {
			o.w.Close()
			return fmt.Errorf("filesrc: origin raw: cut torn tail of %s: %w", o.path, err)
		}
		if err := o.w.Sync(); err != nil {
			o.w.Close()
			return fmt.Errorf("filesrc: origin raw: fdatasync %s: %w", o.path, err)
		}
	}
	if _, err := o.w.Seek(int64(good), io.SeekStart); err != nil {
		o.w.Close()
		return fmt.Errorf("filesrc: origin raw: seek %s: %w", o.path, err)
	}
	o.publish(es)
	end, _ := o.End(ctx)
	o.log.Info("origin index open", "index", o.path, "entries", len(es), "end", end)
	return nil
}

func (o *OriginRaw) readIndex() ([]byte, error) {
	f, err := o.fs.Open(o.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("filesrc: origin raw: open %s: %w", o.path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("filesrc: origin raw: read %s: %w", o.path, err)
	}
	return data, nil
}

// create writes a new index holding only its header: temporary file,
// fdatasync, rename, directory fsync.
func (o *OriginRaw) create() error {
	tmp := o.path + originTmpSuffix
	w, err := o.fs.Create(tmp, 0o600)
	if err != nil {
		return fmt.Errorf("filesrc: origin raw: create %s: %w", tmp, err)
	}
	_, err = w.Write(encodeHeader(o.name))
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = o.fs.Rename(tmp, o.path)
	}
	if err == nil {
		err = o.fs.SyncDir(o.dir)
	}
	if err != nil {
		return fmt.Errorf("filesrc: origin raw: create %s: %w", o.path, err)
	}
	return nil
}

// publish makes entries acknowledged: readable, and counted in End.
func (o *OriginRaw) publish(es []entry) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.entries = append(o.entries, es...)
}

func (o *OriginRaw) endLocked() uint64 {
	if len(o.entries) == 0 {
		return 0
	}
	return o.entries[len(o.entries)-1].next()
}

// End implements sink.RawReader: one past the last position whose Append
// returned (or that an earlier process appended durably).
func (o *OriginRaw) End(context.Context) (uint64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.endLocked(), nil
}

// Replayable is true: every position below End can be read again from the
// origin files, for as long as they keep them (see GoneError).
func (o *OriginRaw) Replayable() bool { return true }

// Dir is the directory of the index.
func (o *OriginRaw) Dir() string { return o.dir }

// Close closes the index and releases the directory's lock. Reads still
// work afterwards; Append fails.
func (o *OriginRaw) Close() error {
	o.wmu.Lock()
	defer o.wmu.Unlock()
	if o.w == nil {
		return nil
	}
	err := o.w.Close()
	o.w = nil
	if lerr := o.lock.Close(); err == nil {
		err = lerr
	}
	return err
}

// Append makes one batch durable and gives it its positions: first it
// fdatasyncs every origin file the batch read from (and, the first time a
// file is seen, its directory), then it appends the batch's entries — one
// per extent, in recs' order — to the index and fdatasyncs it. It returns
// the position of recs[0]; the batch holds [first, first+len(recs)).
//
// On error nothing of the batch is acknowledged. A failed fdatasync of an
// origin file or of its directory, or a failed write or fdatasync of the
// index, stops the OriginRaw: every later Append fails at once, and
// nothing is synced again until it is reopened. The sync is never
// retried: after a failed writeback Linux may mark the file's dirty pages
// clean, and a second fdatasync would then succeed although the lines
// never reached the disk (the index's state on disk is unknown likewise).
// Reopening recovers — the index being authoritative for what survived.
// An extent whose file has been deleted (no name left, read through an
// open descriptor) is refused, not stickily: positions given to its lines
// could never be read back.
func (o *OriginRaw) Append(ctx context.Context, extents []Extent, recs []source.Record) (uint64, error) {
	o.wmu.Lock()
	defer o.wmu.Unlock()
	if o.broken != nil {
		return 0, o.broken
	}
	if o.w == nil {
		return 0, fmt.Errorf("filesrc: origin raw: %s is closed", o.path)
	}
	if len(recs) == 0 {
		return o.End(ctx)
	}
	n := 0
	for _, x := range extents {
		if x.Count <= 0 || x.Start < 0 || x.End <= x.Start || len(x.Path) > maxEntryPath {
			return 0, fmt.Errorf("filesrc: origin raw: bad extent %+v", x)
		}
		n += x.Count
	}
	if n != len(recs) {
		return 0, fmt.Errorf("filesrc: origin raw: extents count %d records, the batch has %d", n, len(recs))
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	o.mu.Lock()
	first := o.endLocked()
	o.mu.Unlock()
	es := make([]entry, len(extents))
	var buf []byte
	pos, k := first, 0
	for i, x := range extents {
		fpLen, fp, err := o.syncOrigin(x)
		if err != nil {
			return 0, err
		}
		e := &es[i]
		*e = entry{
			first: pos, count: uint32(x.Count), dev: x.Dev, ino: x.Ino, gen: x.Gen,
			start: x.Start, end: x.End, maxLine: uint32(o.maxLine), fpLen: fpLen, fp: fp,
			time: recs[k].Received.UnixNano(), digest: digestIDs(recs[k : k+x.Count]), path: x.Path,
		}
		if i == 0 {
			e.flags |= flagBatchStart
		}
		if x.Final {
			e.flags |= flagFinal
		}
		buf = appendEntry(buf, e)
		pos += uint64(x.Count)
		k += x.Count
	}
	if _, err := o.w.Write(buf); err != nil {
		return 0, o.stop(fmt.Errorf("filesrc: origin raw: write %s (index stopped): %w", o.path, err))
	}
	if err := o.w.Sync(); err != nil {
		return 0, o.stop(fmt.Errorf("filesrc: origin raw: fdatasync %s (index stopped): %w", o.path, err))
	}
	o.publish(es)
	return first, nil
}

// stop makes err sticky: every later Append returns it.
func (o *OriginRaw) stop(err error) error {
	o.broken = err
	o.log.Error("origin raw stopped; reopen to recover", "index", o.path, "err", err)
	return err
}

// deletedError is Append's refusal of an extent whose file has been
// deleted: its lines cannot be given positions, which could never be read
// back.
type deletedError struct {
	dev, ino uint64
	gen      uint32
	path     string
}

func (e *deletedError) Error() string {
	return fmt.Sprintf("filesrc: origin raw: batch not made durable: %s (file %s) has been deleted: its lines cannot be given positions",
		e.path, FileKey(e.dev, e.ino, e.gen))
}

// syncOrigin fdatasyncs the file an extent read from — the writer of a log
// file rarely syncs it, and a position must not outlive its line — and the
// file's directory the first time the file is seen (through this
// descriptor: see OriginRaw.synced), so that a crash cannot take away a
// file the index points into. It returns the file's fingerprint over what
// has been read, as the source's cursor keeps it.
// A failed fdatasync or directory fsync stops the OriginRaw (see Append).
// A file that has been deleted (no link left: the source may still read
// it through its descriptor) is refused with a *deletedError.
func (o *OriginRaw) syncOrigin(x Extent) (uint32, uint64, error) {
	var r io.ReaderAt
	var sync func() error
	var stat func() (os.FileInfo, error)
	if x.File != nil {
		r, sync, stat = x.File, func() error { return fdatasync(x.File) }, x.File.Stat
	} else {
		f, err := o.fs.Open(x.Path)
		if err != nil {
			return 0, 0, fmt.Errorf("filesrc: origin raw: batch not made durable: open %s: %w", x.Path, err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return 0, 0, fmt.Errorf("filesrc: origin raw: batch not made durable: stat %s: %w", x.Path, err)
		}
		if dev, ino, ok := statIdentity(fi); !ok || dev != x.Dev || ino != x.Ino {
			return 0, 0, fmt.Errorf("filesrc: origin raw: batch not made durable: %s is no longer file %s", x.Path, FileKey(x.Dev, x.Ino, x.Gen))
		}
		r, sync, stat = f, f.Sync, f.Stat
	}
	if err := sync(); err != nil {
		return 0, 0, o.stop(fmt.Errorf("filesrc: origin raw: fdatasync origin %s (origin raw stopped): %w", x.Path, err))
	}
	id := inode{x.Dev, x.Ino}
	if x.File == nil || o.synced[id] != x.File {
		if err := o.fs.SyncDir(filepath.Dir(x.Path)); err != nil {
			return 0, 0, o.stop(fmt.Errorf("filesrc: origin raw: origin directory of %s (origin raw stopped): %w", x.Path, err))
		}
		if x.File != nil {
			o.synced[id] = x.File
		}
	}
	// Checked after the syncs, as late as can be before the index append.
	fi, err := stat()
	if err != nil {
		return 0, 0, fmt.Errorf("filesrc: origin raw: batch not made durable: stat %s: %w", x.Path, err)
	}
	if unlinked(fi) {
		return 0, 0, &deletedError{dev: x.Dev, ino: x.Ino, gen: x.Gen, path: x.Path}
	}
	n := int(min(int64(o.fpBytes), x.End))
	fp, ok := hashPrefix(r, n)
	if !ok {
		return 0, 0, fmt.Errorf("filesrc: origin raw: batch not made durable: read %s: cannot fingerprint its first %d bytes", x.Path, n)
	}
	return uint32(n), fp, nil
}

// unlinked reports whether an open file has no name left (st_nlink 0):
// it has been deleted, and can be read only through open descriptors.
func unlinked(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink == 0
}

func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
		}
		return nil
	}
}

// extents are the parts of files a batch read, in its records' order.
func (s *Source) extents(moves []move) []Extent {
	xs := make([]Extent, 0, len(moves))
	for _, m := range moves {
		if m.n == 0 {
			continue
		}
		xs = append(xs, Extent{
			Dev: m.f.Dev, Ino: m.f.Ino, Gen: m.f.Gen, Path: m.f.Path,
			Start: m.f.Offset, End: m.next, Count: m.n, Final: m.drop, File: m.f.f,
		})
	}
	return xs
}

// durable makes a batch durable: through the gate, or, in origin mode, by
// appending it to the origin raw and offering it to OnDurable.
func (s *Source) durable(ctx context.Context, gate source.Gate, recs []source.Record, moves []move) error {
	if s.opts.Origin == nil {
		if err := gate.Write(ctx, recs); err != nil {
			return fmt.Errorf("filesrc: %s: gate: %w", s.opts.Name, err)
		}
		return nil
	}
	if s.opts.Admit != nil {
		release, err := s.opts.Admit(ctx, recs)
		if err != nil {
			return fmt.Errorf("filesrc: %s: %w", s.opts.Name, err)
		}
		defer release()
	}
	first, err := s.opts.Origin.Append(ctx, s.extents(moves), recs)
	if err != nil {
		return fmt.Errorf("filesrc: %s: %w", s.opts.Name, err)
	}
	if s.opts.OnDurable != nil {
		s.opts.OnDurable(first, recs)
	}
	return nil
}

// catchUp makes the loaded cursor catch up with the index, which is
// authoritative: lines the index holds must not be read again into new
// positions. The cursor records the index's end when it was saved (from;
// nil in a cursor saved without it — then every entry counts), and every
// entry from there on may be ahead of it: a crash between an Append and
// the cursor save that follows it, or a cursor store whose saves fail
// while the source is restarted over and over, each restart appending
// more. For each file identity in those entries, its last entry is where
// it was read to: a tracked file moves up to that generation and end; a
// file the cursor does not know is tracked from there, unless the entry
// finished it (a dropped rotated file). The fingerprints recorded with the
// entries let scan tell a reused inode from the file that was read.
//
// It returns the moves to commit, and whether the cursor must be saved
// even without any: when it claims more of the index than there is (the
// index lost entries), lest a crash after the next Append leave entries
// below the claimed end that a restart would not catch up with.
func (s *Source) catchUp(from *uint64) ([]move, bool) {
	o := s.opts.Origin
	o.mu.Lock()
	es := o.entries
	o.mu.Unlock()
	start := 0
	if from != nil {
		start = sort.Search(len(es), func(i int) bool { return es[i].next() > *from })
	}
	last := map[inode]int{}
	var ids []inode // in the order of their first entry past the cursor
	for i := start; i < len(es); i++ {
		id := es[i].inode()
		if _, ok := last[id]; !ok {
			ids = append(ids, id)
		}
		last[id] = i
	}
	var moves []move
	for _, f := range s.files {
		i, ok := last[inode{f.Dev, f.Ino}]
		if !ok {
			continue
		}
		e := &es[i]
		if e.gen < f.Gen || e.gen == f.Gen && e.end <= f.Offset {
			continue
		}
		if f.FPLen > 0 && uint32(f.FPLen) == e.fpLen && f.FP != e.fp {
			continue // another file under a reused inode
		}
		s.log.Info("cursor behind the origin index; catching up", "file", f.key(), "offset", f.Offset, "to", e.key(), "end", e.end)
		f.Gen, f.Offset, f.FPLen, f.FP = e.gen, e.end, int(e.fpLen), e.fp
		moves = append(moves, move{f: f, next: e.end})
	}
	for _, id := range ids {
		e := &es[last[id]]
		if e.flags&flagFinal != 0 || s.find(e.dev, e.ino) != nil {
			continue
		}
		s.log.Info("file in the origin index but not in the cursor; tracking it from the index", "file", e.key(), "path", e.path, "end", e.end)
		f := &file{Dev: e.dev, Ino: e.ino, Gen: e.gen, Offset: e.end, FPLen: int(e.fpLen), FP: e.fp, Path: e.path}
		s.files = append(s.files, f)
		moves = append(moves, move{f: f, next: e.end})
	}
	var end uint64
	if len(es) > 0 {
		end = es[len(es)-1].next()
	}
	return moves, len(moves) > 0 || from != nil && *from > end
}

// checkOrigin checks that an OriginRaw was opened for these options.
func checkOrigin(opts Options) error {
	o := opts.Origin
	if o.name != opts.Name || o.glob != opts.Glob || o.maxLine != opts.MaxLineBytes || o.fpBytes != opts.FingerprintBytes {
		return fmt.Errorf("filesrc: %s: the origin raw was opened with other options (source %q, glob %q, MaxLineBytes %d, FingerprintBytes %d)",
			opts.Name, o.name, o.glob, o.maxLine, o.fpBytes)
	}
	return nil
}
