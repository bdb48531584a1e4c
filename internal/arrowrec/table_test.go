package arrowrec

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/float16"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// typeCase is one column: its type, its values as arrow-go's own JSON
// reader (array.FromJSON) takes them — an encoder that is not ours — and
// the JSON the table says each value becomes.
type typeCase struct {
	name string
	dt   arrow.DataType
	in   string // array.FromJSON's input; "" when build is set
	make func(memory.Allocator) arrow.Array
	want []string // one per value
}

func tsType(u arrow.TimeUnit, tz string) arrow.DataType {
	return &arrow.TimestampType{Unit: u, TimeZone: tz}
}

// typeCases is the package doc's table, row by row.
var typeCases = []typeCase{
	{name: "null", dt: arrow.Null, in: `[null, null]`, want: []string{`null`, `null`}},
	{name: "bool", dt: arrow.FixedWidthTypes.Boolean, in: `[true, false, null]`, want: []string{`true`, `false`, `null`}},
	{name: "int8", dt: arrow.PrimitiveTypes.Int8, in: `[-128, 127, null]`, want: []string{`-128`, `127`, `null`}},
	{name: "int16", dt: arrow.PrimitiveTypes.Int16, in: `[-32768, 32767]`, want: []string{`-32768`, `32767`}},
	{name: "int32", dt: arrow.PrimitiveTypes.Int32, in: `[-2147483648, 2147483647]`, want: []string{`-2147483648`, `2147483647`}},
	{name: "int64", dt: arrow.PrimitiveTypes.Int64, in: `[-9223372036854775808, 9223372036854775807]`, want: []string{`-9223372036854775808`, `9223372036854775807`}},
	{name: "uint8", dt: arrow.PrimitiveTypes.Uint8, in: `[0, 255]`, want: []string{`0`, `255`}},
	{name: "uint16", dt: arrow.PrimitiveTypes.Uint16, in: `[65535]`, want: []string{`65535`}},
	{name: "uint32", dt: arrow.PrimitiveTypes.Uint32, in: `[4294967295]`, want: []string{`4294967295`}},
	{name: "uint64", dt: arrow.PrimitiveTypes.Uint64, in: `[18446744073709551615]`, want: []string{`18446744073709551615`}},
	{name: "float16", dt: arrow.FixedWidthTypes.Float16, make: func(m memory.Allocator) arrow.Array {
		b := array.NewFloat16Builder(m)
		defer b.Release()
		b.AppendValues([]float16.Num{float16.New(1.5), float16.New(-0.25), float16.Inf()}, nil)
		return b.NewArray()
	}, want: []string{`1.5`, `-0.25`, `"Infinity"`}},
	{name: "float32", dt: arrow.PrimitiveTypes.Float32, make: func(m memory.Allocator) arrow.Array {
		b := array.NewFloat32Builder(m)
		defer b.Release()
		b.AppendValues([]float32{0.1, 1e21, float32(math.NaN()), float32(math.Inf(-1))}, nil)
		b.AppendNull()
		return b.NewArray()
	}, want: []string{`0.1`, `1e+21`, `"NaN"`, `"-Infinity"`, `null`}},
	{name: "float64", dt: arrow.PrimitiveTypes.Float64, make: func(m memory.Allocator) arrow.Array {
		b := array.NewFloat64Builder(m)
		defer b.Release()
		b.AppendValues([]float64{0.1, math.Copysign(0, -1), 1.7976931348623157e308, math.Inf(1), math.NaN()}, nil)
		return b.NewArray()
	}, want: []string{`0.1`, `-0`, `1.7976931348623157e+308`, `"Infinity"`, `"NaN"`}},
	{name: "utf8", dt: arrow.BinaryTypes.String, in: `["a\"b\\c\n", "é✓", null]`, want: []string{`"a\"b\\c\n"`, `"é✓"`, `null`}},
	{name: "large utf8", dt: arrow.BinaryTypes.LargeString, in: `["x"]`, want: []string{`"x"`}},
	{name: "utf8 view", dt: arrow.BinaryTypes.StringView, in: `["a string longer than twelve bytes"]`, want: []string{`"a string longer than twelve bytes"`}},
	{name: "binary", dt: arrow.BinaryTypes.Binary, in: `["AAEC/w==", null]`, want: []string{`"AAEC/w=="`, `null`}},
	{name: "large binary", dt: arrow.BinaryTypes.LargeBinary, in: `["aGk="]`, want: []string{`"aGk="`}},
	{name: "binary view", dt: arrow.BinaryTypes.BinaryView, in: `["aGk="]`, want: []string{`"aGk="`}},
	{name: "fixed-size binary", dt: &arrow.FixedSizeBinaryType{ByteWidth: 3}, in: `["AQID"]`, want: []string{`"AQID"`}},
	{name: "date32", dt: arrow.FixedWidthTypes.Date32, in: `[19783, -1]`, want: []string{`"2024-03-01"`, `"1969-12-31"`}},
	{name: "date64", dt: arrow.FixedWidthTypes.Date64, in: `[1709251200000, 1709251200123]`, want: []string{`"2024-03-01"`, `"2024-03-01T00:00:00.123Z"`}},
	{name: "time32[s]", dt: arrow.FixedWidthTypes.Time32s, in: `[47045]`, want: []string{`"13:04:05"`}},
	{name: "time32[ms]", dt: arrow.FixedWidthTypes.Time32ms, in: `[47045123]`, want: []string{`"13:04:05.123"`}},
	{name: "time64[us]", dt: arrow.FixedWidthTypes.Time64us, in: `[47045000001]`, want: []string{`"13:04:05.000001"`}},
	{name: "time64[ns]", dt: arrow.FixedWidthTypes.Time64ns, in: `[47045123456789]`, want: []string{`"13:04:05.123456789"`}},
	{name: "timestamp[s]", dt: tsType(arrow.Second, ""), in: `[1709298245]`, want: []string{`"2024-03-01T13:04:05Z"`}},
	{name: "timestamp[ms]", dt: tsType(arrow.Millisecond, ""), in: `[1709298245120]`, want: []string{`"2024-03-01T13:04:05.120Z"`}},
	{name: "timestamp[us]", dt: tsType(arrow.Microsecond, ""), in: `[1709298245123456]`, want: []string{`"2024-03-01T13:04:05.123456Z"`}},
	{name: "timestamp[ns]", dt: tsType(arrow.Nanosecond, ""), in: `[-1]`, want: []string{`"1969-12-31T23:59:59.999999999Z"`}},
	{name: "timestamp[s, UTC]", dt: tsType(arrow.Second, "UTC"), in: `[0]`, want: []string{`"1970-01-01T00:00:00Z"`}},
	{name: "timestamp[ms, Europe/Paris]", dt: tsType(arrow.Millisecond, "Europe/Paris"), in: `[1709298245123]`, want: []string{`"2024-03-01T14:04:05.123+01:00"`}},
	{name: "timestamp[us, +05:30]", dt: tsType(arrow.Microsecond, "+05:30"), in: `[0]`, want: []string{`"1970-01-01T05:30:00.000000+05:30"`}},
	{name: "timestamp[ns, America/New_York]", dt: tsType(arrow.Nanosecond, "America/New_York"), in: `[1709298245000000001]`, want: []string{`"2024-03-01T08:04:05.000000001-05:00"`}},
	{name: "duration[s]", dt: arrow.FixedWidthTypes.Duration_s, in: `[-5]`, want: []string{`-5`}},
	{name: "duration[ms]", dt: arrow.FixedWidthTypes.Duration_ms, in: `[1500]`, want: []string{`1500`}},
	{name: "duration[us]", dt: arrow.FixedWidthTypes.Duration_us, in: `[1]`, want: []string{`1`}},
	{name: "duration[ns]", dt: arrow.FixedWidthTypes.Duration_ns, in: `[9223372036854775807]`, want: []string{`9223372036854775807`}},
	{name: "decimal32", dt: &arrow.Decimal32Type{Precision: 9, Scale: 3}, in: `["-1.250"]`, want: []string{`"-1.250"`}},
	{name: "decimal64", dt: &arrow.Decimal64Type{Precision: 18, Scale: 0}, in: `["123456789012345678"]`, want: []string{`"123456789012345678"`}},
	{name: "decimal128", dt: &arrow.Decimal128Type{Precision: 38, Scale: 10}, in: `["12345678901234567890.0123456789", "-0.5"]`, want: []string{`"12345678901234567890.0123456789"`, `"-0.5000000000"`}},
	{name: "decimal256", dt: &arrow.Decimal256Type{Precision: 76, Scale: 2}, in: `["123456789012345678901234567890123456789012345678901234567890.25"]`, want: []string{`"123456789012345678901234567890123456789012345678901234567890.25"`}},
	{name: "list", dt: arrow.ListOf(arrow.PrimitiveTypes.Int32), in: `[[1, null, 3], [], null]`, want: []string{`[1,null,3]`, `[]`, `null`}},
	{name: "large list", dt: arrow.LargeListOf(arrow.BinaryTypes.String), in: `[["a", "b"]]`, want: []string{`["a","b"]`}},
	{name: "fixed-size list", dt: arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Float64), in: `[[1.5, 2], null]`, want: []string{`[1.5,2]`, `null`}},
	{name: "struct", dt: arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true}, arrow.Field{Name: "b", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true}),
		in: `[{"a": 1, "b": ["x"]}, {"a": null, "b": null}, null]`, want: []string{`{"a":1,"b":["x"]}`, `{"a":null,"b":null}`, `null`}},
	{name: "map<utf8, int64>", dt: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64),
		in: `[[{"key": "z", "value": 1}, {"key": "a", "value": null}], []]`, want: []string{`{"z":1,"a":null}`, `{}`}},
	{name: "map<int32, utf8>", dt: arrow.MapOf(arrow.PrimitiveTypes.Int32, arrow.BinaryTypes.String),
		in: `[[{"key": 2, "value": "two"}, {"key": -1, "value": "minus one"}]]`, want: []string{`{"2":"two","-1":"minus one"}`}},
	{name: "map<bool, bool>", dt: arrow.MapOf(arrow.FixedWidthTypes.Boolean, arrow.FixedWidthTypes.Boolean),
		in: `[[{"key": true, "value": false}]]`, want: []string{`{"true":false}`}},
	{name: "map<binary, date32>", dt: arrow.MapOf(arrow.BinaryTypes.Binary, arrow.FixedWidthTypes.Date32),
		in: `[[{"key": "aGk=", "value": 0}]]`, want: []string{`{"aGk=":"1970-01-01"}`}},
	{name: "dictionary<int8, utf8>", dt: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String},
		make: func(m memory.Allocator) arrow.Array {
			b := array.NewDictionaryBuilder(m, &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}).(*array.BinaryDictionaryBuilder)
			defer b.Release()
			for _, s := range []string{"red", "green", "red"} {
				_ = b.AppendString(s)
			}
			b.AppendNull()
			return b.NewArray()
		}, want: []string{`"red"`, `"green"`, `"red"`, `null`}},
	{name: "dictionary<int32, int64>", dt: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.PrimitiveTypes.Int64},
		make: func(m memory.Allocator) arrow.Array {
			b := array.NewDictionaryBuilder(m, &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.PrimitiveTypes.Int64}).(*array.Int64DictionaryBuilder)
			defer b.Release()
			_ = b.Append(7)
			_ = b.Append(7)
			return b.NewArray()
		}, want: []string{`7`, `7`}},
}

