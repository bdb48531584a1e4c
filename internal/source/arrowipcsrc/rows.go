package arrowipcsrc

import (
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/weir-io/weir/source"
)

// Batch is a decoded record batch of a file, as a RowMapper sees it.
type Batch struct {
	Rec    arrow.RecordBatch
	Source string    // the source's name
	File   string    // the file generation's key (FileKey): its identity
	Path   string    // its name, for OriginPos
	Born   time.Time // its birth time (statx btime; zero where not recorded)
	Index  int64     // the batch's index in the file
}

// RowMapper turns a record batch into its records, one per row, in row
// order, with ids derived from (file identity, batch index, row index).
type RowMapper func(b Batch) ([]source.Record, error)

// rows maps a decoded batch through Options.Rows and releases it. A panic
// of the mapping (buffers that contradict the batch's lengths, which the
// decoder does not check) makes the batch undecodable.
func (s *Source) rows(f *file, ev event) (recs []source.Record, err error) {
	defer ev.rec.Release()
	defer func() {
		if p := recover(); p != nil {
			recs, err = nil, fmt.Errorf("corrupt record batch: %v", p)
		}
	}()
	recs, err = s.opts.Rows(Batch{Rec: ev.rec, Source: s.opts.Name, File: f.key(), Path: f.Path, Born: f.born, Index: ev.batch})
	if err != nil {
		return nil, fmt.Errorf("record batch %d: %w", ev.batch, err)
	}
	if len(recs) != int(ev.rec.NumRows()) {
		return nil, fmt.Errorf("record batch %d: %d records for %d rows", ev.batch, len(recs), ev.rec.NumRows())
	}
	return recs, nil
}
