package arrowipcsrc

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/source"
)

// file is one file of the directory. The exported fields are the cursor:
// the durable position, which only commit moves.
type file struct {
	Path  string `json:"path"` // last seen under this name (informational)
	Dev   uint64 `json:"dev"`
	Ino   uint64 `json:"ino"`
	Gen   uint32 `json:"gen"`
	Off   int64  `json:"off"`   // the first message not wholly durable
	Batch int64  `json:"batch"` // the index of the next record batch (at or after Off)
	Row   int64  `json:"row"`   // rows of that batch already durable
	Done  bool   `json:"done"`  // read to its end
	FPLen int    `json:"fpl"`   // the fingerprint covers the first FPLen bytes
	FP    uint64 `json:"fp"`    // FNV-1a of them
	// DoneSize and DoneMTime are the size and modification time (ns) of
	// a done file when it was done: a change makes it looked at again.
	DoneSize  int64 `json:"dsize,omitempty"`
	DoneMTime int64 `json:"dmtime,omitempty"`

	fd   *os.File
	born time.Time
	size int64
	seen bool
	rd   *reader // positioned at pos (or past messages that yield nothing)
	pos  pos     // how far reading has got: ahead of the cursor until commit
	held *held   // the record batch being handed out

	dec       *arrowrec.Decoder // the mapping of the file's schema
	decSchema *arrow.Schema
}

// pos is a position in a file: a message offset, the next record batch's
// index, the rows of it taken.
type pos struct {
	off, batch, row int64
	done            bool
}

// held is a decoded record batch's records, handed out across gate writes.
type held struct {
	recs          []source.Record
	off, end, idx int64
}

// move is a file's new position once a gate write is durable, and what it
// read to get there (for the metrics).
type move struct {
	f                                     *file
	to                                    pos
	batches, rows, bytes, undecodable, fs int64
}

func (f *file) key() string { return FileKey(f.Dev, f.Ino, f.Gen) }

func (f *file) close() {
	if f.fd != nil {
		f.fd.Close()
		f.fd = nil
	}
	f.rd, f.held, f.dec, f.decSchema = nil, nil, nil, nil
}

func (s *Source) find(dev, ino uint64) *file {
	for _, f := range s.files {
		if f.Dev == dev && f.Ino == ino {
			return f
		}
	}
	return nil
}

func (s *Source) limits() limits {
	return limits{maxMeta: DefaultMaxMetadataBytes, maxBody: s.opts.MaxMessageBytes, maxRows: s.opts.MaxBatchRows}
}

// scan looks at the files the glob matches, in name order: it starts
// tracking new ones, opens and positions those it tracks, notices a file
// replaced in place, and forgets tracked files that are gone.
func (s *Source) scan() error {
	for _, f := range s.files {
		f.seen = false
	}
	paths, _ := filepath.Glob(s.opts.Glob) // the pattern was checked in New
	for _, p := range paths {
		if err := s.track(p); err != nil {
			return err
		}
	}
	for _, f := range slices.Clone(s.files) {
		if f.seen {
			continue
		}
		if f.Done {
			s.log.Info("arrow file gone; forgetting it", "path", f.Path, "file", f.key())
		} else {
			s.log.Warn("arrow file gone before it was read to its end; forgetting it", "path", f.Path, "file", f.key(), "batch", f.Batch)
		}
		f.close()
		s.files = slices.DeleteFunc(s.files, func(g *file) bool { return g == f })
	}
	slices.SortStableFunc(s.files, func(a, b *file) int { return strings.Compare(a.Path, b.Path) })
	return nil
}

// track looks at the file at path.
func (s *Source) track(path string) error {
	fd, err := os.Open(path)
	if err != nil {
		return nil // gone since the glob, or unreadable: looked at again next time
	}
	fi, err := fd.Stat()
	st, ok := sysStat(fi)
	if err != nil || !fi.Mode().IsRegular() || !ok {
		fd.Close()
		return nil
	}
	f := s.find(uint64(st.Dev), uint64(st.Ino))
	if f == nil {
		f = &file{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}
		s.files = append(s.files, f)
		s.log.Info("reading arrow file", "path", path, "file", f.key())
	}
	f.seen, f.Path, f.size = true, path, fi.Size()
	why := ""
	if f.Done && (fi.Size() != f.DoneSize || fi.ModTime().UnixNano() != f.DoneMTime) {
		// A done file that changed: the same file written on after its
		// end, or a new file on a reused inode (a file deleted, another
		// created) — told apart by the fingerprint.
		if h, ok := hashPrefix(fd, f.FPLen); f.FPLen == 0 || !ok || h != f.FP {
			why = "replaced (its inode now holds another file)"
		} else {
			f.DoneSize, f.DoneMTime = fi.Size(), fi.ModTime().UnixNano()
			s.log.Warn("arrow file changed after it was read to its end; what follows its end is not read", "path", path, "file", f.key())
		}
	}
	if f.fd == nil && !f.Done {
		f.fd, f.born = fd, vfs.Birth(fd)
	} else {
		fd.Close()
	}
	if why == "" {
		why = s.replaced(f)
	}
	if why != "" {
		s.log.Warn("arrow file "+why+"; reading it again from the start", "path", f.Path, "file", f.key(), "offset", f.Off, "size", f.size)
		f.close()
		f.Gen++
		f.Off, f.Batch, f.Row, f.Done, f.FPLen, f.FP, f.DoneSize, f.DoneMTime = 0, 0, 0, false, 0, 0, 0, 0
		return s.track(path)
	}
	if f.Done || f.rd != nil {
		return nil
	}
	rd := newReader(f.fd, s.limits())
	if f.Off > 0 {
		ok, err := rd.skipTo(f.Off, f.size)
		if err != nil {
			return fmt.Errorf("arrowipcsrc: %s: %s: %w", s.opts.Name, f.Path, err)
		}
		if !ok || rd.batch != f.Batch {
			f.Off, f.Batch = -1, -1 // replaced: the next look resets it
			return s.track(path)
		}
	}
	f.rd, f.pos = rd, pos{off: f.Off, batch: f.Batch, row: f.Row}
	return nil
}

