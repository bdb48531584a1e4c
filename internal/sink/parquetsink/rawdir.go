package parquetsink

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/parquet-go/parquet-go"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// rawFile is a readable raw file: a finished Parquet file or a stage.
type rawFile struct {
	first   uint64
	name    string // with its suffix
	parquet bool
}

// rawDir reads a raw-mode directory by position. It never writes. The Sink
// reads its own directory through one; a RawReader reads another
// process's.
type rawDir struct {
	fs  vfs.FS
	dir string

	mu     sync.Mutex // one read at a time: hint, pq and closed
	hint   stageHint  // where the last stage read stopped
	pq     *pqCursor  // the last Parquet file read, open at its next row
	closed bool       // keep nothing open between reads
}

// stageHint says that the frame at byte off of the stage whose first
// position is first starts at position pos.
type stageHint struct {
	valid bool
	first uint64
	pos   uint64
	off   int64
}

// pqCursor is an open Parquet file whose reader will return row next.
// Finished Parquet files never change, so it stays valid.
type pqCursor struct {
	first uint64
	f     vfs.File
	rd    *parquet.GenericReader[row]
	rows  int64
	next  int64
}

func (c *pqCursor) close() error {
	return errors.Join(c.rd.Close(), c.f.Close())
}

// files lists the readable raw files by first position. Of a stage and a
// Parquet file with one base (the moment between the rename and the
// removal of the stage), the Parquet file is complete and wins.
func (d *rawDir) files() ([]rawFile, error) {
	names, err := d.fs.ReadDir(d.dir)
	if err != nil {
		return nil, fmt.Errorf("parquetsink: list %s: %w", d.dir, err)
	}
	byFirst := map[uint64]rawFile{}
	for _, n := range names {
		first, suffix, ok := parseRawName(n)
		if !ok || suffix == SuffixTemp {
			continue
		}
		if f, seen := byFirst[first]; seen && f.parquet {
			continue
		}
		byFirst[first] = rawFile{first: first, name: n, parquet: suffix == SuffixParquet}
	}
	out := make([]rawFile, 0, len(byFirst))
	for _, f := range byFirst {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].first < out[j].first })
	return out, nil
}

// errRelist says a listing looked inconsistent (a file ending before the
// next one starts, or no file at the position read): a directory listing
// racing a rename can miss an entry, so a fresh listing decides.
var errRelist = errors.New("parquetsink: listing changed under the read")

// readAttempts bounds how often a read lists the directory again, because
// a listed stage was turned into Parquet under it or the listing showed a
// gap. The last attempt takes a gap as positions that hold nothing.
const readAttempts = 4

