package drain

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

// DeadLetterDirName is the dead-letter lane's directory inside the WAB
// directory.
const DeadLetterDirName = "dead_letter"

// DeadLetterDir is the dead-letter lane of the WAB directory wabDir.
func DeadLetterDir(wabDir string) string { return filepath.Join(wabDir, DeadLetterDirName) }

const (
	deadLetterPrefix = "dl_"
	deadLetterSuffix = ".wab.sealed"
)

// DeadLetterName is the file name of the seq-th dead-letter file:
// dl_%08d.wab.sealed.
func DeadLetterName(seq uint64) string {
	return fmt.Sprintf("%s%08d%s", deadLetterPrefix, seq, deadLetterSuffix)
}

// ParseDeadLetterName returns the sequence number of a dead-letter file
// name, and false for any other name (temporary files included).
func ParseDeadLetterName(name string) (uint64, bool) {
	digits, ok := strings.CutPrefix(name, deadLetterPrefix)
	if !ok {
		return 0, false
	}
	digits, ok = strings.CutSuffix(digits, deadLetterSuffix)
	if !ok || len(digits) < 8 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	seq, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	return seq, true
}

// A dead-letter record's Meta is a record.Meta (record.Encode, version 2)
// with Reject set: the record's own metadata as it sat in the buffer (key,
// headers, event time, origin position, producer id and sequence), its id
// and source as delivered to the sink, and the rejection — reason code,
// stage, component, error text, attempts, first-seen time and where it sat
// in the buffer. Files written before reason codes existed hold the
// version-1 layout (record.LegacyDeadLetter); DecodeMeta reads both.

// ErrBadMeta is returned (wrapped) by DecodeMeta for bytes that are not a
// dead-letter Meta. It is record.ErrBadMeta.
var ErrBadMeta = record.ErrBadMeta

// DecodeMeta decodes a dead-letter record's Meta, of either version. A
// meta without an id or a rejection is not a dead letter's (ErrBadMeta).
// The returned Key and header values alias b.
func DecodeMeta(b []byte) (record.Meta, error) {
	m, err := record.Decode(b, record.LegacyDeadLetter)
	if err != nil {
		return record.Meta{}, err
	}
	if !m.HasID || m.Reject == nil {
		return record.Meta{}, fmt.Errorf("%w: a dead letter needs an id and a rejection", ErrBadMeta)
	}
	return m, nil
}

// deadLetterMeta encodes the Meta of a record in the dead letter: the
// record's own metadata (r.Meta, as it sat in the buffer; when there is
// none or it does not decode — which was logged at delivery — the key,
// headers, event time and origin position r.Record and r.OriginPos hold),
// the id and source it was delivered under (r.Record), and r.Reject.
//
// The result fits the buffer's meta slot (wab.MaxMetaBytes), or the dead
// letter could not be written and the record, refused again on every
// attempt, would stay in the buffer for good: a record's own metadata
// leaves record.RejectionRoom free (gates and the wire protocol see to
// it), and what the rejection needs beyond that is taken from its error
// text, which is cut to fit (ending in "…"), then, for metadata written
// by a version that left no room, from its component and stage.
func deadLetterMeta(r *lane.Rejected) []byte {
	m, err := record.Decode(r.Meta, record.LegacyOrigin)
	if r.Meta == nil || err != nil {
		m = record.Meta{Key: r.Record.Key, Headers: r.Record.Headers, OriginPos: r.OriginPos}
		if !r.Record.EventTime.IsZero() {
			m.EventTime = r.Record.EventTime.UnixNano()
		}
	}
	srec := &r.Record
	rej := r.Reject
	m.ID, m.HasID = srec.ID, true
	m.Source = srec.Source
	m.Reject = &rej
	b := record.Encode(&m)
	over := len(b) - wab.MaxMetaBytes
	if over <= 0 {
		return b
	}
	const ellipsis = "…"
	e := cutUTF8(rej.Error, record.MaxErrorBytes)
	// Cutting the text may shorten its length prefix too: a little more
	// than needed is cut, never less.
	if keep := len(e) - over - len(ellipsis); keep > 0 {
		rej.Error = cutUTF8(e, keep) + ellipsis
	} else {
		rej.Error = ""
	}
	if b = record.Encode(&m); len(b) <= wab.MaxMetaBytes {
		return b
	}
	rej.Error, rej.Component, rej.Stage, rej.Rule = "", "", "", ""
	return record.Encode(&m)
}

