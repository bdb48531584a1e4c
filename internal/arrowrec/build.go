package arrowrec

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal"
	"github.com/apache/arrow-go/v18/arrow/float16"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Builder is the mapping's inverse, for a columnar sink: it appends
// records' JSON payloads, one row each, to a record batch of a given
// schema. Not safe for concurrent use.
type Builder struct {
	rb  *array.RecordBuilder
	mem memory.Allocator
}

// NewBuilder returns a Builder of batches of schema; an error if schema
// has a type the mapping refuses (ErrUnsupported).
func NewBuilder(mem memory.Allocator, schema *arrow.Schema) (*Builder, error) {
	if err := CheckSchema(schema); err != nil {
		return nil, err
	}
	return &Builder{rb: array.NewRecordBuilder(mem, schema), mem: mem}, nil
}

// Append adds payload, a JSON object, as one row: each field of the
// schema takes the member of its name, read back as the package doc's
// table writes it; a member missing or null is a null (an error for a
// field that is not nullable); members the schema does not name are
// ignored. On error nothing is appended.
func (b *Builder) Append(payload []byte) error {
	v, err := parseJSON(payload)
	if err != nil {
		return fmt.Errorf("arrowrec: payload: %w", err)
	}
	if v.kind != jsonObject {
		return fmt.Errorf("arrowrec: payload is %s, not an object", v.kind)
	}
	fields := b.rb.Schema().Fields()
	// Check every column first, so a bad row leaves the batch as it was.
	for _, apply := range []bool{false, true} {
		for i, f := range fields {
			a := appender{mem: b.mem, apply: apply}
			if err := a.field(b.rb.Field(i), f, v.member(f.Name)); err != nil {
				return fmt.Errorf("arrowrec: %w", err)
			}
		}
	}
	return nil
}

// Len is the rows appended since the last NewRecordBatch.
func (b *Builder) Len() int {
	if b.rb.Schema().NumFields() == 0 {
		return 0
	}
	return b.rb.Field(0).Len()
}

// NewRecordBatch returns the rows appended so far as a batch (the caller
// releases it) and starts a new one.
func (b *Builder) NewRecordBatch() arrow.RecordBatch { return b.rb.NewRecordBatch() }

// Release frees the builder's memory.
func (b *Builder) Release() { b.rb.Release() }

// appender appends values to builders; with apply false it only checks
// that they would append.
type appender struct {
	mem   memory.Allocator
	apply bool
}

func (a appender) field(b array.Builder, f arrow.Field, v *jsonValue) error {
	if (v == nil || v.kind == jsonNull) && !f.Nullable {
		return fmt.Errorf("%s: missing or null, and the field is not nullable", f.Name)
	}
	if err := a.value(b, v); err != nil {
		return fmt.Errorf("%s: %w", f.Name, err)
	}
	return nil
}

