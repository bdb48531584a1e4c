package contract

import (
	"encoding/json"
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// pointer is a parsed RFC 6901 JSON pointer; no tokens: the whole
// document.
type pointer struct {
	tokens []string
}

// parsePointer parses an RFC 6901 pointer: "" or "/"-separated tokens in
// which "~" only appears as "~0" ("~") or "~1" ("/").
func parsePointer(s string) (pointer, error) {
	if s == "" {
		return pointer{}, nil
	}
	if s[0] != '/' {
		return pointer{}, errors.New(`not a JSON pointer: must be empty or start with "/"`)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '~' && (i+1 == len(s) || (s[i+1] != '0' && s[i+1] != '1')) {
			return pointer{}, errors.New(`not a JSON pointer: "~" must be followed by 0 or 1`)
		}
	}
	if !utf8.ValidString(s) {
		return pointer{}, errors.New("not a JSON pointer: invalid UTF-8")
	}
	toks := strings.Split(s[1:], "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return pointer{tokens: toks}, nil
}

// CheckPointer reports whether s is an RFC 6901 JSON pointer, as a
// contract's natural_key and event_time must be.
func CheckPointer(s string) error {
	_, err := parsePointer(s)
	return err
}

// resolve finds the pointer's value in a decoded document. A missing
// member, an index out of range and a JSON null all resolve to nothing.
func (p pointer) resolve(v any) (any, bool) {
	for _, t := range p.tokens {
		switch x := v.(type) {
		case map[string]any:
			v = x[t]
		case []any:
			i, ok := arrayIndex(t)
			if !ok || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, v != nil
}

// arrayIndex parses an RFC 6901 array index: "0" or digits without a
// leading zero.
func arrayIndex(t string) (int, bool) {
	if t == "" || len(t) > 9 || (t[0] == '0' && len(t) > 1) {
		return 0, false
	}
	n := 0
	for i := 0; i < len(t); i++ {
		if t[i] < '0' || t[i] > '9' {
			return 0, false
		}
		n = n*10 + int(t[i]-'0')
	}
	return n, true
}

// key is the dedup key material of a record that passed (see Result.Key).
func (c *Contract) key(doc any, payload []byte) []byte {
	if !c.keyed {
		return nil
	}
	if len(c.natural) == 0 || !c.spec.Unique {
		return payload
	}
	buf := make([]byte, 0, 64)
	buf = append(buf, '[')
	for i, p := range c.natural {
		v, ok := p.resolve(doc)
		if !ok {
			return nil
		}
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendCanonical(buf, v)
	}
	if c.eventTime != nil {
		v, ok := c.eventTime.resolve(doc)
		if !ok {
			return nil
		}
		buf = append(buf, ',')
		buf = appendCanonical(buf, v)
	}
	return append(buf, ']')
}

// appendCanonical appends v, a decoded JSON value, as canonical JSON:
// no insignificant space, object members sorted by name, strings
// escaped one way only, numbers normalised (appendNumber).
func appendCanonical(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...)
	case bool:
		return strconv.AppendBool(dst, x)
	case string:
		return appendString(dst, x)
	case json.Number:
		return appendNumber(dst, string(x))
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendCanonical(dst, e)
		}
		return append(dst, ']')
	case map[string]any:
		dst = append(dst, '{')
		for i, k := range slices.Sorted(maps.Keys(x)) {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			dst = appendCanonical(dst, x[k])
		}
		return append(dst, '}')
	}
	panic("contract: not a decoded JSON value") // decode only makes the types above
}

// appendNumber normalises a JSON number: an integer literal is kept as
// written ("-0" is "0"); any other number that is integral and finite
// in float64 is written as that integer ("1.0", "1e0" → "1"), the rest
// in Go's shortest round-trip form. Integers are therefore compared
// exactly, other numbers as float64 values.
func appendNumber(dst []byte, n string) []byte {
	if isIntLiteral(n) {
		if n == "-0" {
			n = "0"
		}
		return append(dst, n...)
	}
	f, err := strconv.ParseFloat(n, 64)
	if err != nil { // beyond float64's range: keep the text
		return append(dst, n...)
	}
	if f == 0 {
		return append(dst, '0')
	}
	if f == math.Trunc(f) {
		return strconv.AppendFloat(dst, f, 'f', -1, 64)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

func isIntLiteral(n string) bool {
	for i := 0; i < len(n); i++ {
		if c := n[i]; c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

// appendString writes s as a JSON string, escaping only '"', '\\' and
// control characters (as \u00XX).
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
