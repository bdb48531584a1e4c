package arrowipcsrc

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// testSchema is the schema the Go-written test files use: an id, a text,
// a nullable float and a dictionary-encoded label.
var testSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String},
	{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "label", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}},
}, nil)

// builderSchema is testSchema without its dictionary column, which
// testBatch builds apart.
var builderSchema = arrow.NewSchema(testSchema.Fields()[:3], nil)

// testBatch is rows [from, from+n) of the test files' data.
func testBatch(from, n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, builderSchema)
	defer b.Release()
	for i := from; i < from+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("row-%d", i))
		if i%3 == 0 {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.Float64Builder).Append(float64(i) / 4)
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	// The label column shares one dictionary in every batch: the file
	// format allows no replacement.
	dict := array.NewStringBuilder(memory.DefaultAllocator)
	defer dict.Release()
	dict.AppendValues([]string{"red", "green", "blue"}, nil)
	values := dict.NewArray()
	defer values.Release()
	ib := array.NewInt32Builder(memory.DefaultAllocator)
	defer ib.Release()
	for i := from; i < from+n; i++ {
		ib.Append(int32(i % 3))
	}
	idx := ib.NewArray()
	defer idx.Release()
	labels := array.NewDictionaryArray(testSchema.Field(3).Type, idx, values)
	defer labels.Release()
	return array.NewRecordBatch(testSchema, []arrow.Array{rec.Column(0), rec.Column(1), rec.Column(2), labels}, int64(n))
}

// writeIPC encodes batches of the given sizes (rows numbered on from 0) as
// an IPC file (file) or stream, and returns the bytes and the offset at
// which each batch's message ends.
func writeIPC(t testing.TB, file bool, sizes ...int) []byte {
	t.Helper()
	var buf bytes.Buffer
	type writer interface {
		Write(arrow.RecordBatch) error
		Close() error
	}
	var w writer
	if file {
		fw, err := ipc.NewFileWriter(&buf, ipc.WithSchema(testSchema))
		if err != nil {
			t.Fatal(err)
		}
		w = fw
	} else {
		w = ipc.NewWriter(&buf, ipc.WithSchema(testSchema))
	}
	row := 0
	for _, n := range sizes {
		rec := testBatch(row, n)
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		row += n
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// step is one event of a reader, as tests compare them.
type step struct {
	kind     evKind
	off, end int64
	batch    int64
	rows     int64
	json     string // the batch's rows as arrow's JSON
}

func (s step) String() string {
	return fmt.Sprintf("{%d [%d,%d) batch %d rows %d}", s.kind, s.off, s.end, s.batch, s.rows)
}

// readAll reads b (as if size bytes of it were written) with rd until it
// is incomplete or done, at most a bound of steps that no input reaches
// (each step consumes at least 4 bytes). Every batch's values are read in
// full, as the source's mapping would, under the same recover.
func readAll(t testing.TB, rd *reader, size int64) []step {
	t.Helper()
	var out []step
	for i := 0; ; i++ {
		if i > int(size)/4+4 {
			t.Fatalf("reader made %d steps over %d bytes: it does not advance", i, size)
		}
		ev, err := rd.next(size)
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		st := step{kind: ev.kind, off: ev.off, end: ev.end, batch: ev.batch}
		if ev.kind == evBatch {
			st.rows = ev.rec.NumRows()
			var sb strings.Builder
			if err := touch(ev.rec, &sb); err != nil {
				st.kind, st.json = evUndecodable, ""
			} else {
				st.json = sb.String()
			}
			ev.rec.Release()
		}
		if ev.kind == evIncomplete || ev.kind == evDone {
			st.off, st.end, st.batch = 0, 0, 0
		}
		out = append(out, st)
		if ev.kind == evIncomplete || ev.kind == evDone {
			return out
		}
	}
}

// touch reads every value of rec (arrow's JSON of it), turning a panic
// into an error as the source does.
func touch(rec arrow.RecordBatch, sb *strings.Builder) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return array.RecordToJSON(rec, sb)
}