// value appends v (nil: missing) to b.
func (a appender) value(b array.Builder, v *jsonValue) error {
	if v == nil || v.kind == jsonNull {
		if a.apply {
			b.AppendNull()
		}
		return nil
	}
	switch b := b.(type) {
	case *array.NullBuilder:
		return fmt.Errorf("%s for a null column", v.kind)
	case *array.BooleanBuilder:
		if v.kind != jsonBool {
			return want("a boolean", v)
		}
		if a.apply {
			b.Append(v.b)
		}
	case *array.Int8Builder:
		return appendInt(a, v, 8, func(n int64) { b.Append(int8(n)) })
	case *array.Int16Builder:
		return appendInt(a, v, 16, func(n int64) { b.Append(int16(n)) })
	case *array.Int32Builder:
		return appendInt(a, v, 32, func(n int64) { b.Append(int32(n)) })
	case *array.Int64Builder:
		return appendInt(a, v, 64, b.Append)
	case *array.Uint8Builder:
		return appendUint(a, v, 8, func(n uint64) { b.Append(uint8(n)) })
	case *array.Uint16Builder:
		return appendUint(a, v, 16, func(n uint64) { b.Append(uint16(n)) })
	case *array.Uint32Builder:
		return appendUint(a, v, 32, func(n uint64) { b.Append(uint32(n)) })
	case *array.Uint64Builder:
		return appendUint(a, v, 64, b.Append)
	case *array.Float16Builder:
		return appendFloatValue(a, v, 32, func(f float64) { b.Append(float16.New(float32(f))) })
	case *array.Float32Builder:
		return appendFloatValue(a, v, 32, func(f float64) { b.Append(float32(f)) })
	case *array.Float64Builder:
		return appendFloatValue(a, v, 64, b.Append)
	case *array.StringBuilder:
		return appendText(a, v, b.Append)
	case *array.LargeStringBuilder:
		return appendText(a, v, b.Append)
	case *array.StringViewBuilder:
		return appendText(a, v, b.Append)
	case *array.BinaryBuilder:
		return appendBytes(a, v, -1, b.Append)
	case *array.BinaryViewBuilder:
		return appendBytes(a, v, -1, b.Append)
	case *array.FixedSizeBinaryBuilder:
		return appendBytes(a, v, b.Type().(*arrow.FixedSizeBinaryType).ByteWidth, b.Append)
	case *array.Date32Builder:
		t, err := parseDate(v)
		if err != nil {
			return err
		}
		days := t.Unix() / 86400
		if t.Unix()%86400 != 0 || days != int64(int32(days)) {
			return fmt.Errorf("%q is not a date32", v.text)
		}
		if a.apply {
			b.Append(arrow.Date32(days))
		}
	case *array.Date64Builder:
		t, err := parseDate(v)
		if err != nil {
			return err
		}
		if a.apply {
			b.Append(arrow.Date64(t.UnixMilli()))
		}
	case *array.Time32Builder:
		n, err := parseTimeOfDay(v, b.Type().(*arrow.Time32Type).Unit)
		if err == nil && a.apply {
			b.Append(arrow.Time32(n))
		}
		return err
	case *array.Time64Builder:
		n, err := parseTimeOfDay(v, b.Type().(*arrow.Time64Type).Unit)
		if err == nil && a.apply {
			b.Append(arrow.Time64(n))
		}
		return err
	case *array.TimestampBuilder:
		n, err := parseTimestamp(v, b.Type().(*arrow.TimestampType).Unit)
		if err == nil && a.apply {
			b.Append(arrow.Timestamp(n))
		}
		return err
	case *array.DurationBuilder:
		return appendInt(a, v, 64, func(n int64) { b.Append(arrow.Duration(n)) })
	case *array.Decimal32Builder:
		return appendDecimal(a, v, b.Type(), decimal.Dec32Traits, b.Append)
	case *array.Decimal64Builder:
		return appendDecimal(a, v, b.Type(), decimal.Dec64Traits, b.Append)
	case *array.Decimal128Builder:
		return appendDecimal(a, v, b.Type(), decimal.Dec128Traits, b.Append)
	case *array.Decimal256Builder:
		return appendDecimal(a, v, b.Type(), decimal.Dec256Traits, b.Append)
	case *array.MapBuilder: // before the lists: a map builder is a list builder
		return a.mapValue(b, v)
	case *array.FixedSizeListBuilder:
		n := int(b.Type().(*arrow.FixedSizeListType).Len())
		if v.kind == jsonArray && len(v.elems) != n {
			return fmt.Errorf("an array of %d elements for a fixed-size list of %d", len(v.elems), n)
		}
		return a.list(b, b.ValueBuilder(), v)
	case *array.ListBuilder:
		return a.list(b, b.ValueBuilder(), v)
	case *array.LargeListBuilder:
		return a.list(b, b.ValueBuilder(), v)
	case *array.StructBuilder:
		if v.kind != jsonObject {
			return want("an object", v)
		}
		st := b.Type().(*arrow.StructType)
		if a.apply {
			b.Append(true)
		}
		for j, f := range st.Fields() {
			if err := a.field(b.FieldBuilder(j), f, v.member(f.Name)); err != nil {
				return err
			}
		}
	case array.DictionaryBuilder:
		// The value is appended to a builder of the dictionary's value
		// type, then to the dictionary, which finds or adds it.
		vb := array.NewBuilder(a.mem, b.Type().(*arrow.DictionaryType).ValueType)
		defer vb.Release()
		if err := (appender{mem: a.mem, apply: true}).value(vb, v); err != nil || !a.apply {
			return err
		}
		arr := vb.NewArray()
		defer arr.Release()
		return b.AppendArray(arr)
	default:
		return fmt.Errorf("%w: %s", ErrUnsupported, b.Type())
	}
	return nil
}

