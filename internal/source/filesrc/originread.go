package filesrc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// readCache is the entry ReadFrom read last, so that a reader paging
// through an entry with a small max cuts its lines once.
type readCache struct {
	valid bool
	first uint64
	recs  []sink.Record
}

// ReadFrom implements sink.RawReader: up to max records, holding up to
// maxBytes, from position from on, below End as of the call. It re-reads the lines from the origin
// files: each entry's byte range is cut into lines as the source cut it,
// and the records get the ids, payloads and source name the source gave
// them (Received is the time the source read the batch). Before returning
// an entry's records it checks that they are the ones the source read
// (same count, same ids); positions whose file is gone, shorter than what
// was read or rewritten return a *GoneError (wrapping
// sink.ErrPositionGone) — or, if records before them were read in this
// call, those records, and the error on the next call. An entry is cut
// whole (its records are checked together, and kept for the next read),
// so the byte bound limits what is returned, not what one entry — one
// batch the source read — costs while it is cut.
func (o *OriginRaw) ReadFrom(ctx context.Context, from uint64, max int, maxBytes int64) ([]sink.Positioned, error) {
	o.mu.Lock()
	es := o.entries // appends never change what is below len(es)
	o.mu.Unlock()
	if max <= 0 || len(es) == 0 || from >= es[len(es)-1].next() {
		return nil, nil
	}
	o.rmu.Lock()
	defer o.rmu.Unlock()
	var out []sink.Positioned
	lim := sink.NewReadLimit(max, maxBytes)
	for i := sort.Search(len(es), func(i int) bool { return es[i].next() > from }); i < len(es) && !lim.Done(); i++ {
		e := &es[i]
		recs, err := o.entryRecords(ctx, es, i)
		if err != nil {
			if len(out) > 0 && errors.Is(err, sink.ErrPositionGone) {
				return out, nil
			}
			return nil, err
		}
		for k := range recs {
			p := sink.Positioned{Pos: e.first + uint64(k), Record: recs[k]}
			if p.Pos < from {
				continue
			}
			if !lim.Take(&p) {
				break
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// entryRecords are the records of es[i], read from its file.
func (o *OriginRaw) entryRecords(ctx context.Context, es []entry, i int) ([]sink.Record, error) {
	e := &es[i]
	if o.cache.valid && o.cache.first == e.first {
		return o.cache.recs, nil
	}
	f, err := o.openOrigin(e)
	if err != nil {
		return nil, err
	}
	if f == nil {
		// No file has the inode any more: the entries after this one that
		// come from it are gone too.
		return nil, o.gone(es, i, func(x *entry) bool { return x.inode() == e.inode() }, "the file is gone (rotated away and deleted?)")
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("filesrc: origin raw: stat %s: %w", f.Name(), err)
	}
	if fi.Size() < e.end {
		return nil, o.gone(es, i, func(x *entry) bool { return x.inode() == e.inode() && x.gen == e.gen },
			fmt.Sprintf("the file has %d bytes, fewer than the %d read (truncated)", fi.Size(), e.end))
	}
	recs, err := o.cut(ctx, f, e)
	if err != nil {
		return nil, err
	}
	if recs == nil {
		return nil, o.gone(es, i, func(x *entry) bool { return x == e }, "the file no longer holds the lines read (rewritten)")
	}
	o.cache = readCache{valid: true, first: e.first, recs: recs}
	return recs, nil
}

// cut re-reads e's byte range from f and cuts it into records as the
// source did (nextLine, with the entry's MaxLineBytes; the range's end is
// where the source stopped, so an unterminated rest there is the last line
// of a finished file or a cut piece). It returns nil if the records are
// not the ones the source read.
func (o *OriginRaw) cut(ctx context.Context, f vfs.File, e *entry) ([]sink.Record, error) {
	maxLine := int(e.maxLine)
	br := bufio.NewReaderSize(io.NewSectionReader(f, e.start, e.end-e.start), max(maxLine+1, 64<<10))
	recs := make([]sink.Record, 0, e.count)
	received := time.Unix(0, e.time)
	born := f.Birth()
	h := sha256.New()
	for off := e.start; off < e.end; {
		if len(recs)%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		want := int(min(int64(maxLine+1), e.end-off))
		buf, err := br.Peek(want)
		if len(buf) < want {
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("filesrc: origin raw: read %s: %w", f.Name(), err)
			}
			return nil, nil // shrank under us
		}
		line, k, _ := nextLine(buf, maxLine, off+int64(len(buf)) == e.end)
		if k == 0 || len(recs) == int(e.count) {
			return nil, nil
		}
		p := bytes.Clone(line)
		id := recordID(o.name, born, e.dev, e.ino, e.gen, off, p)
		h.Write(id[:])
		recs = append(recs, sink.Record{ID: id, Payload: p, Durability: sink.Durable, Received: received, Source: o.name})
		if _, err := br.Discard(k); err != nil {
			return nil, fmt.Errorf("filesrc: origin raw: read %s: %w", f.Name(), err)
		}
		off += int64(k)
	}
	if len(recs) != int(e.count) || !bytes.Equal(h.Sum(nil)[:8], e.digest[:]) {
		return nil, nil
	}
	return recs, nil
}

// gone is the GoneError of es[i] and the entries right after it for which
// same holds.
func (o *OriginRaw) gone(es []entry, i int, same func(*entry) bool, reason string) error {
	e := &es[i]
	j := i + 1
	for j < len(es) && same(&es[j]) {
		j++
	}
	return &GoneError{First: e.first, End: es[j-1].next(), File: e.key(), Path: e.path, Reason: reason}
}

// openOrigin opens the file of e by its identity: under the path it had
// when read, where it was last found, or under any name in the glob's
// directory (rotated). It returns nil, nil when no file there has its
// inode; errors other than a missing file are returned, never taken for
// a gone file.
func (o *OriginRaw) openOrigin(e *entry) (vfs.File, error) {
	id := e.inode()
	try := func(p string) (vfs.File, error) {
		f, err := o.fs.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("filesrc: origin raw: open %s: %w", p, err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("filesrc: origin raw: stat %s: %w", p, err)
		}
		if dev, ino, ok := statIdentity(fi); ok && fi.Mode().IsRegular() && (inode{dev, ino}) == id {
			return f, nil
		}
		f.Close()
		return nil, nil
	}
	for _, p := range []string{e.path, o.where[id]} {
		if p == "" {
			continue
		}
		if f, err := try(p); f != nil || err != nil {
			return f, err
		}
	}
	dir := o.globDir
	if dir == "" {
		dir = filepath.Dir(e.path)
	}
	names, err := o.fs.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("filesrc: origin raw: list %s: %w", dir, err)
	}
	var unsure error // a name that could not be looked at might be it
	for _, n := range names {
		p := filepath.Join(dir, n)
		fi, err := o.fs.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			unsure = err
			continue
		}
		if dev, ino, ok := statIdentity(fi); !ok || (inode{dev, ino}) != id {
			continue
		}
		if f, err := try(p); f != nil || err != nil {
			if f != nil {
				o.where[id] = p
			}
			return f, err
		}
	}
	if unsure != nil {
		return nil, fmt.Errorf("filesrc: origin raw: looking for file %s in %s: %w", e.key(), dir, unsure)
	}
	return nil, nil
}

// statIdentity is a file's device and inode.
func statIdentity(fi os.FileInfo) (dev, ino uint64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return uint64(st.Dev), uint64(st.Ino), true
}
