// Package recjson is the JSON form of a record's metadata that weir's
// sinks share: the NDJSON file sink (and the quarantine lanes, which embed
// its lines) writes a record's key and headers with it, and the SQL sinks
// write headers into a json/jsonb column with it, so every sink shows a
// record's headers the same way and reads them back the same way.
//
// # Headers
//
// A record's headers are an array, in the record's order, with repeated
// names kept:
//
//	[{"key":"trace","value":"abc","value_encoding":"utf8"},
//	 {"key":"bin","value":"AP8=","value_encoding":"base64"}]
//
// A value is written as text ("utf8") when it is valid UTF-8 without a
// NUL byte, else in standard base64 ("base64"); PostgreSQL's jsonb cannot
// hold a NUL character, so the rule keeps one form for every sink. A name
// that is not valid UTF-8 or holds a NUL (no source produces one, but a
// header name is bytes on some wires) is written in base64 with
// "key_encoding":"base64"; otherwise key_encoding is left out.
//
// A key (the NDJSON file sink's "key" field) follows the same rule as a
// header value, with "key_encoding" beside it.
package recjson

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/weir-io/weir/sink"
)

// Encodings of a value.
const (
	UTF8   = "utf8"
	Base64 = "base64"
)

// IsText reports whether b is written as text: valid UTF-8 without NUL.
func IsText(b []byte) bool { return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 }

// AppendValue appends b as a JSON string (with its quotes) in the encoding
// IsText picks, and returns the encoding.
func AppendValue(buf, b []byte) ([]byte, string) {
	buf = append(buf, '"')
	enc := UTF8
	if IsText(b) {
		buf = AppendString(buf, b)
	} else {
		buf = base64.StdEncoding.AppendEncode(buf, b)
		enc = Base64
	}
	return append(buf, '"'), enc
}

// AppendHeaders appends hs as a JSON array (see the package doc). An empty
// list is "[]".
func AppendHeaders(buf []byte, hs []sink.Header) []byte {
	buf = append(buf, '[')
	for i := range hs {
		if i > 0 {
			buf = append(buf, ',')
		}
		h := &hs[i]
		buf = append(buf, `{"key":`...)
		var enc string
		buf, enc = appendKey(buf, h.Key)
		if enc != UTF8 {
			buf = append(buf, `,"key_encoding":"`...)
			buf = append(buf, enc...)
			buf = append(buf, '"')
		}
		buf = append(buf, `,"value":`...)
		buf, enc = AppendValue(buf, h.Value)
		buf = append(buf, `,"value_encoding":"`...)
		buf = append(buf, enc...)
		buf = append(buf, `"}`...)
	}
	return append(buf, ']')
}

