package arrowrec

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/weir-io/weir/internal/sink/recjson"
)

// appendValue appends the JSON encoding of arr's value at i (the table in
// the package doc).
func appendValue(dst []byte, arr arrow.Array, i int) ([]byte, error) {
	if arr.IsNull(i) {
		return append(dst, "null"...), nil
	}
	switch a := arr.(type) {
	case *array.Null:
		return append(dst, "null"...), nil
	case *array.Boolean:
		return strconv.AppendBool(dst, a.Value(i)), nil
	case *array.Int8:
		return strconv.AppendInt(dst, int64(a.Value(i)), 10), nil
	case *array.Int16:
		return strconv.AppendInt(dst, int64(a.Value(i)), 10), nil
	case *array.Int32:
		return strconv.AppendInt(dst, int64(a.Value(i)), 10), nil
	case *array.Int64:
		return strconv.AppendInt(dst, a.Value(i), 10), nil
	case *array.Uint8:
		return strconv.AppendUint(dst, uint64(a.Value(i)), 10), nil
	case *array.Uint16:
		return strconv.AppendUint(dst, uint64(a.Value(i)), 10), nil
	case *array.Uint32:
		return strconv.AppendUint(dst, uint64(a.Value(i)), 10), nil
	case *array.Uint64:
		return strconv.AppendUint(dst, a.Value(i), 10), nil
	case *array.Float16:
		return appendFloat(dst, float64(a.Value(i).Float32()), 32), nil
	case *array.Float32:
		return appendFloat(dst, float64(a.Value(i)), 32), nil
	case *array.Float64:
		return appendFloat(dst, a.Value(i), 64), nil
	case *array.String:
		return appendString(dst, a.Value(i)), nil
	case *array.LargeString:
		return appendString(dst, a.Value(i)), nil
	case *array.StringView:
		return appendString(dst, a.Value(i)), nil
	case *array.Binary:
		return appendBase64(dst, a.Value(i)), nil
	case *array.LargeBinary:
		return appendBase64(dst, a.Value(i)), nil
	case *array.BinaryView:
		return appendBase64(dst, a.Value(i)), nil
	case *array.FixedSizeBinary:
		return appendBase64(dst, a.Value(i)), nil
	case *array.Date32:
		return appendQuotedTime(dst, time.Unix(int64(a.Value(i))*86400, 0).UTC(), dateLayout)
	case *array.Date64:
		ms := int64(a.Value(i))
		layout := dateLayout
		if ms%86400000 != 0 {
			layout = stampLayouts[arrow.Millisecond]
		}
		return appendQuotedTime(dst, time.UnixMilli(ms).UTC(), layout)
	case *array.Time32:
		u := a.DataType().(*arrow.Time32Type).Unit
		return appendTimeOfDay(dst, int64(a.Value(i)), u)
	case *array.Time64:
		u := a.DataType().(*arrow.Time64Type).Unit
		return appendTimeOfDay(dst, int64(a.Value(i)), u)
	case *array.Timestamp:
		t := a.DataType().(*arrow.TimestampType)
		at := timeOf(int64(a.Value(i)), t.Unit).In(zone(t.TimeZone))
		if _, off := at.Zone(); off%60 != 0 {
			at = at.UTC() // RFC 3339 has no seconds in an offset (local mean time before ~1900)
		}
		return appendQuotedTime(dst, at, stampLayouts[t.Unit])
	case *array.Duration:
		return strconv.AppendInt(dst, int64(a.Value(i)), 10), nil
	case *array.Decimal32:
		return appendString(dst, a.Value(i).ToString(a.DataType().(arrow.DecimalType).GetScale())), nil
	case *array.Decimal64:
		return appendString(dst, a.Value(i).ToString(a.DataType().(arrow.DecimalType).GetScale())), nil
	case *array.Decimal128:
		return appendString(dst, a.Value(i).ToString(a.DataType().(arrow.DecimalType).GetScale())), nil
	case *array.Decimal256:
		return appendString(dst, a.Value(i).ToString(a.DataType().(arrow.DecimalType).GetScale())), nil
	case *array.Dictionary:
		return appendValue(dst, a.Dictionary(), a.GetValueIndex(i))
	case *array.Struct:
		return appendStruct(dst, a, i)
	case *array.Map: // before the lists: a map is a list of entries
		return appendMap(dst, a, i)
	case *array.List, *array.LargeList, *array.FixedSizeList:
		l := a.(array.ListLike)
		start, end := l.ValueOffsets(i)
		dst = append(dst, '[')
		var err error
		for j := start; j < end; j++ {
			if j > start {
				dst = append(dst, ',')
			}
			if dst, err = appendValue(dst, l.ListValues(), int(j)); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	}
	return dst, fmt.Errorf("%w: %s", ErrUnsupported, arr.DataType())
}

func appendStruct(dst []byte, a *array.Struct, i int) ([]byte, error) {
	st := a.DataType().(*arrow.StructType)
	dst = append(dst, '{')
	var err error
	for j, f := range st.Fields() {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, f.Name)
		dst = append(dst, ':')
		if dst, err = appendValue(dst, a.Field(j), i); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// appendMap writes a map as an object, its entries in order. A key whose
// JSON encoding is a string is that string; any other key is its JSON
// text (1 → "1", true → "true", a struct → "{…}").
func appendMap(dst []byte, a *array.Map, i int) ([]byte, error) {
	start, end := a.ValueOffsets(i)
	keys, items := a.Keys(), a.Items()
	dst = append(dst, '{')
	var err error
	var kbuf []byte
	for j := start; j < end; j++ {
		if j > start {
			dst = append(dst, ',')
		}
		if kbuf, err = appendValue(kbuf[:0], keys, int(j)); err != nil {
			return dst, err
		}
		if encodesAsString(keys.DataType()) {
			dst = append(dst, kbuf...)
		} else {
			dst = appendString(dst, string(kbuf))
		}
		dst = append(dst, ':')
		if dst, err = appendValue(dst, items, int(j)); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// encodesAsString says whether a value of dt is a JSON string (which is
// what a map key of dt becomes as it is).
func encodesAsString(dt arrow.DataType) bool {
	switch dt.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW, arrow.BINARY, arrow.LARGE_BINARY,
		arrow.BINARY_VIEW, arrow.FIXED_SIZE_BINARY, arrow.DATE32, arrow.DATE64, arrow.TIME32,
		arrow.TIME64, arrow.TIMESTAMP, arrow.DECIMAL32, arrow.DECIMAL64, arrow.DECIMAL128, arrow.DECIMAL256:
		return true
	case arrow.DICTIONARY:
		return encodesAsString(dt.(*arrow.DictionaryType).ValueType)
	}
	return false
}

// appendFloat writes f as the shortest JSON number that reads back as the
// same value at bits (32 or 64); NaN and the infinities, which JSON has
// no number for, as the strings "NaN", "Infinity" and "-Infinity".
func appendFloat(dst []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Infinity"`...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, bits)
}

func appendBase64(dst, b []byte) []byte {
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}

// appendString writes s as a JSON string, escaped as recjson escapes
// every string weir writes (invalid UTF-8 becomes U+FFFD).
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = recjson.AppendShort(dst, s)
	return append(dst, '"')
}

const dateLayout = "2006-01-02"

// stampLayouts are RFC 3339 with each unit's fractional digits.
var stampLayouts = map[arrow.TimeUnit]string{
	arrow.Second:      "2006-01-02T15:04:05Z07:00",
	arrow.Millisecond: "2006-01-02T15:04:05.000Z07:00",
	arrow.Microsecond: "2006-01-02T15:04:05.000000Z07:00",
	arrow.Nanosecond:  "2006-01-02T15:04:05.000000000Z07:00",
}

// errRange is a date or time RFC 3339 cannot write (a year outside
// 0000–9999, a time of day outside the day).
var errRange = errors.New("outside the range RFC 3339 can write")

func appendQuotedTime(dst []byte, t time.Time, layout string) ([]byte, error) {
	if y := t.Year(); y < 0 || y > 9999 {
		return dst, fmt.Errorf("%s: %w", t.UTC().Format(time.RFC3339), errRange)
	}
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, layout)
	return append(dst, '"'), nil
}

// timeOf is v in unit u since the epoch.
func timeOf(v int64, u arrow.TimeUnit) time.Time {
	switch u {
	case arrow.Second:
		return time.Unix(v, 0)
	case arrow.Millisecond:
		return time.UnixMilli(v)
	case arrow.Microsecond:
		return time.UnixMicro(v)
	}
	return time.Unix(0, v)
}

// appendTimeOfDay writes v (in unit u since midnight) as "15:04:05" with
// the unit's fractional digits.
func appendTimeOfDay(dst []byte, v int64, u arrow.TimeUnit) ([]byte, error) {
	mult := u.Multiplier()
	ns := v * int64(mult)
	if v < 0 || v >= int64(24*time.Hour/mult) {
		return dst, fmt.Errorf("time of day %d%s: %w", v, u, errRange)
	}
	t := time.Unix(0, ns).UTC()
	return appendQuotedTime(dst, t, timeLayouts[u])
}

var timeLayouts = map[arrow.TimeUnit]string{
	arrow.Second:      "15:04:05",
	arrow.Millisecond: "15:04:05.000",
	arrow.Microsecond: "15:04:05.000000",
	arrow.Nanosecond:  "15:04:05.000000000",
}

var zones sync.Map // time zone name → *time.Location

// zone is the location of an Arrow time zone: UTC for none or one this
// host does not know; a fixed offset for "+01:00".
func zone(tz string) *time.Location {
	if tz == "" || tz == "UTC" || tz == "Z" {
		return time.UTC
	}
	if l, ok := zones.Load(tz); ok {
		return l.(*time.Location)
	}
	loc := time.UTC
	if t, err := time.Parse("-07:00", tz); err == nil {
		_, off := t.Zone()
		loc = time.FixedZone(tz, off)
	} else if l, err := time.LoadLocation(tz); err == nil {
		loc = l
	}
	zones.Store(tz, loc)
	return loc
}
