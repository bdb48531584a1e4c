package httpin

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// A hand-written reader of the record objects of a body (NDJSON lines and
// JSON array elements). It checks JSON's grammar (RFC 8259) as strictly
// as encoding/json does and reads a record without reflection or copies:
// a payload given as a JSON value is a slice of the body, a key or header
// value without escapes is one too. A string with escapes, or with bytes
// that are not UTF-8, is read by encoding/json, so its value is exactly
// the one encoding/json gives (invalid UTF-8 becomes U+FFFD).
//
// Stricter than encoding/json's struct decoding in two ways, both said in
// docs/http.md: a field name is matched exactly (encoding/json also takes
// "Payload"), and a field given twice refuses the record (encoding/json
// keeps the last).

// maxDepth bounds the nesting of a payload's JSON value (encoding/json's
// own bound).
const maxDepth = 10000

// errSyntax is a body that is not JSON; scanErr says where.
var errSyntax = errors.New("invalid JSON")

// scanErr is a syntax error at offset off of the scanned value.
type scanErr struct {
	off int
	msg string
}

func (e *scanErr) Error() string { return fmt.Sprintf("offset %d: %s", e.off, e.msg) }
func (e *scanErr) Unwrap() error { return errSyntax }

func syntaxAt(off int, format string, args ...any) error {
	return &scanErr{off: off, msg: fmt.Sprintf(format, args...)}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpace returns the offset of the first byte at or after i that is
// not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipValue returns the end of the JSON value starting at b[i] (no
// leading whitespace).
func skipValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return i, syntaxAt(i, "unexpected end of JSON input")
	}
	switch c := b[i]; {
	case c == '"':
		end, _, err := skipString(b, i)
		return end, err
	case c == '{' || c == '[':
		if depth >= maxDepth {
			return i, syntaxAt(i, "exceeded max depth")
		}
		return skipComposite(b, i, depth+1)
	case c == '-' || (c >= '0' && c <= '9'):
		return skipNumber(b, i)
	case c == 't':
		return skipLiteral(b, i, "true")
	case c == 'f':
		return skipLiteral(b, i, "false")
	case c == 'n':
		return skipLiteral(b, i, "null")
	default:
		return i, syntaxAt(i, "invalid character %q looking for beginning of value", c)
	}
}

// skipComposite reads an object or an array starting at b[i].
func skipComposite(b []byte, i, depth int) (int, error) {
	object := b[i] == '{'
	closer := byte(']')
	if object {
		closer = '}'
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == closer {
		return i + 1, nil
	}
	for {
		var err error
		if object {
			if i >= len(b) || b[i] != '"' {
				return i, syntaxAt(i, "looking for beginning of object key string")
			}
			if i, _, err = skipString(b, i); err != nil {
				return i, err
			}
			i = skipSpace(b, i)
			if i >= len(b) || b[i] != ':' {
				return i, syntaxAt(i, "after object key: want ':'")
			}
			i = skipSpace(b, i+1)
		}
		if i, err = skipValue(b, i, depth); err != nil {
			return i, err
		}
		i = skipSpace(b, i)
		switch {
		case i >= len(b):
			return i, syntaxAt(i, "unexpected end of JSON input")
		case b[i] == ',':
			i = skipSpace(b, i+1)
		case b[i] == closer:
			return i + 1, nil
		default:
			return i, syntaxAt(i, "invalid character %q after element", b[i])
		}
	}
}

// skipString reads the string starting at b[i] (its opening quote): its
// end (after the closing quote), and whether it can be taken as it is —
// no escape, every byte UTF-8.
func skipString(b []byte, i int) (end int, plain bool, err error) {
	plain = true
	ascii := true
	for j := i + 1; j < len(b); j++ {
		// Eight bytes at a time while none of them ends the string, starts
		// an escape, is a control character or is not ASCII.
		for j+8 <= len(b) && !special8(binary.LittleEndian.Uint64(b[j:])) {
			j += 8
		}
		if j >= len(b) {
			break
		}
		switch c := b[j]; {
		case c == '"':
			if !ascii && !utf8.Valid(b[i+1:j]) {
				plain = false
			}
			return j + 1, plain, nil
		case c == '\\':
			plain = false
			j++
			if j >= len(b) {
				return j, false, syntaxAt(j, "unexpected end of JSON input")
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) {
					return j, false, syntaxAt(j, "unexpected end of JSON input")
				}
				for k := j + 1; k <= j+4; k++ {
					if !isHex(b[k]) {
						return k, false, syntaxAt(k, "invalid character %q in \\u hexadecimal character escape", b[k])
					}
				}
				j += 4
			default:
				return j, false, syntaxAt(j, "invalid character %q in string escape code", b[j])
			}
		case c < 0x20:
			return j, false, syntaxAt(j, "invalid character %q in string literal", c)
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return len(b), false, syntaxAt(len(b), "unexpected end of JSON input")
}

// special8 says whether any of the eight bytes of x is '"', '\\', below
// 0x20 or 0x80 and above (SWAR: a byte is zero in x^c when it equals c).
func special8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	zero := func(v uint64) uint64 { return (v - ones) &^ v & highs }
	return (zero(x^(ones*'"')) | zero(x^(ones*'\\')) | ((x - ones*0x20) &^ x & highs) | x&highs) != 0
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// skipNumber reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func skipNumber(b []byte, i int) (int, error) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && isDigit(b[i]):
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return i, syntaxAt(i, "in numeric literal: want a digit")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return i, syntaxAt(i, "after decimal point in numeric literal: want a digit")
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return i, syntaxAt(i, "in exponent of numeric literal: want a digit")
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, nil
}

func skipLiteral(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, syntaxAt(i, "invalid literal, want %s", lit)
	}
	return i + len(lit), nil
}