// deadLetterRecords are the buffer records of a dead-letter file holding
// recs: each keeps its payload, durability and receive time, and its Meta
// is deadLetterMeta's.
func deadLetterRecords(recs []lane.Rejected) []wab.Record {
	out := make([]wab.Record, len(recs))
	for i := range recs {
		r := &recs[i]
		out[i] = wab.Record{
			Durability: wab.Durability(r.Record.Durability),
			Received:   r.Record.Received.UnixNano(),
			Payload:    r.Record.Payload,
			Meta:       deadLetterMeta(r),
		}
	}
	return out
}

// cutUTF8 is s cut to at most n bytes at a UTF-8 boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// fileSize is the size of the dead-letter file holding recs, computed
// before it exists so that the cap is checked before anything is written.
func fileSize(recs []wab.Record) int64 {
	n := int64(wab.HeaderSize + wab.FooterFrameSize)
	for _, r := range recs {
		n += int64(wab.FrameOverhead + len(r.Meta) + len(r.Payload))
	}
	return n
}

// deadLetters is the drain's writer for the lane: it tracks the files'
// total size against the cap and numbers new files past the highest on
// disk.
type deadLetters struct {
	fs       vfs.FS
	dir      string
	maxBytes int64
	now      func() time.Time

	mu       sync.Mutex
	files    int
	bytes    int64
	next     uint64
	instance [16]byte // the buffer instance of the last file written
}

var _ lane.Lane = (*deadLetters)(nil)

// size is the size of the dead-letter file that would hold recs,
// computed before it exists so that the cap is checked before anything
// is written.
func (dl *deadLetters) size(recs []lane.Rejected) int64 {
	return fileSize(deadLetterRecords(recs))
}

// Reject implements lane.Lane: it writes recs as one dead-letter file,
// durably (wab.WriteSealed: the file and its directory entry are synced
// before it returns), its header naming the buffer instance of the last
// file written. It does not check the cap: the drain does, before, and
// blocks rather than drop a record (BlockedDeadLetterFull).
func (dl *deadLetters) Reject(_ context.Context, recs []lane.Rejected) error {
	dl.mu.Lock()
	instance := dl.instance
	dl.mu.Unlock()
	_, _, err := dl.reject(instance, recs)
	return err
}

// reject is Reject for records of a segment of the buffer instance:
// it returns the file's path and size.
func (dl *deadLetters) reject(instance [16]byte, recs []lane.Rejected) (string, int64, error) {
	if len(recs) == 0 {
		return "", 0, nil
	}
	return dl.write(instance, deadLetterRecords(recs))
}

// PrepareDirs creates the directories the drain keeps in the WAB directory
// wabDir (its dead-letter lane), as New does. A caller on a disk that may
// be nearly full calls it before the WAB opens: the segments' reservations
// may take every block left, and New could then not create them.
func PrepareDirs(fsys vfs.FS, wabDir string) error {
	return makeDeadLetterDir(fsys, DeadLetterDir(wabDir))
}

func makeDeadLetterDir(fsys vfs.FS, dir string) error {
	if err := fsys.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("drain: create dead-letter directory: %w", err)
	}
	return nil
}

func openDeadLetters(fsys vfs.FS, dir string, maxBytes int64, now func() time.Time) (*deadLetters, error) {
	if err := makeDeadLetterDir(fsys, dir); err != nil {
		return nil, err
	}
	dl := &deadLetters{fs: fsys, dir: dir, maxBytes: maxBytes, now: now}
	if err := dl.rescan(); err != nil {
		return nil, err
	}
	return dl, nil
}