// appendKey is AppendValue for a string, without converting it when it
// needs no escaping.
func appendKey(buf []byte, s string) ([]byte, string) {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf || !safe[s[i]] {
			return AppendValue(buf, []byte(s))
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"'), UTF8
}

// Header is one header as JSON decodes it.
type Header struct {
	Key           *string `json:"key"`
	KeyEncoding   string  `json:"key_encoding"`
	Value         *string `json:"value"`
	ValueEncoding string  `json:"value_encoding"`
}

// DecodeHeaders turns decoded JSON headers back into a record's; nil for
// none.
func DecodeHeaders(js []Header) ([]sink.Header, error) {
	if len(js) == 0 {
		return nil, nil
	}
	out := make([]sink.Header, len(js))
	for i, h := range js {
		if h.Key == nil || h.Value == nil {
			return nil, fmt.Errorf("header %d: key or value missing", i)
		}
		enc := h.KeyEncoding
		if enc == "" {
			enc = UTF8
		}
		k, err := Decode(*h.Key, enc)
		if err != nil {
			return nil, fmt.Errorf("header %d: key: %w", i, err)
		}
		v, err := Decode(*h.Value, h.ValueEncoding)
		if err != nil {
			return nil, fmt.Errorf("header %d: value: %w", i, err)
		}
		out[i] = sink.Header{Key: string(k), Value: v}
	}
	return out, nil
}

// ParseHeaders decodes a JSON array written by AppendHeaders; nil for an
// empty or null one.
func ParseHeaders(raw []byte) ([]sink.Header, error) {
	var js []Header
	if err := json.Unmarshal(raw, &js); err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	return DecodeHeaders(js)
}

// Decode decodes a value written in the encoding enc.
func Decode(s, enc string) ([]byte, error) {
	switch enc {
	case UTF8:
		return []byte(s), nil
	case Base64:
		return base64.StdEncoding.DecodeString(s)
	default:
		return nil, fmt.Errorf("unknown encoding %q", strings.ToValidUTF8(enc, "?"))
	}
}

const hexDigits = "0123456789abcdef"

// safe[b] is true for ASCII bytes that appear unescaped inside a JSON
// string.
var safe = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// AppendString appends s, escaped as the body of a JSON string (without
// the quotes). Quotes, backslashes and control characters are escaped, and
// so are U+2028 and U+2029, which JavaScript does not allow raw in a
// string. Invalid UTF-8 becomes U+FFFD, as encoding/json does; callers
// send only valid UTF-8 here.
func AppendString(buf []byte, s []byte) []byte {
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if safe[b] {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch b {
			case '"', '\\':
				buf = append(buf, '\\', b)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRune(s[i:])
		if c == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
			i++
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\', 'u', '2', '0', '2', hexDigits[c&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(buf, s[start:]...)
}

// AppendShort appends a short string field such as a source name, escaped
// like AppendString, without converting it when it needs no escaping.
func AppendShort(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf || !safe[s[i]] {
			return AppendString(buf, []byte(s))
		}
	}
	return append(buf, s...)
}

// AppendTime appends t in UTC as time.RFC3339Nano formats it
// ("2006-01-02T15:04:05.999999999Z": the fraction without trailing zeros,
// left out when zero), as time.Time.AppendFormat does but in a fraction of
// its time: the file sink writes two of these per record. Years outside
// 0–9999 are left to AppendFormat.
func AppendTime(buf []byte, t time.Time) []byte {
	sec, ns := t.Unix(), t.Nanosecond()
	days, rem := sec/secondsPerDay, sec%secondsPerDay
	if rem < 0 {
		days, rem = days-1, rem+secondsPerDay
	}
	year, month, day := civil(days)
	if year < 0 || year > 9999 {
		return t.UTC().AppendFormat(buf, time.RFC3339Nano)
	}
	var b [35]byte // 2006-01-02T15:04:05.999999999Z
	put4(b[0:], int(year))
	b[4] = '-'
	put2(b[5:], month)
	b[7] = '-'
	put2(b[8:], day)
	b[10] = 'T'
	put2(b[11:], int(rem/3600))
	b[13] = ':'
	put2(b[14:], int(rem/60%60))
	b[16] = ':'
	put2(b[17:], int(rem%60))
	n := 19
	if ns != 0 {
		b[19] = '.'
		for i := 28; i > 19; i-- {
			b[i] = byte('0' + ns%10)
			ns /= 10
		}
		n = 29
		for b[n-1] == '0' {
			n--
		}
	}
	b[n] = 'Z'
	return append(buf, b[:n+1]...)
}

const secondsPerDay = 86400

// civil converts days since 1970-01-01 to a proleptic Gregorian date
// (Howard Hinnant's days_from_civil inverse).
func civil(days int64) (year int64, month, day int) {
	z := days + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	day = int(doy - (153*mp+2)/5 + 1)
	if mp < 10 {
		month = int(mp + 3)
	} else {
		month = int(mp - 9)
	}
	year = yoe + era*400
	if month <= 2 {
		year++
	}
	return year, month, day
}

func put2(b []byte, v int) { b[0], b[1] = byte('0'+v/10), byte('0'+v%10) }

func put4(b []byte, v int) {
	put2(b[0:], v/100)
	put2(b[2:], v%100)
}
