package arrowrec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// jsonKind is the kind of a parsed JSON value.
type jsonKind uint8

const (
	jsonNull jsonKind = iota
	jsonBool
	jsonNumber
	jsonString
	jsonArray
	jsonObject
)

func (k jsonKind) String() string {
	return [...]string{"null", "a boolean", "a number", "a string", "an array", "an object"}[k]
}

// jsonValue is a parsed JSON value that keeps the order of an object's
// members (an Arrow map is ordered) and a number's text (an int64 or a
// decimal must not pass through a float64).
type jsonValue struct {
	kind    jsonKind
	b       bool
	text    string // a number's text, or a string's value
	elems   []jsonValue
	members []jsonMember
}

type jsonMember struct {
	name  string
	value jsonValue
}

// member returns the value of the first member named name; nil if none.
func (v *jsonValue) member(name string) *jsonValue {
	for i := range v.members {
		if v.members[i].name == name {
			return &v.members[i].value
		}
	}
	return nil
}

// maxDepth bounds the nesting parseJSON accepts.
const maxDepth = 256

// parseJSON parses one JSON value, with nothing but white space after it.
func parseJSON(b []byte) (jsonValue, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	v, err := parseValue(d, 0)
	if err != nil {
		return jsonValue{}, err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return jsonValue{}, errors.New("more than one JSON value")
	}
	return v, nil
}

func parseValue(d *json.Decoder, depth int) (jsonValue, error) {
	if depth > maxDepth {
		return jsonValue{}, fmt.Errorf("nested deeper than %d", maxDepth)
	}
	t, err := d.Token()
	if err != nil {
		return jsonValue{}, err
	}
	switch t := t.(type) {
	case nil:
		return jsonValue{}, nil
	case bool:
		return jsonValue{kind: jsonBool, b: t}, nil
	case json.Number:
		return jsonValue{kind: jsonNumber, text: string(t)}, nil
	case string:
		return jsonValue{kind: jsonString, text: t}, nil
	case json.Delim:
		switch t {
		case '[':
			v := jsonValue{kind: jsonArray}
			for d.More() {
				e, err := parseValue(d, depth+1)
				if err != nil {
					return jsonValue{}, err
				}
				v.elems = append(v.elems, e)
			}
			_, err := d.Token() // ]
			return v, err
		case '{':
			v := jsonValue{kind: jsonObject}
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return jsonValue{}, err
				}
				e, err := parseValue(d, depth+1)
				if err != nil {
					return jsonValue{}, err
				}
				v.members = append(v.members, jsonMember{name: k.(string), value: e})
			}
			_, err := d.Token() // }
			return v, err
		}
	}
	return jsonValue{}, fmt.Errorf("unexpected JSON token %v", t)
}
