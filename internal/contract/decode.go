package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds nesting, as encoding/json does.
const maxDepth = 10000

// decode parses a payload that must be exactly one JSON value (white
// space around it allowed) into the types encoding/json produces with
// UseNumber — map[string]any, []any, string, json.Number, bool, nil —
// with the same results (FuzzDecode checks it against encoding/json),
// at a fraction of the allocations: the payload is copied once and
// unescaped strings and numbers are slices of the copy.
func decode(p []byte) (any, error) {
	d := decoders.Get().(*decoder)
	defer d.release()
	d.s, d.i = string(p), 0
	d.space()
	if d.i == len(d.s) {
		return nil, errors.New("not JSON: empty payload")
	}
	v, err := d.value(0)
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if d.space(); d.i < len(d.s) {
		return nil, fmt.Errorf("not JSON: invalid character %q after the top-level value at offset %d", d.s[d.i], d.i)
	}
	return v, nil
}

type decoder struct {
	s string
	i int
	// vals and keys hold the elements and members of the containers
	// being parsed, so each container is allocated once, at its size.
	vals []any
	keys []string
}

// decoders keeps decoders' scratch space from one payload to the next.
var decoders = sync.Pool{New: func() any { return new(decoder) }}

// maxScratch is the most scratch space a decoder keeps when released.
const maxScratch = 1024

func (d *decoder) release() {
	d.s = ""
	if cap(d.vals) > maxScratch {
		return // a rare huge payload: let its scratch go
	}
	clear(d.vals[:cap(d.vals)]) // hold no decoded value
	clear(d.keys[:cap(d.keys)]) // nor the payload
	d.vals, d.keys = d.vals[:0], d.keys[:0]
	decoders.Put(d)
}

var errEOF = errors.New("unexpected end of input")