// replaced says why f's content is no longer what its cursor read: "" if
// it still is.
func (s *Source) replaced(f *file) string {
	switch {
	case f.Off < 0:
		return "changed: its saved position is not a message of it"
	case f.size < f.Off:
		return "truncated"
	case f.Done || f.FPLen == 0 || f.fd == nil:
		return ""
	}
	if h, ok := hashPrefix(f.fd, f.FPLen); !ok || h != f.FP {
		return "content replaced"
	}
	return ""
}

// fingerprint extends f's fingerprint over what is durable, up to
// fingerprintBytes.
func (s *Source) fingerprint(f *file) {
	want := int(min(fingerprintBytes, f.Off))
	if want <= f.FPLen || f.fd == nil {
		return
	}
	if h, ok := hashPrefix(f.fd, want); ok {
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

func sysStat(fi os.FileInfo) (*syscall.Stat_t, bool) {
	if fi == nil {
		return nil, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return st, ok
}

// collect reads the files in name order, each up to its last complete
// message, within the batch limits. Nothing durable changes until commit.
func (s *Source) collect() ([]source.Record, []move, error) {
	var recs []source.Record
	var moves []move
	bytes := 0
	full := func() bool { return len(recs) >= s.opts.MaxBatchRecords || bytes >= s.opts.MaxBatchBytes }
	for _, f := range s.files {
		if f.Done || f.rd == nil || full() {
			continue
		}
		m := move{f: f}
		moved := false
	read:
		for !full() {
			if h := f.held; h != nil {
				n := int64(0)
				for f.pos.row < int64(len(h.recs)) && !full() {
					r := h.recs[f.pos.row]
					recs, bytes = append(recs, r), bytes+len(r.Payload)
					f.pos.row++
					n++
				}
				m.rows += n
				moved = true
				if f.pos.row == int64(len(h.recs)) {
					f.pos = pos{off: h.end, batch: h.idx + 1}
					m.batches++
					m.bytes += h.end - h.off
					f.held = nil
				}
				continue
			}
			ev, err := f.rd.next(f.size)
			if err != nil {
				return nil, nil, fmt.Errorf("arrowipcsrc: %s: %s: %w", s.opts.Name, f.Path, err)
			}
			switch ev.kind {
			case evIncomplete:
				break read
			case evDone:
				f.pos = pos{off: f.rd.off, batch: f.rd.batch, done: true}
				m.fs++
				moved = true
				break read
			case evUndecodable:
				recs = append(recs, s.undecodable(f, ev))
				bytes += len(ev.raw)
				f.pos = pos{off: ev.end, batch: f.rd.batch}
				m.undecodable++
				m.bytes += ev.end - ev.off
				moved = true
				s.log.Error("undecodable arrow data quarantined (code decode); reading on", "path", f.Path, "file", f.key(),
					"offset", ev.off, "bytes", ev.end-ev.off, "batch", ev.batch, "reason", ev.why)
			case evBatch:
				rows, err := s.rows(f, ev)
				if err != nil {
					ev.kind, ev.why = evUndecodable, err.Error()
					ev.raw = f.rd.undecodable(frame{end: ev.end}, ev.off, ev.batch, "").raw
					recs = append(recs, s.undecodable(f, ev))
					bytes += len(ev.raw)
					f.pos = pos{off: ev.end, batch: f.rd.batch}
					m.undecodable++
					moved = true
					continue
				}
				skip := int64(0)
				if ev.off == f.pos.off && ev.batch == f.pos.batch {
					skip = min(f.pos.row, int64(len(rows))) // resuming inside this batch
				}
				f.held = &held{recs: rows, off: ev.off, end: ev.end, idx: ev.batch}
				f.pos = pos{off: ev.off, batch: ev.batch, row: skip}
			}
		}
		if moved {
			m.to = f.pos
			moves = append(moves, m)
		}
	}
	return recs, moves, nil
}

// undecodable is the record of bytes that could not be decoded: the gate
// quarantines it with code decode.
func (s *Source) undecodable(f *file, ev event) source.Record {
	return source.Record{
		ID:          source.ID([]byte(s.opts.Name), []byte(f.key()), source.Uint64(uint64(ev.off)), []byte("undecodable")),
		Payload:     ev.raw,
		Source:      s.opts.Name,
		OriginPos:   fmt.Sprintf("%s@%d", filepath.Base(f.Path), ev.off),
		Undecodable: fmt.Sprintf("arrow_ipc: %s at offset %d (record batch %d): %s", filepath.Base(f.Path), ev.off, ev.batch, ev.why),
	}
}