// rescan recounts the lane from disk (an operator may have removed files)
// and moves the next file number past the highest one present.
func (dl *deadLetters) rescan() error {
	files, err := scanDeadLetters(dl.fs, dl.dir)
	if err != nil {
		return err
	}
	var bytes int64
	var next uint64
	for _, f := range files {
		bytes += f.Bytes
		next = max(next, f.Seq+1)
	}
	dl.mu.Lock()
	defer dl.mu.Unlock()
	dl.files, dl.bytes = len(files), bytes
	dl.next = max(dl.next, next)
	return nil
}

func (dl *deadLetters) totals() (int, int64) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.files, dl.bytes
}

// hasRoom reports whether need more bytes fit under the cap. An empty lane
// always has room: with nothing left for an operator to remove, refusing
// would wedge the drain for good, so a single write larger than the cap is
// let through.
func (dl *deadLetters) hasRoom(need int64) bool {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.bytes == 0 || dl.bytes+need <= dl.maxBytes
}

// write makes one dead-letter file holding recs, durably, and returns its
// path and size.
func (dl *deadLetters) write(instance [16]byte, recs []wab.Record) (string, int64, error) {
	dl.mu.Lock()
	seq := dl.next
	dl.instance = instance
	// Numbers are never reused, even after a failed write that may have
	// left a file behind.
	dl.next++
	dl.mu.Unlock()

	var uid [8]byte
	if _, err := rand.Read(uid[:]); err != nil {
		return "", 0, fmt.Errorf("segment uid: %w", err)
	}
	h := wab.Header{
		Shard:    wab.DeadLetterShard,
		Seq:      seq,
		UID:      binary.BigEndian.Uint64(uid[:]),
		Created:  dl.now().UnixNano(),
		Instance: instance,
	}
	path := filepath.Join(dl.dir, DeadLetterName(seq))
	if err := wab.WriteSealed(dl.fs, path, h, recs); err != nil {
		return "", 0, fmt.Errorf("write %s: %w", path, err)
	}
	fi, err := dl.fs.Stat(path)
	if err != nil {
		return "", 0, fmt.Errorf("stat %s: %w", path, err)
	}
	dl.mu.Lock()
	dl.files++
	dl.bytes += fi.Size()
	dl.mu.Unlock()
	return path, fi.Size(), nil
}

// DeadLetterFile describes one file of the dead-letter lane.
type DeadLetterFile struct {
	Name  string
	Path  string
	Seq   uint64
	Bytes int64
	// Records is filled in by ListDeadLetters only.
	Records uint64
}

// scanDeadLetters lists the lane's files with their sizes, by sequence
// number, without reading them. A missing directory is an empty lane.
func scanDeadLetters(fsys vfs.FS, dir string) ([]DeadLetterFile, error) {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("drain: list dead-letter directory: %w", err)
	}
	var out []DeadLetterFile
	for _, name := range names {
		seq, ok := ParseDeadLetterName(name)
		if !ok {
			continue
		}
		path := filepath.Join(dir, name)
		fi, err := fsys.Stat(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed while we looked
			}
			return nil, fmt.Errorf("drain: stat dead-letter file: %w", err)
		}
		out = append(out, DeadLetterFile{Name: name, Path: path, Seq: seq, Bytes: fi.Size()})
	}
	slices.SortFunc(out, func(a, b DeadLetterFile) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

// ListDeadLetters lists the dead-letter files of the WAB directory wabDir,
// oldest first, with their sizes and record counts. Counting reads (and
// checks) every file.
func ListDeadLetters(fsys vfs.FS, wabDir string) ([]DeadLetterFile, error) {
	files, err := scanDeadLetters(fsys, DeadLetterDir(wabDir))
	if err != nil {
		return nil, err
	}
	for i := range files {
		n, err := countRecords(fsys, files[i].Path)
		if err != nil {
			return nil, err
		}
		files[i].Records = n
	}
	return files, nil
}

func countRecords(fsys vfs.FS, path string) (uint64, error) {
	r, err := wab.OpenSegment(fsys, path)
	if err != nil {
		return 0, fmt.Errorf("drain: open dead-letter file: %w", err)
	}
	defer r.Close()
	var n uint64
	for {
		if _, err := r.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, fmt.Errorf("drain: read dead-letter file %s: %w", path, err)
		}
		n++
	}
}

