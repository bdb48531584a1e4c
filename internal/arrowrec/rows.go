package arrowrec

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/weir-io/weir/sink"
)

// ErrUnsupported is a type the mapping refuses (the package doc's list).
var ErrUnsupported = errors.New("arrowrec: arrow type not supported")

// Columns names the columns that become a record's key, event time and
// headers. They stay in the payload as well.
type Columns struct {
	// Key is the column whose value is the record's key; "" for none.
	Key string
	// EventTime is the column whose value is the record's event time (a
	// timestamp, date32 or date64 column), and which lays its id out by
	// time; "" for none.
	EventTime string
	// Headers are columns each of which becomes a header of its name.
	Headers []string
}

// Row is one row of a batch as a record's parts.
type Row struct {
	Payload []byte
	Key     []byte        // nil: no key column, or null
	Time    time.Time     // zero: no event-time column, or null
	Headers []sink.Header // the configured columns' (a null one is left out), then the schema's
}

// Decoder turns the batches of one schema into rows. Safe for
// concurrent use.
type Decoder struct {
	schema  *arrow.Schema
	sch     Schema
	key     int // -1: none
	time    int
	headers []int
	fp      []byte // the fingerprint header's value, shared by every row
	fields  []arrow.Field
	names   [][]byte     // each column's `"name":`
	perRow  atomic.Int64 // payload bytes a row of the last batch took, to size the next's buffer
}

// NewDecoder checks schema and cols: a type the mapping refuses, a
// configured column the schema lacks, or an event-time column that is
// not a timestamp or date is an error.
func NewDecoder(schema *arrow.Schema, cols Columns) (*Decoder, error) {
	if err := CheckSchema(schema); err != nil {
		return nil, err
	}
	d := &Decoder{schema: schema, sch: NewSchema(schema), key: -1, time: -1}
	d.fp = []byte(d.sch.Fingerprint)
	d.fields = schema.Fields()
	for j, f := range d.fields {
		var sep []byte
		if j > 0 {
			sep = []byte{','}
		}
		d.names = append(d.names, append(appendString(sep, f.Name), ':'))
	}
	find := func(role, name string) (int, error) {
		idx := schema.FieldIndices(name)
		if len(idx) != 1 {
			return -1, fmt.Errorf("arrowrec: the %s column %q is not a column of the schema (or is there more than once)", role, name)
		}
		return idx[0], nil
	}
	var err error
	if cols.Key != "" {
		if d.key, err = find("key", cols.Key); err != nil {
			return nil, err
		}
	}
	if cols.EventTime != "" {
		if d.time, err = find("event-time", cols.EventTime); err != nil {
			return nil, err
		}
		switch id := schema.Field(d.time).Type.ID(); id {
		case arrow.TIMESTAMP, arrow.DATE32, arrow.DATE64:
		default:
			return nil, fmt.Errorf("arrowrec: the event-time column %q is %s, not a timestamp or date", cols.EventTime, schema.Field(d.time).Type)
		}
	}
	for _, h := range cols.Headers {
		i, err := find("header", h)
		if err != nil {
			return nil, err
		}
		d.headers = append(d.headers, i)
	}
	return d, nil
}

// Schema is the decoder's schema, with its fingerprint.
func (d *Decoder) Schema() Schema { return d.sch }

// HasTime says whether rows carry an event time of their own.
func (d *Decoder) HasTime() bool { return d.time >= 0 }

// Rows appends the rows of batch to dst. Row 0 carries the schema
// itself (HeaderSchemaIPC) besides the fingerprint every row carries.
// An error (a value the mapping cannot write, e.g. a year past 9999)
// fails the whole batch.
func (d *Decoder) Rows(dst []Row, batch arrow.RecordBatch) ([]Row, error) {
	if !batch.Schema().Equal(d.schema) {
		return dst, errors.New("arrowrec: the batch's schema is not the stream's")
	}
	n := int(batch.NumRows())
	cols := batch.Columns()
	// One buffer holds the batch's payloads; each row's is a slice of it.
	buf := make([]byte, 0, int64(n)*(d.perRow.Load()+d.perRow.Load()/8+16))
	ends := make([]int, n)
	var err error
	for i := range n {
		buf = append(buf, '{')
		for j := range d.fields {
			buf = append(buf, d.names[j]...)
			if buf, err = appendValue(buf, cols[j], i); err != nil {
				return dst, fmt.Errorf("arrowrec: row %d, column %q: %w", i, d.fields[j].Name, err)
			}
		}
		buf = append(buf, '}')
		ends[i] = len(buf)
	}
	if n > 0 {
		d.perRow.Store(int64(len(buf) / n))
	}
	dst = slices.Grow(dst, n)
	// The rows' headers share one allocation too.
	hdrs := make([]sink.Header, 0, n*(len(d.headers)+1)+1)
	start := 0
	for i := range n {
		r := Row{Payload: buf[start:ends[i]:ends[i]]}
		h0 := len(hdrs)
		start = ends[i]
		if d.key >= 0 {
			if r.Key, err = d.scalar(cols[d.key], i); err != nil {
				return dst, err
			}
		}
		if d.time >= 0 {
			r.Time = timeAt(cols[d.time], i)
		}
		for _, h := range d.headers {
			v, err := d.scalar(cols[h], i)
			if err != nil {
				return dst, err
			}
			if v != nil {
				hdrs = append(hdrs, sink.Header{Key: d.schema.Field(h).Name, Value: v})
			}
		}
		hdrs = append(hdrs, sink.Header{Key: HeaderSchema, Value: d.fp})
		if i == 0 {
			hdrs = append(hdrs, sink.Header{Key: HeaderSchemaIPC, Value: d.sch.IPC})
		}
		r.Headers = hdrs[h0:len(hdrs):len(hdrs)]
		dst = append(dst, r)
	}
	return dst, nil
}