func (a appender) list(b array.ListLikeBuilder, vb array.Builder, v *jsonValue) error {
	if v.kind != jsonArray {
		return want("an array", v)
	}
	if a.apply {
		b.Append(true)
	}
	for i := range v.elems {
		if err := a.value(vb, &v.elems[i]); err != nil {
			return fmt.Errorf("[%d]: %w", i, err)
		}
	}
	return nil
}

// mapValue reads the object appendMap writes: a member's name is the key
// itself when the key type encodes as a JSON string, else its JSON text.
func (a appender) mapValue(b *array.MapBuilder, v *jsonValue) error {
	if v.kind != jsonObject {
		return want("an object", v)
	}
	if a.apply {
		b.Append(true)
	}
	kt := b.Type().(*arrow.MapType).KeyType()
	for i := range v.members {
		m := &v.members[i]
		key := jsonValue{kind: jsonString, text: m.name}
		if !encodesAsString(kt) {
			var err error
			if key, err = parseJSON([]byte(m.name)); err != nil {
				return fmt.Errorf("map key %q: %w", m.name, err)
			}
		}
		if key.kind == jsonNull {
			return fmt.Errorf("map key %q: a map key cannot be null", m.name)
		}
		if err := a.value(b.KeyBuilder(), &key); err != nil {
			return fmt.Errorf("map key %q: %w", m.name, err)
		}
		if err := a.value(b.ItemBuilder(), &m.value); err != nil {
			return fmt.Errorf("map value of %q: %w", m.name, err)
		}
	}
	return nil
}

func want(what string, v *jsonValue) error {
	return fmt.Errorf("%s where %s was expected", v.kind, what)
}

// numText is v's number text: a number, or a string holding one.
func numText(v *jsonValue) (string, error) {
	if v.kind != jsonNumber && v.kind != jsonString {
		return "", want("a number", v)
	}
	return v.text, nil
}

func appendInt(a appender, v *jsonValue, bits int, add func(int64)) error {
	s, err := numText(v)
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(s, 10, bits)
	if err != nil {
		return fmt.Errorf("not an int%d: %w", bits, err)
	}
	if a.apply {
		add(n)
	}
	return nil
}

func appendUint(a appender, v *jsonValue, bits int, add func(uint64)) error {
	s, err := numText(v)
	if err != nil {
		return err
	}
	n, err := strconv.ParseUint(s, 10, bits)
	if err != nil {
		return fmt.Errorf("not a uint%d: %w", bits, err)
	}
	if a.apply {
		add(n)
	}
	return nil
}

func appendFloatValue(a appender, v *jsonValue, bits int, add func(float64)) error {
	var f float64
	switch {
	case v.kind == jsonString && v.text == "NaN":
		f = math.NaN()
	case v.kind == jsonString && v.text == "Infinity":
		f = math.Inf(1)
	case v.kind == jsonString && v.text == "-Infinity":
		f = math.Inf(-1)
	default:
		s, err := numText(v)
		if err != nil {
			return err
		}
		if f, err = strconv.ParseFloat(s, bits); err != nil {
			return fmt.Errorf("not a float%d: %w", bits, err)
		}
	}
	if a.apply {
		add(f)
	}
	return nil
}

func appendText(a appender, v *jsonValue, add func(string)) error {
	if v.kind != jsonString {
		return want("a string", v)
	}
	if a.apply {
		add(v.text)
	}
	return nil
}

