package flightsink_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/weir-io/weir/internal/sink/flightsink"
	"github.com/weir-io/weir/internal/testenv/flighttest"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// ordersSchema is a data contract's schema of the contract tests.
const ordersSchema = "../../contract/testdata/orders.schema.json"

// TestArrowFromJSONSchema maps a contract's JSON Schema to typed columns
// (required, $defs, nested objects, arrays, date-time) and refuses what
// has no Arrow type, naming where.
func TestArrowFromJSONSchema(t *testing.T) {
	doc, err := os.ReadFile(ordersSchema)
	if err != nil {
		t.Fatal(err)
	}
	s, err := flightsink.ArrowFromJSONSchema(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := arrow.NewSchema([]arrow.Field{
		{Name: "amount", Type: arrow.PrimitiveTypes.Float64},
		{Name: "channel", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "currency", Type: arrow.BinaryTypes.String},
		{Name: "customer", Type: arrow.StructOf(
			arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
			arrow.Field{Name: "tier", Type: arrow.BinaryTypes.String, Nullable: true}), Nullable: true},
		{Name: "items", Type: arrow.ListOfField(arrow.Field{Name: "item", Type: arrow.StructOf(
			arrow.Field{Name: "price", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
			arrow.Field{Name: "qty", Type: arrow.PrimitiveTypes.Int64},
			arrow.Field{Name: "sku", Type: arrow.BinaryTypes.String})}), Nullable: true},
		{Name: "order_id", Type: arrow.BinaryTypes.String},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}},
	}, nil)
	if !s.Equal(want) {
		t.Errorf("got\n%s\nwant\n%s", s, want)
	}
	for doc, why := range map[string]string{
		`{"type":"object","properties":{"a":{"type":"object"}}}`:                   "/a: an object needs properties",
		`{"type":"object","properties":{"a":{"allOf":[{"type":"string"}]}}}`:       "/a: allOf",
		`{"type":"object","properties":{"a":{"$ref":"https://x.example/a.json"}}}`: "/a: $ref",
		`{"type":"object","properties":{"a":{"type":["string","integer"]}}}`:       "/a: want one type",
		`{"type":"object","properties":{"a":{"$ref":"#"}}}`:                        "deep",
		`{"type":"object","properties":{"a":{"type":"array"}}}`:                    "/a: an array needs one items",
		`{"type":"string"}`: "the top level must be an object",
		`{"type":"object","properties":{"weir_record_id":{"type":"string"}}}`:                 "", // refused by the sink, not the mapping
		`{"type":"object","properties":{"a":{"anyOf":[{"type":"null"},{"type":"boolean"}]}}}`: "",
	} {
		_, err := flightsink.ArrowFromJSONSchema([]byte(doc))
		switch {
		case why == "" && err != nil:
			t.Errorf("%s: %v", doc, err)
		case why != "" && (err == nil || !strings.Contains(err.Error(), why)):
			t.Errorf("%s: error %v, want one saying %q", doc, err, why)
		}
	}
}

// TestJSONSchemaColumns: with columns = "json_schema" every payload goes
// in the columns of the contract's schema, after the id; one that does
// not fit them is rejected (decode) and the rest committed.
func TestJSONSchemaColumns(t *testing.T) {
	doc, err := os.ReadFile(ordersSchema)
	if err != nil {
		t.Fatal(err)
	}
	typed, err := flightsink.ArrowFromJSONSchema(doc)
	if err != nil {
		t.Fatal(err)
	}
	srv := flighttest.Start(t, flighttest.Options{})
	s := openSink(t, srv.Endpoint(), func(o *flightsink.Options) { o.Columns, o.Typed = flightsink.ColumnsJSONSchema, typed })
	recs := records("orders", 0, 3, 10)
	recs[0].Payload = []byte(`{"order_id":"o-1","amount":12.5,"currency":"EUR","ts":"2026-03-01T13:04:05.123456789+01:00","items":[{"sku":"a","qty":2}],"customer":{"id":7,"tier":"gold"}}`)
	recs[1].Payload = []byte(`{"order_id":"o-2","amount":"lots","currency":"EUR","ts":"2026-03-01T12:00:00Z"}`)
	recs[2].Payload = []byte(`{"order_id":"o-3","amount":3,"currency":"USD","ts":"2026-03-02T00:00:00Z","channel":"web","extra":true}`)
	res, err := s.Commit(context.Background(), sink.NewBatch(recs))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rejected) != 1 || res.Rejected[0].Index != 1 || res.Rejected[0].Code != sink.CodeDecode {
		t.Fatalf("rejections %+v, want #1 as decode", res.Rejected)
	}
	got, err := flighttest.Read(context.Background(), vfs.OS, srv.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range got {
			r.Release()
		}
	}()
	if len(got) != 1 || got[0].NumRows() != 2 {
		t.Fatalf("stored %d batches", len(got))
	}
	r := got[0]
	col := func(name string) arrow.Array { return r.Column(r.Schema().FieldIndices(name)[0]) }
	ids := col(flightsink.ColID).(*array.FixedSizeBinary)
	if string(ids.Value(0)) != string(recs[0].ID[:]) || string(ids.Value(1)) != string(recs[2].ID[:]) {
		t.Errorf("ids %x %x", ids.Value(0), ids.Value(1))
	}
	ts := col("ts").(*array.Timestamp)
	if at := time.Unix(0, int64(ts.Value(0))).UTC(); !at.Equal(time.Date(2026, 3, 1, 12, 4, 5, 123456789, time.UTC)) {
		t.Errorf("ts %v", at)
	}
	if a := col("amount").(*array.Float64); a.Value(0) != 12.5 || a.Value(1) != 3 {
		t.Errorf("amount %v", a)
	}
	if c := col("channel").(*array.String); !c.IsNull(0) || c.Value(1) != "web" {
		t.Errorf("channel %v", c)
	}
	items := col("items").(*array.List)
	if s, e := items.ValueOffsets(0); e-s != 1 || !items.IsNull(1) {
		t.Errorf("items %v", items)
	}
}
