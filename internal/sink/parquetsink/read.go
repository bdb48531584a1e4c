package parquetsink

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"iter"
	"path/filepath"
	"sort"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// Position is a place in the sink's output: a row of a file. Files are named
// by their base (weir-<nanos>-<seq>-<writer>, or raw-<first position> in raw
// mode; no suffix), which stays the same while a stage becomes a Parquet
// file, and rows count from 0 in the order they were committed, so a
// position stays valid across the change. The zero Position is before
// everything. (In raw mode the sink's own uint64 positions are the file's
// first position plus the row.)
type Position struct {
	File string
	Row  int64
}

// Before reports whether p comes before q.
func (p Position) Before(q Position) bool {
	if p.File != q.File {
		return p.File < q.File
	}
	return p.Row < q.Row
}

func (p Position) String() string { return fmt.Sprintf("%s#%d", p.File, p.Row) }

// Record is one record read back, with where it is.
type Record struct {
	Pos        Position
	ID         sink.RecordID
	Payload    []byte
	Source     string
	Durability sink.Durability
	Received   time.Time
	Committed  time.Time
	Key        []byte // nil when the record has none
	Headers    []sink.Header
	EventTime  time.Time // zero when the record has none
}

// sinkRecord is the record a sink was given.
func (r *Record) sinkRecord() sink.Record {
	return sink.Record{
		ID: r.ID, Payload: r.Payload, Durability: r.Durability, Received: r.Received, Source: r.Source,
		Key: r.Key, Headers: r.Headers, EventTime: r.EventTime,
	}
}

// ReadDir returns every committed record in dir, in position order:
// finished Parquet files and the stages not yet written as Parquet (up to
// their last complete frame), raw-mode files included (they sort first).
// Duplicates are returned as stored; deduplicate on ID.
func ReadDir(fs vfs.FS, dir string) ([]Record, error) {
	var out []Record
	for r, err := range Records(fs, dir, Position{}) {
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Records yields the records at or after from, in position order, like
// ReadDir. It stops at the first error, which it yields.
func Records(fs vfs.FS, dir string, from Position) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		names, err := fs.ReadDir(dir)
		if err != nil {
			yield(Record{}, fmt.Errorf("parquetsink: read %s: %w", dir, err))
			return
		}
		kinds := map[string]string{} // base -> suffix to read
		for _, name := range names {
			base, suffix, ok := parseAnyName(name)
			if !ok || base < from.File {
				continue
			}
			switch suffix {
			case SuffixParquet:
				kinds[base] = SuffixParquet
			case SuffixStage:
				if kinds[base] == "" {
					kinds[base] = SuffixStage
				}
			}
		}
		bases := make([]string, 0, len(kinds))
		for b := range kinds {
			bases = append(bases, b)
		}
		sort.Strings(bases)
		for _, base := range bases {
			start := int64(0)
			if base == from.File {
				start = from.Row
			}
			var more bool
			if kinds[base] == SuffixStage {
				var gone bool
				more, gone, err = readStage(fs, dir, base, start, yield)
				if err == nil && gone {
					// Written as Parquet since the listing.
					more, err = readParquet(fs, dir, base, start, yield)
				}
			} else {
				more, err = readParquet(fs, dir, base, start, yield)
			}
			if err != nil {
				yield(Record{}, err)
				return
			}
			if !more {
				return
			}
		}
	}
}

func toRecord(base string, i int64, rw *row) (Record, error) {
	r := Record{
		Pos:       Position{File: base, Row: i},
		ID:        sink.RecordID(rw.ID),
		Payload:   rw.Payload,
		Source:    rw.Source,
		Received:  time.Unix(0, rw.ReceivedAt).UTC(),
		Committed: time.Unix(0, rw.CommittedAt).UTC(),
	}
	if rw.Key != nil {
		r.Key = *rw.Key
		if r.Key == nil {
			r.Key = []byte{}
		}
	}
	if len(rw.Headers) > 0 {
		r.Headers = make([]sink.Header, len(rw.Headers))
		for k, h := range rw.Headers {
			r.Headers[k] = sink.Header{Key: h.Key, Value: h.Value}
		}
	}
	if rw.EventTime != 0 {
		r.EventTime = time.Unix(0, rw.EventTime).UTC()
	}
	switch rw.Durability {
	case "durable":
		r.Durability = sink.Durable
	case "buffered":
		r.Durability = sink.Buffered
	default:
		return r, fmt.Errorf("parquetsink: %s row %d: unknown durability %q", base, i, rw.Durability)
	}
	return r, nil
}

// readStage yields the rows of a stage from row start. gone reports that the
// stage no longer exists.
func readStage(fs vfs.FS, dir, base string, start int64, yield func(Record, error) bool) (more, gone bool, err error) {
	path := filepath.Join(dir, base+SuffixStage)
	f, err := fs.Open(path)
	if errors.Is(err, iofs.ErrNotExist) {
		return true, true, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("parquetsink: read %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, false, fmt.Errorf("parquetsink: read %s: %w", path, err)
	}
	errStop := errors.New("stop")
	var i int64
	_, err = scanStage(f, base+SuffixStage, fi.Size(), false, func(fr frame, _ int64) error {
		if i+int64(len(fr.rows)) <= start {
			i += int64(len(fr.rows))
			return nil
		}
		for k := range fr.rows {
			if i >= start {
				r, err := toRecord(base, i, &fr.rows[k])
				if err != nil {
					return err
				}
				if !yield(r, nil) {
					return errStop
				}
			}
			i++
		}
		return nil
	})
	if errors.Is(err, errStop) {
		return false, false, nil
	}
	return err == nil, false, err
}

// readParquet yields the rows of a Parquet file from row start.
func readParquet(fs vfs.FS, dir, base string, start int64, yield func(Record, error) bool) (more bool, err error) {
	path := filepath.Join(dir, base+SuffixParquet)
	f, rd, err := openParquet(fs, path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	defer rd.Close()
	n := rd.NumRows()
	if start >= n {
		return true, nil
	}
	if start > 0 {
		if err := rd.SeekToRow(start); err != nil {
			return false, fmt.Errorf("parquetsink: read %s: seek to row %d: %w", path, start, err)
		}
	}
	buf := make([]row, 256)
	i := start
	for i < n {
		k, rerr := rd.Read(buf)
		for j := range k {
			buf[j].detach()
			r, err := toRecord(base, i, &buf[j])
			if err != nil {
				return false, err
			}
			buf[j] = row{}
			if !yield(r, nil) {
				return false, nil
			}
			i++
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return false, fmt.Errorf("parquetsink: read %s at row %d: %w", path, i, rerr)
		}
	}
	if i != n {
		return false, fmt.Errorf("parquetsink: read %s: %d of %d rows", path, i, n)
	}
	return true, nil
}

// newReader opens a typed reader, turning the library's panic on a schema
// that does not fit into an error.
func newReader(pf *parquet.File) (rd *parquet.GenericReader[row], err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("schema: %v", p)
		}
	}()
	return parquet.NewGenericReader[row](pf), nil
}