// column builds the case's column, nullable, named "c".
func (c typeCase) column(t testing.TB, mem memory.Allocator) (*arrow.Schema, arrow.RecordBatch) {
	t.Helper()
	var arr arrow.Array
	if c.make != nil {
		arr = c.make(mem)
	} else {
		var err error
		if arr, _, err = array.FromJSON(mem, c.dt, strings.NewReader(c.in)); err != nil {
			t.Fatalf("array.FromJSON(%s, %s): %v", c.dt, c.in, err)
		}
	}
	defer arr.Release()
	s := arrow.NewSchema([]arrow.Field{{Name: "c", Type: c.dt, Nullable: true}}, nil)
	return s, array.NewRecordBatch(s, []arrow.Array{arr}, int64(arr.Len()))
}

// TestTypeTable checks every row of the table both ways: the payload of
// each value is what the doc says, and Builder reads it back to the same
// column.
func TestTypeTable(t *testing.T) {
	for _, c := range typeCases {
		t.Run(c.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			s, batch := c.column(t, mem)
			defer batch.Release()
			d, err := NewDecoder(s, Columns{})
			if err != nil {
				t.Fatal(err)
			}
			rows, err := d.Rows(nil, batch)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != len(c.want) {
				t.Fatalf("%d rows, want %d", len(rows), len(c.want))
			}
			b, err := NewBuilder(mem, s)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Release()
			for i, r := range rows {
				if want := `{"c":` + c.want[i] + `}`; string(r.Payload) != want {
					t.Errorf("row %d: payload %s, want %s", i, r.Payload, want)
				}
				if err := b.Append(r.Payload); err != nil {
					t.Fatalf("row %d: Append(%s): %v", i, r.Payload, err)
				}
			}
			back := b.NewRecordBatch()
			defer back.Release()
			if c.dt.ID() == arrow.DICTIONARY {
				// Rebuilt as a dictionary of the values seen: compare what
				// the rows say.
				again, err := d.Rows(nil, back)
				if err != nil {
					t.Fatal(err)
				}
				for i := range again {
					if string(again[i].Payload) != string(rows[i].Payload) {
						t.Errorf("row %d read back as %s, want %s", i, again[i].Payload, rows[i].Payload)
					}
				}
				return
			}
			if !array.Equal(batch.Column(0), back.Column(0)) && !array.ApproxEqual(batch.Column(0), back.Column(0), array.WithNaNsEqual(true), array.WithAbsTolerance(0)) {
				t.Errorf("read back as %v, want %v", back.Column(0), batch.Column(0))
			}
		})
	}
}

