package arrowipcsrc

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/source"
)

// rows maps a decoded batch to its records through arrowrec (the one
// mapping) and releases it. A schema the mapping refuses, a value it
// cannot write, or a panic of the mapping on buffers that contradict the
// batch's lengths (which the decoder does not check) makes the batch
// undecodable.
func (s *Source) rows(f *file, ev event) (recs []source.Record, err error) {
	defer ev.rec.Release()
	defer func() {
		if p := recover(); p != nil {
			recs, err = nil, fmt.Errorf("corrupt record batch: %v", p)
		}
	}()
	if f.dec == nil || !ev.rec.Schema().Equal(f.decSchema) {
		d, err := arrowrec.NewDecoder(ev.rec.Schema(), s.opts.Columns)
		if err != nil {
			return nil, fmt.Errorf("record batch %d: %w", ev.batch, err)
		}
		f.dec, f.decSchema = d, ev.rec.Schema()
	}
	rows, err := f.dec.Rows(nil, ev.rec)
	if err != nil {
		return nil, fmt.Errorf("record batch %d: %w", ev.batch, err)
	}
	if len(rows) != int(ev.rec.NumRows()) {
		return nil, fmt.Errorf("record batch %d: %d rows mapped of %d", ev.batch, len(rows), ev.rec.NumRows())
	}
	name, key, born := []byte(s.opts.Name), []byte(f.key()), source.Uint64(uint64(f.born.UnixNano()))
	base := filepath.Base(f.Path) + "#" + strconv.FormatInt(ev.batch, 10) + ":"
	recs = make([]source.Record, len(rows))
	for i, r := range rows {
		t := r.Time
		if t.IsZero() {
			t = f.born
		}
		recs[i] = source.Record{
			ID:      source.TimedID(t, name, key, born, source.Uint64(uint64(ev.batch)), source.Uint64(uint64(i))),
			Payload: r.Payload, Source: s.opts.Name, Time: r.Time, Key: r.Key, Headers: r.Headers,
			OriginPos: base + strconv.Itoa(i),
		}
	}
	return recs, nil
}