func (d *decoder) space() {
	for d.i < len(d.s) {
		switch d.s[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) invalid(what string) error {
	if d.i >= len(d.s) {
		return errEOF
	}
	return fmt.Errorf("invalid character %q %s at offset %d", d.s[d.i], what, d.i)
}

// value parses the value at d.i, inside depth containers.
func (d *decoder) value(depth int) (any, error) {
	if d.i >= len(d.s) {
		return nil, errEOF
	}
	switch c := d.s[d.i]; {
	case (c == '{' || c == '[') && depth == maxDepth:
		return nil, fmt.Errorf("nested deeper than %d at offset %d", maxDepth, d.i)
	case c == '{':
		return d.object(depth + 1)
	case c == '[':
		return d.array(depth + 1)
	case c == '"':
		return d.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	case d.literal("true"):
		return true, nil
	case d.literal("false"):
		return false, nil
	case d.literal("null"):
		return nil, nil
	}
	return nil, d.invalid("looking for the beginning of a value")
}

// literal consumes lit if it is next.
func (d *decoder) literal(lit string) bool {
	if len(d.s)-d.i < len(lit) || d.s[d.i:d.i+len(lit)] != lit {
		return false
	}
	d.i += len(lit)
	return true
}

func (d *decoder) object(depth int) (any, error) {
	d.i++ // '{'
	base := len(d.vals)
	defer func() { d.vals, d.keys = d.vals[:base], d.keys[:base] }()
	d.space()
	if d.i < len(d.s) && d.s[d.i] == '}' {
		d.i++
		return map[string]any{}, nil
	}
	for {
		if d.space(); d.i >= len(d.s) || d.s[d.i] != '"' {
			return nil, d.invalid("looking for the beginning of a member name")
		}
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		if d.space(); d.i >= len(d.s) || d.s[d.i] != ':' {
			return nil, d.invalid("after a member name")
		}
		d.i++
		d.space()
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		d.keys, d.vals = append(d.keys, k), append(d.vals, v)
		if done, err := d.next('}', "after a member value"); err != nil {
			return nil, err
		} else if done {
			break
		}
	}
	m := make(map[string]any, len(d.vals)-base)
	for j := base; j < len(d.vals); j++ {
		m[d.keys[j]] = d.vals[j] // a repeated name: the last wins
	}
	return m, nil
}

func (d *decoder) array(depth int) (any, error) {
	d.i++ // '['
	base := len(d.vals)
	defer func() { d.vals, d.keys = d.vals[:base], d.keys[:base] }()
	d.space()
	if d.i < len(d.s) && d.s[d.i] == ']' {
		d.i++
		return []any{}, nil
	}
	for {
		d.space()
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		d.keys, d.vals = append(d.keys, ""), append(d.vals, v)
		if done, err := d.next(']', "after an array element"); err != nil {
			return nil, err
		} else if done {
			break
		}
	}
	return append([]any(nil), d.vals[base:]...), nil
}

// next consumes a ',' (false) or the closing byte (true).
func (d *decoder) next(closing byte, what string) (bool, error) {
	d.space()
	if d.i < len(d.s) {
		switch d.s[d.i] {
		case ',':
			d.i++
			return false, nil
		case closing:
			d.i++
			return true, nil
		}
	}
	return false, d.invalid(what)
}

// str parses a string at d.i ('"'): a slice of the payload when it has
// no escapes and is valid UTF-8, else unquoted.
func (d *decoder) str() (string, error) {
	start := d.i + 1
	j := start
	for ; j < len(d.s); j++ {
		c := d.s[j]
		if c == '"' {
			s := d.s[start:j]
			d.i = j + 1
			if utf8.ValidString(s) {
				return s, nil
			}
			return string([]rune(s)), nil // invalid bytes become U+FFFD, as encoding/json does
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			d.i = j
			return "", d.invalid("in a string literal")
		}
	}
	return d.unquote(start, j)
}

// unquote decodes a string with escapes from start, just after the '"';
// the first '\\' is at or before end.
func (d *decoder) unquote(start, end int) (string, error) {
	b := make([]byte, 0, end-start+16)
	for j := start; j < len(d.s); {
		switch c := d.s[j]; {
		case c == '"':
			d.i = j + 1
			return string(b), nil
		case c == '\\':
			var err error
			if b, j, err = d.escape(b, j); err != nil {
				return "", err
			}
		case c < 0x20:
			d.i = j
			return "", d.invalid("in a string literal")
		case c < utf8.RuneSelf:
			b = append(b, c)
			j++
		default:
			r, size := utf8.DecodeRuneInString(d.s[j:])
			b = utf8.AppendRune(b, r) // RuneError for an invalid byte
			j += size
		}
	}
	d.i = len(d.s)
	return "", errEOF
}

// escape appends the escape sequence at j ('\\') and returns the index
// after it.
func (d *decoder) escape(b []byte, j int) ([]byte, int, error) {
	if j+1 >= len(d.s) {
		d.i = len(d.s)
		return nil, 0, errEOF
	}
	switch c := d.s[j+1]; c {
	case '"', '\\', '/':
		return append(b, c), j + 2, nil
	case 'b':
		return append(b, '\b'), j + 2, nil
	case 'f':
		return append(b, '\f'), j + 2, nil
	case 'n':
		return append(b, '\n'), j + 2, nil
	case 'r':
		return append(b, '\r'), j + 2, nil
	case 't':
		return append(b, '\t'), j + 2, nil
	case 'u':
		r, ok := hex4(d.s, j+2)
		if !ok {
			d.i = min(j+2, len(d.s))
			return nil, 0, d.invalid("in a \\u escape")
		}
		j += 6
		if utf16.IsSurrogate(r) {
			if r2, ok := hex4(d.s, j+2); ok && d.s[j] == '\\' && d.s[j+1] == 'u' {
				if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
					return utf8.AppendRune(b, dec), j + 6, nil
				}
			}
			r = utf8.RuneError
		}
		return utf8.AppendRune(b, r), j, nil
	}
	d.i = j + 1
	return nil, 0, d.invalid("in a string escape")
}

// hex4 parses the four hex digits at s[i:].
func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[i : i+4]) {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number parses the JSON number grammar at d.i:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (d *decoder) number() (any, error) {
	start := d.i
	if d.s[d.i] == '-' {
		d.i++
	}
	switch {
	case d.i < len(d.s) && d.s[d.i] == '0':
		d.i++
	case !d.digits():
		return nil, d.invalid("in a numeric literal")
	}
	if d.i < len(d.s) && d.s[d.i] == '.' {
		d.i++
		if !d.digits() {
			return nil, d.invalid("after a decimal point in a numeric literal")
		}
	}
	if d.i < len(d.s) && (d.s[d.i] == 'e' || d.s[d.i] == 'E') {
		d.i++
		if d.i < len(d.s) && (d.s[d.i] == '+' || d.s[d.i] == '-') {
			d.i++
		}
		if !d.digits() {
			return nil, d.invalid("in the exponent of a numeric literal")
		}
	}
	return json.Number(d.s[start:d.i]), nil
}

// digits consumes [0-9]+ and reports whether there was one.
func (d *decoder) digits() bool {
	start := d.i
	for d.i < len(d.s) && d.s[d.i] >= '0' && d.s[d.i] <= '9' {
		d.i++
	}
	return d.i > start
}