// read returns up to n records, holding up to maxBytes (see
// sink.RawReader), from position from on and below end. It decodes rows
// only while they may fit.
func (d *rawDir) read(ctx context.Context, from, end uint64, n int, maxBytes int64) ([]sink.Positioned, error) {
	if from >= end || n <= 0 {
		return nil, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []sink.Positioned
	var err error
	for attempt := range readAttempts {
		lim := sink.NewReadLimit(n, maxBytes)
		out, err = d.readFrom(ctx, from, end, &lim, attempt == readAttempts-1)
		if err == nil || !(errors.Is(err, iofs.ErrNotExist) || errors.Is(err, errRelist)) {
			break
		}
	}
	if d.closed {
		d.closeCursor()
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (d *rawDir) readFrom(ctx context.Context, from, end uint64, lim *sink.ReadLimit, final bool) ([]sink.Positioned, error) {
	files, err := d.files()
	if err != nil {
		return nil, err
	}
	if len(files) == 0 || from < files[0].first {
		if !final {
			return nil, errRelist
		}
		to, why := end, "no raw file is left"
		if len(files) > 0 {
			to, why = files[0].first, "below the oldest raw file "+files[0].name
		}
		return nil, fmt.Errorf("parquetsink: %s: %w", d.dir, &sink.GoneError{From: from, To: to, Why: why})
	}
	// The file holding from is the last one starting at or before it.
	i := sort.Search(len(files), func(i int) bool { return files[i].first > from }) - 1
	var out []sink.Positioned
	for ; i < len(files) && !lim.Done(); i++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("parquetsink: read %s: %w", d.dir, err)
		}
		f := files[i]
		if f.first >= end {
			break
		}
		// Rows at or past the next file's first position hold nothing
		// (this writer never leaves such rows; stay safe if one did).
		limit := end
		if i+1 < len(files) {
			limit = min(limit, files[i+1].first)
		}
		start := max(from, f.first)
		if start >= limit {
			continue
		}
		var stop uint64
		if f.parquet {
			out, stop, err = d.readParquet(ctx, f, start, limit, lim, out)
		} else {
			out, stop, err = d.readStage(ctx, f, start, limit, lim, out)
		}
		if err != nil {
			return nil, err
		}
		if !lim.Done() && stop < limit && !final {
			// The file ends before the next one starts: positions
			// [stop, limit) hold nothing, unless the listing missed a
			// file. Look again before skipping them.
			return nil, errRelist
		}
		from = limit
	}
	return out, nil
}

// positioned converts a row read back into a raw record.
func positioned(f rawFile, pos uint64, rw *row) (sink.Positioned, error) {
	r, err := toRecord(strings.TrimSuffix(f.name, filepath.Ext(f.name)), int64(pos-f.first), rw)
	if err != nil {
		return sink.Positioned{}, err
	}
	return sink.Positioned{Pos: pos, Record: r.sinkRecord()}, nil
}

// readStage appends the rows of a stage at positions [start, limit) to out
// while lim takes them, scanning complete frames from where the last read
// stopped when it can. stop is one past the last row of the last frame
// examined: below limit with lim not done, the stage ends there.
func (d *rawDir) readStage(ctx context.Context, f rawFile, start, limit uint64, lim *sink.ReadLimit, out []sink.Positioned) ([]sink.Positioned, uint64, error) {
	path := filepath.Join(d.dir, f.name)
	fh, err := d.fs.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("parquetsink: read %s: %w", path, err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("parquetsink: read %s: %w", path, err)
	}
	size := fi.Size()
	pos, off := f.first, stageHeaderLen
	if h := d.hint; h.valid && h.first == f.first && h.pos <= start && h.off <= size {
		pos, off = h.pos, h.off
	} else if ok, err := hasMagic(fh, size); err != nil || !ok {
		return out, pos, err // a stage being created: no rows yet
	}
	for k := 0; pos < limit && !lim.Done(); k++ {
		if k%64 == 63 {
			if err := ctx.Err(); err != nil {
				return nil, 0, fmt.Errorf("parquetsink: read %s: %w", path, err)
			}
		}
		fr, next, ok, err := frameAt(fh, off, size)
		if err != nil {
			return nil, 0, fmt.Errorf("parquetsink: read %s: %w", path, err)
		}
		if !ok {
			break // the end of the complete frames
		}
		taken := pos // one past the last row taken from this frame
		for j := range fr.rows {
			p := pos + uint64(j)
			if p < start || p >= limit || lim.Done() {
				continue
			}
			rec, err := positioned(f, p, &fr.rows[j])
			if err != nil {
				return nil, 0, err
			}
			if !lim.Take(&rec) {
				break
			}
			out = append(out, rec)
			taken = p + 1
		}
		end := pos + uint64(len(fr.rows))
		if lim.Done() && taken < end {
			// Stopped inside this frame: the next read starts here.
			d.hint = stageHint{true, f.first, pos, off}
		} else {
			d.hint = stageHint{true, f.first, end, next}
		}
		pos, off = end, next
	}
	return out, pos, nil
}

func hasMagic(r io.ReaderAt, size int64) (bool, error) {
	if size < stageHeaderLen {
		return false, nil
	}
	var m [stageHeaderLen]byte
	if _, err := r.ReadAt(m[:], 0); err != nil {
		return false, fmt.Errorf("parquetsink: read stage header: %w", err)
	}
	return isStageMagic(m[:]), nil
}

// readParquet appends the rows of a Parquet file at positions [start,
// limit) to out while lim takes them. It keeps the file open at the next
// row, so a sequence of reads neither reopens the file nor seeks; any
// other start seeks through the file's page index instead of decoding the
// rows before it. stop is as for readStage. Under a byte bound it decodes
// rows in runs sized by what is left of the bound, so that it decodes few
// rows it then refuses.
func (d *rawDir) readParquet(ctx context.Context, f rawFile, start, limit uint64, lim *sink.ReadLimit, out []sink.Positioned) ([]sink.Positioned, uint64, error) {
	c, err := d.cursor(f)
	if err != nil {
		return nil, 0, err
	}
	lo := int64(start - f.first)
	hi := c.rows
	if limit-f.first < uint64(hi) {
		hi = int64(limit - f.first)
	}
	if lo >= hi {
		return out, f.first + uint64(c.rows), nil
	}
	fail := func(err error) ([]sink.Positioned, uint64, error) {
		d.closeCursor() // its state is unknown
		return nil, 0, fmt.Errorf("parquetsink: read %s: %w", filepath.Join(d.dir, f.name), err)
	}
	if c.next != lo {
		if err := c.rd.SeekToRow(lo); err != nil {
			return fail(fmt.Errorf("seek to row %d: %w", lo, err))
		}
		c.next = lo
	}
	var buf []row
	var taken, held int64 // rows taken by this call, and what they hold
	for c.next < hi && !lim.Done() {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		recs, bytes := lim.Left()
		k := min(hi-c.next, int64(recs), 256)
		if bytes >= 0 {
			// Rows of the size of those taken so far that fit what is
			// left; one row while nothing tells the size.
			per := max(held/max(taken, 1), 1)
			k = min(k, max(bytes/per, 1))
			if taken == 0 {
				k = 1
			}
		}
		if int64(len(buf)) < k {
			buf = make([]row, k)
		}
		got, rerr := c.rd.Read(buf[:k])
		read := c.next // the row the reader returned first
		c.next += int64(got)
		for j := range got {
			buf[j].detach()
			rec, err := positioned(f, f.first+uint64(read)+uint64(j), &buf[j])
			buf[j] = row{}
			if err != nil {
				return fail(err)
			}
			if !lim.Take(&rec) {
				// Past the byte bound: the next read starts at this row.
				clear(buf[j:got])
				return out, f.first + uint64(read) + uint64(j), nil
			}
			out = append(out, rec)
			taken, held = taken+1, held+rec.MemSize()
		}
		switch {
		case int64(got) == k:
		case rerr == io.EOF || (rerr == nil && got == 0):
			return fail(fmt.Errorf("%d rows short of row %d of %d", hi-c.next, hi, c.rows))
		case rerr != nil && rerr != io.EOF:
			return fail(fmt.Errorf("at row %d: %w", c.next, rerr))
		}
	}
	return out, f.first + uint64(c.next), nil
}

// cursor returns the open Parquet file f, opening it (and closing the
// previous one) unless it is the one already open.
func (d *rawDir) cursor(f rawFile) (*pqCursor, error) {
	if d.pq != nil && d.pq.first == f.first {
		return d.pq, nil
	}
	d.closeCursor()
	fh, rd, err := openParquet(d.fs, filepath.Join(d.dir, f.name))
	if err != nil {
		return nil, err
	}
	d.pq = &pqCursor{first: f.first, f: fh, rd: rd, rows: rd.NumRows()}
	return d.pq, nil
}

func (d *rawDir) closeCursor() {
	if d.pq != nil {
		_ = d.pq.close()
		d.pq = nil
	}
}

// close releases the open Parquet file. Reads still work afterwards but
// keep nothing open.
func (d *rawDir) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.pq == nil {
		return nil
	}
	err := d.pq.close()
	d.pq = nil
	return err
}

// openParquet opens a Parquet file of this sink for reading rows.
func openParquet(fs vfs.FS, path string) (vfs.File, *parquet.GenericReader[row], error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("parquetsink: read %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("parquetsink: read %s: %w", path, err)
	}
	pf, err := parquet.OpenFile(f, fi.Size())
	if err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("parquetsink: read %s: %w", path, err)
	}
	rd, err := newReader(pf)
	if err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("parquetsink: read %s: %w", path, err)
	}
	return f, rd, nil
}

// parquetRows is the row count of a Parquet file, from its footer.
func parquetRows(fs vfs.FS, path string) (int64, error) {
	f, err := fs.Open(path)
	if err != nil {
		return 0, fmt.Errorf("parquetsink: read %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("parquetsink: read %s: %w", path, err)
	}
	pf, err := parquet.OpenFile(f, fi.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return 0, fmt.Errorf("parquetsink: read %s: %w", path, err)
	}
	return pf.NumRows(), nil
}
