package arrowrec

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/weir-io/weir/sink"
)

func mustBatch(t *testing.T, s *arrow.Schema, rowsJSON string) arrow.RecordBatch {
	t.Helper()
	b, _, err := array.RecordFromJSON(memory.DefaultAllocator, s, strings.NewReader(rowsJSON))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var ordersSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "customer", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "at", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}, Nullable: true},
	{Name: "region", Type: arrow.BinaryTypes.String, Nullable: true},
}, nil)

func TestRowsKeyTimeHeaders(t *testing.T) {
	batch := mustBatch(t, ordersSchema, `[
		{"id": 1, "customer": "ann", "at": 1709298245123, "region": "eu"},
		{"id": 2, "customer": null, "at": null, "region": null}]`)
	defer batch.Release()
	d, err := NewDecoder(ordersSchema, Columns{Key: "customer", EventTime: "at", Headers: []string{"region", "id"}})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := d.Rows(nil, batch)
	if err != nil {
		t.Fatal(err)
	}
	fp := d.Schema().Fingerprint
	r0, r1 := rows[0], rows[1]
	if string(r0.Payload) != `{"id":1,"customer":"ann","at":"2024-03-01T13:04:05.123Z","region":"eu"}` {
		t.Errorf("payload kept the configured columns? %s", r0.Payload)
	}
	if string(r0.Key) != "ann" || !r0.Time.Equal(time.UnixMilli(1709298245123)) {
		t.Errorf("row 0: key %q time %v", r0.Key, r0.Time)
	}
	want0 := []sink.Header{{Key: "region", Value: []byte("eu")}, {Key: "id", Value: []byte("1")},
		{Key: HeaderSchema, Value: []byte(fp)}, {Key: HeaderSchemaIPC, Value: d.Schema().IPC}}
	if !sameHeaders(r0.Headers, want0) {
		t.Errorf("row 0 headers %q, want %q", r0.Headers, want0)
	}
	if r1.Key != nil || !r1.Time.IsZero() {
		t.Errorf("row 1 (nulls): key %q time %v, want none", r1.Key, r1.Time)
	}
	want1 := []sink.Header{{Key: "id", Value: []byte("2")}, {Key: HeaderSchema, Value: []byte(fp)}}
	if !sameHeaders(r1.Headers, want1) {
		t.Errorf("row 1 headers %q, want %q (a null header column is no header; only row 0 carries the schema)", r1.Headers, want1)
	}
	back, err := SchemaFromIPC(r0.Headers[3].Value)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Arrow.Equal(ordersSchema) || back.Fingerprint != fp || len(fp) != 64 {
		t.Errorf("schema read back: %v fingerprint %s, want %v %s", back.Arrow, back.Fingerprint, ordersSchema, fp)
	}
	other := NewSchema(arrow.NewSchema(ordersSchema.Fields()[:2], nil))
	if other.Fingerprint == fp {
		t.Error("two schemas, one fingerprint")
	}
}

func sameHeaders(a, b []sink.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || string(a[i].Value) != string(b[i].Value) {
			return false
		}
	}
	return true
}

func TestDecoderRefusesBadColumns(t *testing.T) {
	for _, cols := range []Columns{{Key: "nope"}, {EventTime: "customer"}, {Headers: []string{"x"}}} {
		if _, err := NewDecoder(ordersSchema, cols); err == nil {
			t.Errorf("NewDecoder(%+v) accepted", cols)
		}
	}
}

// TestRowsOfSlice reads a batch that is a slice of another (offsets into
// every buffer, nested ones too).
func TestRowsOfSlice(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{{Name: "s", Nullable: true, Type: arrow.StructOf(
		arrow.Field{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int8), Nullable: true},
		arrow.Field{Name: "m", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.BinaryTypes.String), Nullable: true})}}, nil)
	batch := mustBatch(t, s, `[{"s": {"l": [1], "m": [{"key": "a", "value": "b"}]}},
		{"s": {"l": [2, 3], "m": [{"key": "c", "value": "d"}]}}, {"s": null}]`)
	defer batch.Release()
	sl := batch.NewSlice(1, 3)
	defer sl.Release()
	d, err := NewDecoder(s, Columns{})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := d.Rows(nil, sl)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || string(rows[0].Payload) != `{"s":{"l":[2,3],"m":{"c":"d"}}}` || string(rows[1].Payload) != `{"s":null}` {
		t.Errorf("slice rows: %q", rows)
	}
}