// stringValue is the value of the JSON string v (quotes included): v's
// own bytes when plain, else encoding/json's reading of it.
func stringValue(v []byte, plain bool) ([]byte, error) {
	if plain {
		return v[1 : len(v)-1], nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, err
	}
	return []byte(s), nil
}

// readString reads the string starting at b[i]: its value and its end.
func readString(b []byte, i int) (v []byte, end int, err error) {
	end, plain, err := skipString(b, i)
	if err != nil {
		return nil, end, err
	}
	v, err = stringValue(b[i:end], plain)
	return v, end, err
}

// field is one member of a record object.
type field int

const (
	fieldPayload field = iota
	fieldPayloadBase64
	fieldKey
	fieldHeaders
	fieldEventTime
	nFields
)

var fieldNames = [nFields]string{"payload", "payload_base64", "key", "headers", "event_time"}

func fieldOf(name []byte) (field, bool) {
	for f, n := range fieldNames {
		if string(name) == n {
			return field(f), true
		}
	}
	return 0, false
}

// member is a field's value as found: its JSON text and, for a string,
// whether it can be taken as it is.
type member struct {
	raw   []byte // nil: absent
	plain bool
}

// scanObject reads b, one JSON object and nothing else but whitespace,
// into its record fields.
func scanObject(b []byte) (ms [nFields]member, err error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		if i < len(b) {
			if _, verr := skipValue(b, i, 0); verr != nil {
				return ms, verr
			}
		}
		return ms, errors.New("not a JSON object")
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			if i >= len(b) || b[i] != '"' {
				return ms, syntaxAt(i, "looking for beginning of object key string")
			}
			name, kend, err := readString(b, i)
			if err != nil {
				return ms, err
			}
			i = skipSpace(b, kend)
			if i >= len(b) || b[i] != ':' {
				return ms, syntaxAt(i, "after object key: want ':'")
			}
			i = skipSpace(b, i+1)
			vstart := i
			plain := false
			if i < len(b) && b[i] == '"' {
				i, plain, err = skipString(b, i)
			} else {
				i, err = skipValue(b, i, 0)
			}
			if err != nil {
				return ms, err
			}
			f, ok := fieldOf(name)
			if !ok {
				return ms, fmt.Errorf("unknown field %q", name)
			}
			if ms[f].raw != nil {
				return ms, fmt.Errorf("field %q given twice", name)
			}
			ms[f] = member{raw: b[vstart:i], plain: plain}
			i = skipSpace(b, i)
			if i >= len(b) {
				return ms, syntaxAt(i, "unexpected end of JSON input")
			}
			if b[i] == '}' {
				i++
				break
			}
			if b[i] != ',' {
				return ms, syntaxAt(i, "invalid character %q after object key:value pair", b[i])
			}
			i = skipSpace(b, i+1)
		}
	}
	if i = skipSpace(b, i); i < len(b) {
		return ms, errAfterObject
	}
	return ms, nil
}

// errAfterObject is more than one value where one record object belongs.
var errAfterObject = errors.New("data after the record object")

// isNull says whether a member is absent or JSON null.
func (m member) isNull() bool { return m.raw == nil || string(m.raw) == "null" }

// str reads a member that must be a JSON string (or null: ok false).
func (m member) str() (v []byte, ok bool, err error) {
	if m.isNull() {
		return nil, false, nil
	}
	if m.raw[0] != '"' {
		return nil, false, errors.New("must be a string")
	}
	v, err = stringValue(m.raw, m.plain)
	return v, err == nil, err
}

// scanHeaders reads a JSON object of string values, keeping its order
// (names may repeat).
func scanHeaders(b []byte, each func(name, value []byte)) error {
	errShape := errors.New("must be an object of string values")
	if len(b) == 0 || b[0] != '{' {
		return errShape
	}
	i := skipSpace(b, 1)
	if i < len(b) && b[i] == '}' {
		return nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return errShape
		}
		name, kend, err := readString(b, i)
		if err != nil {
			return err
		}
		i = skipSpace(b, kend)
		if i >= len(b) || b[i] != ':' {
			return errShape
		}
		i = skipSpace(b, i+1)
		if i >= len(b) || b[i] != '"' {
			return fmt.Errorf("%q: must be a string", name)
		}
		value, vend, err := readString(b, i)
		if err != nil {
			return err
		}
		each(name, value)
		i = skipSpace(b, vend)
		if i >= len(b) {
			return errShape
		}
		if b[i] == '}' {
			return nil
		}
		if b[i] != ',' {
			return errShape
		}
		i = skipSpace(b, i+1)
	}
}
