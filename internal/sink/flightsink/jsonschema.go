package flightsink

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// ArrowFromJSONSchema derives the typed columns of columns =
// "json_schema" from a JSON Schema document (a [[contract]]'s
// schema_file): the top level must be an object with properties, each of
// which becomes a column, in the order of their names. The mapping:
//
//	JSON Schema                               Arrow
//	"type": "string"                          utf8
//	  "format": "date-time"                   timestamp(ns, UTC)
//	  "format": "date"                        date32
//	  "contentEncoding": "base64"             binary
//	"type": "integer"                         int64
//	"type": "number"                          float64
//	"type": "boolean"                         bool
//	"type": "array", "items": S               list<S>
//	"type": "object", "properties": {…}       struct<…> (names in order)
//	"enum" / "const" of one JSON type         that type
//	"type": [T, "null"], "anyOf"/"oneOf" of   T, nullable
//	  T and {"type": "null"}
//	"$ref": "#/$defs/…" or "#/definitions/…"  what it names
//
// A property is nullable unless it is listed in "required" and its type
// does not admit null. Anything else — an object without properties, an
// array without items, a type union other than with null, allOf, a
// remote $ref — is refused with an error naming the property's path.
func ArrowFromJSONSchema(doc []byte) (*arrow.Schema, error) {
	var root map[string]any
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("JSON Schema: %w", err)
	}
	c := jsConv{root: root}
	t, _, err := c.convert(root, "", 0)
	if err != nil {
		return nil, err
	}
	st, ok := t.(*arrow.StructType)
	if !ok {
		return nil, errors.New("JSON Schema: the top level must be an object with properties")
	}
	return arrow.NewSchema(st.Fields(), nil), nil
}

type jsConv struct{ root map[string]any }

// maxDepth bounds $ref chains and nesting (a recursive schema).
const maxDepth = 32

// convert maps schema node s at path to an Arrow type and whether it
// admits null.
func (c jsConv) convert(s map[string]any, path string, depth int) (arrow.DataType, bool, error) {
	where := path
	if where == "" {
		where = "the top level"
	}
	if depth > maxDepth {
		return nil, false, fmt.Errorf("JSON Schema: %s: nested or referenced more than %d deep (a recursive schema has no Arrow type)", where, maxDepth)
	}
	if ref, ok := s["$ref"].(string); ok {
		target, err := c.resolve(ref)
		if err != nil {
			return nil, false, fmt.Errorf("JSON Schema: %s: %w", where, err)
		}
		return c.convert(target, path, depth+1)
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[k].([]any); ok {
			return c.withNull(alts, path, where, depth)
		}
	}
	if _, ok := s["allOf"]; ok {
		return nil, false, fmt.Errorf("JSON Schema: %s: allOf has no Arrow type", where)
	}
	types, nullable, err := typesOf(s)
	if err != nil {
		return nil, false, fmt.Errorf("JSON Schema: %s: %w", where, err)
	}
	if len(types) != 1 {
		return nil, false, fmt.Errorf("JSON Schema: %s: want one type (and null), have %q", where, types)
	}
	switch types[0] {
	case "string":
		switch {
		case s["format"] == "date-time":
			return &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}, nullable, nil
		case s["format"] == "date":
			return arrow.FixedWidthTypes.Date32, nullable, nil
		case s["contentEncoding"] == "base64":
			return arrow.BinaryTypes.Binary, nullable, nil
		}
		return arrow.BinaryTypes.String, nullable, nil
	case "integer":
		return arrow.PrimitiveTypes.Int64, nullable, nil
	case "number":
		return arrow.PrimitiveTypes.Float64, nullable, nil
	case "boolean":
		return arrow.FixedWidthTypes.Boolean, nullable, nil
	case "array":
		items, ok := s["items"].(map[string]any)
		if !ok {
			return nil, false, fmt.Errorf("JSON Schema: %s: an array needs one items schema", where)
		}
		t, n, err := c.convert(items, path+"[]", depth+1)
		if err != nil {
			return nil, false, err
		}
		return arrow.ListOfField(arrow.Field{Name: "item", Type: t, Nullable: n}), nullable, nil
	case "object":
		props, ok := s["properties"].(map[string]any)
		if !ok || len(props) == 0 {
			return nil, false, fmt.Errorf("JSON Schema: %s: an object needs properties to be columns", where)
		}
		required := map[string]bool{}
		if rs, ok := s["required"].([]any); ok {
			for _, r := range rs {
				if name, ok := r.(string); ok {
					required[name] = true
				}
			}
		}
		names := make([]string, 0, len(props))
		for name := range props {
			names = append(names, name)
		}
		slices.Sort(names)
		fields := make([]arrow.Field, 0, len(names))
		for _, name := range names {
			ps, ok := props[name].(map[string]any)
			if !ok {
				return nil, false, fmt.Errorf("JSON Schema: %s/%s: not a schema object", path, name)
			}
			t, n, err := c.convert(ps, path+"/"+name, depth+1)
			if err != nil {
				return nil, false, err
			}
			fields = append(fields, arrow.Field{Name: name, Type: t, Nullable: n || !required[name]})
		}
		return arrow.StructOf(fields...), nullable, nil
	}
	return nil, false, fmt.Errorf("JSON Schema: %s: type %q has no Arrow type", where, types[0])
}