// DeadLetterRecord is one record read back from the dead-letter lane.
type DeadLetterRecord struct {
	Durability wab.Durability
	Received   time.Time
	Payload    []byte
	// Meta is the record's metadata, Meta.Reject why it was rejected.
	Meta record.Meta
	// MetaErr is set, and Meta zero, when the record's Meta could not be
	// decoded; RawMeta always holds it (Meta's byte fields alias it).
	MetaErr error
	RawMeta []byte
}

// ReadDeadLetter reads a dead-letter file: its header and every record
// with its decoded Meta.
func ReadDeadLetter(fsys vfs.FS, path string) (wab.Header, []DeadLetterRecord, error) {
	r, err := wab.OpenSegment(fsys, path)
	if err != nil {
		return wab.Header{}, nil, fmt.Errorf("drain: open dead-letter file: %w", err)
	}
	defer r.Close()
	h := r.Header()
	var out []DeadLetterRecord
	for {
		rec, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return h, out, nil
			}
			return h, out, fmt.Errorf("drain: read dead-letter file %s: %w", path, err)
		}
		dr := DeadLetterRecord{
			Durability: rec.Durability,
			Received:   time.Unix(0, rec.Received),
			Payload:    cloneBytes(rec.Payload),
			RawMeta:    cloneBytes(rec.Meta),
		}
		dr.Meta, dr.MetaErr = DecodeMeta(dr.RawMeta)
		out = append(out, dr)
	}
}

// RemoveDeadLetter deletes the named dead-letter file (a base name as
// listed by ListDeadLetters) from wabDir's lane, durably. A running drain
// notices the freed space at its next rescan.
func RemoveDeadLetter(fsys vfs.FS, wabDir, name string) error {
	if _, ok := ParseDeadLetterName(name); !ok || filepath.Base(name) != name {
		return fmt.Errorf("drain: %q is not a dead-letter file name", name)
	}
	dir := DeadLetterDir(wabDir)
	if err := fsys.Remove(filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("drain: remove dead-letter file: %w", err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("drain: sync dead-letter directory: %w", err)
	}
	return nil
}

// Rejected is the lane record r holds: what the tools show, filter and
// replay. A record whose metadata did not decode has no id (the zero id)
// and a rejection that says so; one without a first-seen time of its own
// (a version-1 record) takes created, its file's creation time (the
// header's, Unix nanoseconds).
func (r *DeadLetterRecord) Rejected(created int64) lane.Rejected {
	out := lane.Rejected{
		Record: sink.Record{Payload: r.Payload, Durability: sink.Durability(r.Durability), Received: r.Received},
		Meta:   r.RawMeta,
	}
	if r.MetaErr != nil {
		out.Reject = record.Rejection{Error: fmt.Sprintf("undecodable metadata: %v", r.MetaErr), FirstSeen: created}
		out.IDUnknown = true
		return out
	}
	m := &r.Meta
	out.IDUnknown = !m.HasID
	out.Sink, out.OriginPos = m.Reject.Component, m.OriginPos
	out.Record.ID, out.Record.Source, out.Record.Key, out.Record.Headers = m.ID, m.Source, m.Key, m.Headers
	if m.EventTime != 0 {
		out.Record.EventTime = time.Unix(0, m.EventTime)
	}
	out.Reject = *m.Reject
	if out.Reject.FirstSeen == 0 {
		out.Reject.FirstSeen = created
	}
	return out
}