// scalar is a key or header value: a string's or binary's bytes as they
// are (copied: the batch's buffers are not the record's), any other
// value's JSON text; nil for null.
func (d *Decoder) scalar(arr arrow.Array, i int) ([]byte, error) {
	if arr.IsNull(i) {
		return nil, nil
	}
	switch a := arr.(type) {
	case *array.String:
		return []byte(a.Value(i)), nil
	case *array.LargeString:
		return []byte(a.Value(i)), nil
	case *array.Binary:
		return bytes.Clone(a.Value(i)), nil
	case *array.LargeBinary:
		return bytes.Clone(a.Value(i)), nil
	}
	return appendValue(nil, arr, i)
}

// timeAt is an event-time column's value at i; zero when null.
func timeAt(arr arrow.Array, i int) time.Time {
	if arr.IsNull(i) {
		return time.Time{}
	}
	switch a := arr.(type) {
	case *array.Timestamp:
		return timeOf(int64(a.Value(i)), a.DataType().(*arrow.TimestampType).Unit)
	case *array.Date32:
		return time.Unix(int64(a.Value(i))*86400, 0)
	case *array.Date64:
		return time.UnixMilli(int64(a.Value(i)))
	}
	return time.Time{}
}

// CheckSchema returns an error wrapping ErrUnsupported for the first
// column whose type, or a type nested in it, the mapping refuses.
func CheckSchema(s *arrow.Schema) error {
	seen := map[string]bool{}
	for _, f := range s.Fields() {
		if seen[f.Name] {
			return fmt.Errorf("%w: two columns named %q", ErrUnsupported, f.Name)
		}
		seen[f.Name] = true
		if err := checkType(f.Type); err != nil {
			return fmt.Errorf("column %q: %w", f.Name, err)
		}
	}
	return nil
}

func checkType(dt arrow.DataType) error {
	switch dt.ID() {
	case arrow.NULL, arrow.BOOL, arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.UINT8,
		arrow.UINT16, arrow.UINT32, arrow.UINT64, arrow.FLOAT16, arrow.FLOAT32, arrow.FLOAT64,
		arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW, arrow.BINARY, arrow.LARGE_BINARY,
		arrow.BINARY_VIEW, arrow.FIXED_SIZE_BINARY, arrow.DATE32, arrow.DATE64, arrow.TIME32,
		arrow.TIME64, arrow.TIMESTAMP, arrow.DURATION, arrow.DECIMAL32, arrow.DECIMAL64,
		arrow.DECIMAL128, arrow.DECIMAL256:
		return nil
	case arrow.LIST, arrow.LARGE_LIST, arrow.FIXED_SIZE_LIST:
		return checkType(dt.(arrow.ListLikeType).Elem())
	case arrow.MAP:
		m := dt.(*arrow.MapType)
		if err := checkType(m.KeyType()); err != nil {
			return err
		}
		return checkType(m.ItemType())
	case arrow.STRUCT:
		seen := map[string]bool{}
		for _, f := range dt.(*arrow.StructType).Fields() {
			if seen[f.Name] {
				return fmt.Errorf("%w: %s has two fields named %q", ErrUnsupported, dt, f.Name)
			}
			seen[f.Name] = true
			if err := checkType(f.Type); err != nil {
				return err
			}
		}
		return nil
	case arrow.DICTIONARY:
		return checkType(dt.(*arrow.DictionaryType).ValueType)
	}
	return fmt.Errorf("%w: %s", ErrUnsupported, dt)
}