// withNull maps anyOf/oneOf of one schema and {"type": "null"}.
func (c jsConv) withNull(alts []any, path, where string, depth int) (arrow.DataType, bool, error) {
	var other []map[string]any
	nullable := false
	for _, a := range alts {
		m, ok := a.(map[string]any)
		if !ok {
			return nil, false, fmt.Errorf("JSON Schema: %s: an alternative is not a schema object", where)
		}
		if m["type"] == "null" && len(m) == 1 {
			nullable = true
			continue
		}
		other = append(other, m)
	}
	if len(other) != 1 {
		return nil, false, fmt.Errorf("JSON Schema: %s: anyOf/oneOf of %d schemas besides null has no Arrow type", where, len(other))
	}
	t, n, err := c.convert(other[0], path, depth+1)
	return t, n || nullable, err
}

// resolve finds a local reference: "#/$defs/name" or "#/definitions/name".
func (c jsConv) resolve(ref string) (map[string]any, error) {
	if ref == "#" {
		return c.root, nil
	}
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, fmt.Errorf("$ref %q: only references within the document (#/$defs/…) are followed", ref)
	}
	var node any = c.root
	for _, part := range strings.Split(rest, "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := node.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("$ref %q: nothing there", ref)
		}
		node = m[part]
	}
	m, ok := node.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("$ref %q: not a schema object", ref)
	}
	return m, nil
}

// typesOf is the node's JSON types besides null, and whether null is
// one: from "type" (a name or a list), else from "enum" or "const".
func typesOf(s map[string]any) ([]string, bool, error) {
	var names []string
	switch t := s["type"].(type) {
	case string:
		names = []string{t}
	case []any:
		for _, e := range t {
			n, ok := e.(string)
			if !ok {
				return nil, false, fmt.Errorf("type %v is not a name", e)
			}
			names = append(names, n)
		}
	case nil:
		var values []any
		if e, ok := s["enum"].([]any); ok {
			values = e
		} else if v, ok := s["const"]; ok {
			values = []any{v}
		} else {
			return nil, false, errors.New("no type, enum or const")
		}
		for _, v := range values {
			names = append(names, jsonType(v))
		}
	default:
		return nil, false, fmt.Errorf("type %v is not a name or a list", t)
	}
	nullable := slices.Contains(names, "null")
	names = slices.DeleteFunc(names, func(n string) bool { return n == "null" })
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) == 2 && names[0] == "integer" && names[1] == "number" {
		names = []string{"number"}
	}
	return names, nullable, nil
}

// jsonType is the JSON Schema type of a decoded JSON value.
func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	}
	return "object"
}
