package arrowrec

import (
	"bytes"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// fuzzSchema has a column of most kinds of the table.
var fuzzSchema = arrow.NewSchema([]arrow.Field{
	{Name: "i", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "u", Type: arrow.PrimitiveTypes.Uint8, Nullable: true},
	{Name: "f", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "b", Type: arrow.BinaryTypes.Binary, Nullable: true},
	{Name: "d", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
	{Name: "tm", Type: arrow.FixedWidthTypes.Time64us, Nullable: true},
	{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "Europe/Paris"}, Nullable: true},
	{Name: "dec", Type: &arrow.Decimal128Type{Precision: 20, Scale: 4}, Nullable: true},
	{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int16), Nullable: true},
	{Name: "st", Type: arrow.StructOf(arrow.Field{Name: "x", Type: arrow.FixedWidthTypes.Boolean, Nullable: true}), Nullable: true},
	{Name: "m", Type: arrow.MapOf(arrow.PrimitiveTypes.Int32, arrow.BinaryTypes.String), Nullable: true},
	{Name: "dict", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int16, ValueType: arrow.BinaryTypes.String}, Nullable: true},
}, nil)

// FuzzJSONArrowJSON: any payload Builder takes is written back by the
// Decoder as JSON that Builder takes again and that is then written back
// the same (JSON → Arrow → JSON is a fixed point after one pass).
func FuzzJSONArrowJSON(f *testing.F) {
	f.Add([]byte(`{"i": -1, "u": 255, "f": "NaN", "s": "\u00e9\n", "b": "AAE=", "d": "2024-03-01", "tm": "01:02:03.000004",
		"ts": "2024-03-01T13:04:05.123+01:00", "dec": "-12.5", "l": [1, null], "st": {"x": true}, "m": {"1": "a", "-2": null}, "dict": "v"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"f": 1e38, "ts": 0, "dec": 3, "m": {}, "l": []}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		mem := memory.NewGoAllocator()
		b, err := NewBuilder(mem, fuzzSchema)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Release()
		if b.Append(payload) != nil {
			return
		}
		d, err := NewDecoder(fuzzSchema, Columns{})
		if err != nil {
			t.Fatal(err)
		}
		pass := func() []byte {
			batch := b.NewRecordBatch()
			defer batch.Release()
			rows, err := d.Rows(nil, batch)
			if err != nil {
				t.Skip("a value the table cannot write (e.g. a year past 9999):", err)
			}
			return rows[0].Payload
		}
		first := pass()
		if err := b.Append(first); err != nil {
			t.Fatalf("Builder refused the Decoder's own payload %s: %v", first, err)
		}
		if second := pass(); !bytes.Equal(first, second) {
			t.Fatalf("round trip\n%s\nbecame\n%s", first, second)
		}
	})
}