// appendBytes decodes v's base64; width is the byte width a fixed-size
// binary needs, -1 for any.
func appendBytes(a appender, v *jsonValue, width int, add func([]byte)) error {
	if v.kind != jsonString {
		return want("a base64 string", v)
	}
	b, err := base64.StdEncoding.DecodeString(v.text)
	if err != nil {
		return fmt.Errorf("not base64: %w", err)
	}
	if width >= 0 && len(b) != width {
		return fmt.Errorf("%d bytes for a fixed-size binary of %d", len(b), width)
	}
	if a.apply {
		add(b)
	}
	return nil
}

func appendDecimal[T decimal.DecimalTypes](a appender, v *jsonValue, dt arrow.DataType, tr decimal.Traits[T], add func(T)) error {
	s, err := numText(v)
	if err != nil {
		return err
	}
	d := dt.(arrow.DecimalType)
	n, err := tr.FromString(s, d.GetPrecision(), d.GetScale())
	if err != nil {
		return fmt.Errorf("not a %s: %w", dt, err)
	}
	if a.apply {
		add(n)
	}
	return nil
}

// parseDate reads "2006-01-02", or an RFC 3339 time (what a date64 with
// a time of day is written as).
func parseDate(v *jsonValue) (time.Time, error) {
	if v.kind != jsonString {
		return time.Time{}, want("a date string", v)
	}
	if t, err := time.Parse(dateLayout, v.text); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v.text)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither 2006-01-02 nor RFC 3339", v.text)
	}
	return t, nil
}

// parseTimeOfDay reads "15:04:05[.fraction]" as a count of u since
// midnight; digits finer than u are an error.
func parseTimeOfDay(v *jsonValue, u arrow.TimeUnit) (int64, error) {
	if v.kind != jsonString {
		return 0, want("a time-of-day string", v)
	}
	t, err := time.Parse("15:04:05.999999999", v.text)
	if err != nil {
		return 0, fmt.Errorf("%q is not a time of day: %w", v.text, err)
	}
	ns := int64(t.Hour())*int64(time.Hour) + int64(t.Minute())*int64(time.Minute) +
		int64(t.Second())*int64(time.Second) + int64(t.Nanosecond())
	return inUnit(ns, u, v.text)
}

// parseTimestamp reads an RFC 3339 time, or an integer count of u since
// the epoch, as a count of u.
func parseTimestamp(v *jsonValue, u arrow.TimeUnit) (int64, error) {
	if v.kind == jsonNumber {
		return strconv.ParseInt(v.text, 10, 64)
	}
	if v.kind != jsonString {
		return 0, want("an RFC 3339 string", v)
	}
	t, err := time.Parse(time.RFC3339Nano, v.text)
	if err != nil {
		return 0, fmt.Errorf("%q is not RFC 3339: %w", v.text, err)
	}
	switch u {
	case arrow.Second:
		return t.Unix(), noFiner(int64(t.Nanosecond()), time.Second, v.text)
	case arrow.Millisecond:
		return t.UnixMilli(), noFiner(int64(t.Nanosecond()), time.Millisecond, v.text)
	case arrow.Microsecond:
		return t.UnixMicro(), noFiner(int64(t.Nanosecond()), time.Microsecond, v.text)
	}
	if y := t.Year(); y < 1678 || y > 2261 {
		return 0, fmt.Errorf("%q: %w", v.text, errors.New("outside what nanoseconds since 1970 hold in 64 bits"))
	}
	return t.UnixNano(), nil
}

func inUnit(ns int64, u arrow.TimeUnit, text string) (int64, error) {
	m := u.Multiplier()
	return ns / int64(m), noFiner(ns, m, text)
}

// noFiner refuses digits finer than the unit m: the value would not read
// back as written.
func noFiner(ns int64, m time.Duration, text string) error {
	if ns%int64(m) != 0 {
		return fmt.Errorf("%q has digits finer than the column's unit (%s)", text, strings.TrimPrefix(m.String(), "1"))
	}
	return nil
}