func TestRefusedTypes(t *testing.T) {
	for _, dt := range []arrow.DataType{
		arrow.SparseUnionOf([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int8}}, []arrow.UnionTypeCode{0}),
		arrow.DenseUnionOf([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int8}}, []arrow.UnionTypeCode{0}),
		arrow.FixedWidthTypes.MonthInterval,
		arrow.FixedWidthTypes.DayTimeInterval,
		arrow.FixedWidthTypes.MonthDayNanoInterval,
		arrow.ListViewOf(arrow.PrimitiveTypes.Int8),
		arrow.RunEndEncodedOf(arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int8),
		arrow.ListOf(arrow.FixedWidthTypes.MonthInterval), // nested
		arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int8}, arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int8}),
	} {
		s := arrow.NewSchema([]arrow.Field{{Name: "c", Type: dt}}, nil)
		if _, err := NewDecoder(s, Columns{}); !errors.Is(err, ErrUnsupported) {
			t.Errorf("NewDecoder(%s) = %v, want ErrUnsupported", dt, err)
		}
		if _, err := NewBuilder(memory.DefaultAllocator, s); !errors.Is(err, ErrUnsupported) {
			t.Errorf("NewBuilder(%s) = %v, want ErrUnsupported", dt, err)
		}
	}
	two := arrow.NewSchema([]arrow.Field{{Name: "c", Type: arrow.PrimitiveTypes.Int8}, {Name: "c", Type: arrow.PrimitiveTypes.Int8}}, nil)
	if err := CheckSchema(two); !errors.Is(err, ErrUnsupported) {
		t.Errorf("two columns of one name: %v, want ErrUnsupported", err)
	}
}