func TestRowsRefuseUnwritableTime(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{{Name: "t", Type: &arrow.TimestampType{Unit: arrow.Second}}}, nil)
	batch := mustBatch(t, s, `[{"t": 253402300800}]`) // 10000-01-01
	defer batch.Release()
	d, err := NewDecoder(s, Columns{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Rows(nil, batch); err == nil {
		t.Error("a year past 9999 was written")
	}
}

func TestBuilderRefusesAndLeavesTheBatch(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b, err := NewBuilder(mem, ordersSchema)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	for _, bad := range []string{
		`[1]`, `{"id": "x"}`, `{"customer": "no id"}`, `{"id": 1, "at": "2024-03-01T13:04:05.1234Z"}`,
		`{"id": 1, "region": 5}`, `{"id": 99999999999999999999}`, `{"id": 1} {}`, `{`,
	} {
		if err := b.Append([]byte(bad)); err == nil {
			t.Errorf("Append(%s) accepted", bad)
		}
	}
	if err := b.Append([]byte(`{"id": 7, "extra": [1], "at": 1709298245123}`)); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 1 {
		t.Fatalf("%d rows after the refusals and one good row, want 1", b.Len())
	}
	batch := b.NewRecordBatch()
	defer batch.Release()
	d, _ := NewDecoder(ordersSchema, Columns{})
	rows, err := d.Rows(nil, batch)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(rows[0].Payload); got != `{"id":7,"customer":null,"at":"2024-03-01T13:04:05.123Z","region":null}` {
		t.Errorf("row %s", got)
	}
}

func TestAppendGeneric(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rb := array.NewRecordBuilder(mem, GenericSchema)
	defer rb.Release()
	id := sink.RecordID{1, 2, 3}
	AppendGeneric(rb, &sink.Record{ID: id, Payload: []byte("p"), Key: []byte("k"), EventTime: time.Unix(0, 5),
		Headers: []sink.Header{{Key: "h", Value: []byte("v")}}})
	AppendGeneric(rb, &sink.Record{ID: id, Payload: []byte{}})
	batch := rb.NewRecordBatch()
	defer batch.Release()
	got, err := batch.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"event_time":"1970-01-01T00:00:00.000000005Z","headers":[{"key":"h","value":"dg=="}],"key":"aw==","payload":"cA==","weir_record_id":"AQIDAAAAAAAAAAAAAAAAAA=="}` + "\n" +
		`,{"event_time":null,"headers":[],"key":null,"payload":"","weir_record_id":"AQIDAAAAAAAAAAAAAAAAAA=="}` + "\n" + `]`
	if string(got) != want {
		t.Errorf("generic rows\n%s\nwant\n%s", got, want)
	}
}

// TestSchemasOf: a sink finds every row's schema once it saw the first
// row of its batch, and none for an unknown fingerprint or a mismatched
// schema.
func TestSchemasOf(t *testing.T) {
	batch := mustBatch(t, ordersSchema, `[{"id": 1}, {"id": 2}]`)
	defer batch.Release()
	d, _ := NewDecoder(ordersSchema, Columns{})
	rows, err := d.Rows(nil, batch)
	if err != nil {
		t.Fatal(err)
	}
	s := Schemas{}
	if _, ok := s.Of(rows[1].Headers); ok {
		t.Error("row 1's schema known before row 0 was seen")
	}
	for i, r := range rows {
		sc, ok := s.Of(r.Headers)
		if !ok || !sc.Arrow.Equal(ordersSchema) {
			t.Errorf("row %d: schema %v, %v", i, sc.Arrow, ok)
		}
	}
	if _, ok := s.Of(nil); ok {
		t.Error("a row without a fingerprint has a schema")
	}
	other := NewSchema(arrow.NewSchema(ordersSchema.Fields()[:1], nil))
	lie := []sink.Header{{Key: HeaderSchema, Value: []byte("0123")}, {Key: HeaderSchemaIPC, Value: other.IPC}}
	if _, ok := s.Of(lie); ok {
		t.Error("a schema whose fingerprint is not the header's was taken")
	}
}
