package flightsink_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/internal/sink/flightsink"
	"github.com/weir-io/weir/internal/testenv/flighttest"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// arrowBatch is a batch of n rows over the types a typed column must
// carry through: integers, text, a timestamp with a zone, a decimal, a
// list, a struct, and nulls.
func arrowBatch(t *testing.T, n int) arrow.RecordBatch {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "at", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "Europe/Paris"}},
		{Name: "amount", Type: &arrow.Decimal128Type{Precision: 10, Scale: 2}, Nullable: true},
		{Name: "tags", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
		{Name: "pt", Type: arrow.StructOf(arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Float64}, arrow.Field{Name: "ok", Type: arrow.FixedWidthTypes.Boolean})},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(int64(i) << 40)
		if i%3 == 2 {
			b.Field(1).AppendNull()
			b.Field(3).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("name-%d-é", i))
			b.Field(3).(*array.Decimal128Builder).Append(decimal128.FromI64(int64(i*100 - 12345)))
		}
		b.Field(2).(*array.TimestampBuilder).Append(arrow.Timestamp(at.Add(time.Duration(i) * time.Minute).UnixMilli()))
		lb := b.Field(4).(*array.ListBuilder)
		lb.Append(true)
		for j := range i % 4 {
			lb.ValueBuilder().(*array.Int32Builder).Append(int32(j - i))
		}
		sb := b.Field(5).(*array.StructBuilder)
		sb.Append(true)
		sb.FieldBuilder(0).(*array.Float64Builder).Append(float64(i) / 10)
		sb.FieldBuilder(1).(*array.BooleanBuilder).Append(i%2 == 0)
	}
	return b.NewRecordBatch()
}

// arrowRecords turns a batch into records as an Arrow source does
// (arrowrec's Decoder): JSON payloads, the schema in the headers.
func arrowRecords(t *testing.T, batch arrow.RecordBatch, tag string) []sink.Record {
	t.Helper()
	d, err := arrowrec.NewDecoder(batch.Schema(), arrowrec.Columns{Key: "name"})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := d.Rows(nil, batch)
	if err != nil {
		t.Fatal(err)
	}
	recs := records(tag, 0, len(rows), 10)
	for i, r := range rows {
		recs[i].Payload, recs[i].Key, recs[i].Headers = r.Payload, r.Key, r.Headers
	}
	return recs
}

// TestTypedColumns: with columns = "arrow", the rows of an Arrow source
// reach the server in typed columns of their own schema, after the id
// column, equal to the batch they came from — even in a commit that lacks
// the row carrying the schema, by a sink reopened on the kept schemas. A
// sink that never saw the schema rejects such rows (decode), as it does a
// payload that does not fit the schema; records without a schema go in
// the generic schema, in a DoPut of their own.
func TestTypedColumns(t *testing.T) {
	ctx := context.Background()
	srv := flighttest.Start(t, flighttest.Options{})
	schemaDir := t.TempDir()
	typed := func(o *flightsink.Options) { o.Columns, o.SchemaDir = flightsink.ColumnsArrow, schemaDir }
	batch := arrowBatch(t, 12)
	defer batch.Release()
	recs := arrowRecords(t, batch, "typed")

	// The first commit holds the row with the schema, a generic record
	// and a payload the schema refuses.
	bad := recs[1]
	bad.ID[0] ^= 0xff
	bad.Payload = []byte(`{"id":"not a number","at":0,"tags":[],"pt":{"x":1,"ok":true}}`)
	plain := records("plain", 0, 1, 40)[0]
	first := append(append([]sink.Record{}, recs[:6]...), bad, plain)
	s := openSink(t, srv.Endpoint(), typed)
	res, err := s.Commit(ctx, sink.NewBatch(first))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rejected) != 1 || res.Rejected[0].Index != 6 || res.Rejected[0].Code != sink.CodeDecode {
		t.Fatalf("rejections %+v, want the bad payload (#6) as decode", res.Rejected)
	}
	t.Logf("reason: %s", res.Rejected[0].Reason)
	s.Close()

	// A sink that never saw the schema cannot send the rest typed.
	fresh := openSink(t, srv.Endpoint(), func(o *flightsink.Options) { o.Columns = flightsink.ColumnsArrow })
	res, err = fresh.Commit(ctx, sink.NewBatch(recs[6:]))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rejected) != 6 || !strings.Contains(res.Rejected[0].Reason, "unknown") {
		t.Fatalf("a sink without the schema: rejections %+v, want all 6 unknown", res.Rejected)
	}
	// One reopened on the kept schemas can.
	s2 := openSink(t, srv.Endpoint(), typed)
	if _, err := s2.Commit(ctx, sink.NewBatch(recs[6:])); err != nil {
		t.Fatal(err)
	}

	got, err := flighttest.Read(ctx, vfs.OS, srv.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range got {
			r.Release()
		}
	}()
	var typedRows []arrow.RecordBatch
	generic := 0
	for _, r := range got {
		if r.Schema().Field(0).Name != flightsink.ColID {
			t.Fatalf("stored batch without the id column first: %s", r.Schema())
		}
		if r.Schema().Equal(flightsink.GenericSchema) || r.Schema().HasField("payload") {
			generic += int(r.NumRows())
			continue
		}
		typedRows = append(typedRows, r)
	}
	if generic != 1 || len(typedRows) != 2 {
		t.Fatalf("%d generic rows, %d typed batches; want 1 and 2", generic, len(typedRows))
	}
	for k, r := range typedRows {
		want := batch.NewSlice(int64(6*k), int64(6*k+6))
		if r.NumRows() != 6 {
			t.Fatalf("typed batch %d: %d rows", k, r.NumRows())
		}
		ids := r.Column(0).(*array.FixedSizeBinary)
		for i := range 6 {
			if string(ids.Value(i)) != string(recs[6*k+i].ID[:]) {
				t.Errorf("typed batch %d row %d: id %x, want %x", k, i, ids.Value(i), recs[6*k+i].ID[:])
			}
		}
		for c := range int(want.NumCols()) {
			name := want.ColumnName(c)
			idx := r.Schema().FieldIndices(name)
			if len(idx) != 1 {
				t.Fatalf("typed batch %d: no column %s in %s", k, name, r.Schema())
			}
			if !arrow.TypeEqual(r.Column(idx[0]).DataType(), want.Column(c).DataType()) || !array.Equal(r.Column(idx[0]), want.Column(c)) {
				t.Errorf("typed batch %d column %s: got %v (%s), want %v (%s)", k, name, r.Column(idx[0]), r.Column(idx[0]).DataType(), want.Column(c), want.Column(c).DataType())
			}
		}
		want.Release()
	}
}
