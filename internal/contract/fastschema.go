package contract

// A fast path for the schema check. Most records pass their contract, and
// most schemas use a handful of keywords; the library validator
// (santhosh-tekuri/jsonschema) is general and pays for its generality on
// every record — it was most of a contract's cost. A schema written only
// with the keywords below is also compiled into a fastNode tree, and a
// record the tree accepts is accepted without the library. A record the
// tree does not accept — invalid, or a case the tree does not decide (an
// integer written as 1.0, a number too close to a bound for float64) —
// goes to the library, which gives the verdict and the message. So the
// one property the fast path must have is: what it accepts, the library
// accepts (FuzzFastSchemaAgrees checks it against the library). A schema
// with any other keyword has no fast path.
//
// Keywords: type, properties, required, additionalProperties (false, true
// or a schema), items (a schema), minItems, maxItems, enum of strings,
// const string, minLength, maxLength, pattern, minimum, maximum,
// exclusiveMinimum, exclusiveMaximum, format (checked by the library on
// the string alone, with a one-keyword schema compiled the same way), $ref
// to "#/$defs/<name>" or "#/definitions/<name>", and the annotations
// title, description, $comment, $schema (draft 2019-09 or 2020-12),
// examples, default, deprecated, readOnly, writeOnly, $defs and
// definitions.

import (
	"encoding/json"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// JSON types as a bit set.
const (
	tObject uint8 = 1 << iota
	tArray
	tString
	tNumber
	tInteger
	tBoolean
	tNull
)

var typeBits = map[string]uint8{"object": tObject, "array": tArray, "string": tString, "number": tNumber,
	"integer": tInteger, "boolean": tBoolean, "null": tNull}

type fastNode struct {
	types    uint8 // 0: any
	required []string
	props    map[string]*fastNode
	// additional: nil with addlFalse unset accepts any other member;
	// addlFalse refuses any; else every other member must pass it.
	additional *fastNode
	addlFalse  bool
	items      *fastNode
	minItems   int
	maxItems   int // -1: none
	enum       []string
	hasEnum    bool
	minLen     int
	maxLen     int // -1: none
	pattern    *regexp.Regexp
	// bounds: lo/hi with exclusivity, NaN when absent.
	min, max, exMin, exMax float64
	format                 *jsonschema.Schema
	ref                    string    // "#/$defs/name", resolved into refNode
	refNode                *fastNode // set after the whole tree is built
}

// fastCompiler builds fastNodes from a schema document (as
// jsonschema.UnmarshalJSON reads it).
type fastCompiler struct {
	root    map[string]any
	defs    map[string]*fastNode
	pending []*fastNode
	formats map[string]*jsonschema.Schema
}

// compileFast returns the fast path of a schema document, or nil when it
// uses anything outside the subset.
func compileFast(doc any) *fastNode {
	root, ok := doc.(map[string]any)
	if !ok {
		return nil
	}
	if s, ok := root["$schema"]; ok {
		if s != "https://json-schema.org/draft/2020-12/schema" && s != "https://json-schema.org/draft/2019-09/schema" {
			return nil
		}
	}
	c := &fastCompiler{root: root, defs: map[string]*fastNode{}, formats: map[string]*jsonschema.Schema{}}
	n := c.node(root)
	if n == nil {
		return nil
	}
	// Resolving a $ref compiles its definition, which may add more.
	for i := 0; i < len(c.pending); i++ {
		p := c.pending[i]
		if p.refNode = c.resolve(p.ref); p.refNode == nil {
			return nil
		}
	}
	return n
}

func (c *fastCompiler) resolve(ref string) *fastNode {
	if n, ok := c.defs[ref]; ok {
		return n
	}
	var section, name string
	switch {
	case strings.HasPrefix(ref, "#/$defs/"):
		section, name = "$defs", ref[len("#/$defs/"):]
	case strings.HasPrefix(ref, "#/definitions/"):
		section, name = "definitions", ref[len("#/definitions/"):]
	default:
		return nil
	}
	if strings.ContainsAny(name, "/~%") {
		return nil
	}
	defs, ok := c.root[section].(map[string]any)
	if !ok {
		return nil
	}
	d, ok := defs[name].(map[string]any)
	if !ok {
		return nil
	}
	n := newFastNode()
	c.defs[ref] = n // before compiling: a recursive $ref finds it
	if !c.fill(n, d) {
		return nil
	}
	return n
}

var annotations = map[string]bool{"title": true, "description": true, "$comment": true, "$schema": true, "examples": true,
	"default": true, "deprecated": true, "readOnly": true, "writeOnly": true, "$defs": true, "definitions": true}

func newFastNode() *fastNode {
	return &fastNode{maxItems: -1, maxLen: -1, min: math.NaN(), max: math.NaN(), exMin: math.NaN(), exMax: math.NaN()}
}

// node compiles the schema object s; nil when it is outside the subset.
func (c *fastCompiler) node(s map[string]any) *fastNode {
	n := newFastNode()
	if !c.fill(n, s) {
		return nil
	}
	return n
}

// fill compiles the schema object s into n; false when it is outside the
// subset.
func (c *fastCompiler) fill(n *fastNode, s map[string]any) bool {
	for k, v := range s {
		ok := true
		switch k {
		case "type":
			ok = c.types(n, v)
		case "properties":
			m, isMap := v.(map[string]any)
			ok = isMap
			n.props = make(map[string]*fastNode, len(m))
			for name, sub := range m {
				sm, isMap := sub.(map[string]any)
				if !isMap {
					return false
				}
				if n.props[name] = c.node(sm); n.props[name] == nil {
					return false
				}
			}
		case "required":
			arr, isArr := v.([]any)
			ok = isArr
			for _, r := range arr {
				s, isStr := r.(string)
				if !isStr {
					return false
				}
				n.required = append(n.required, s)
			}
		case "additionalProperties":
			switch a := v.(type) {
			case bool:
				n.addlFalse = !a
			case map[string]any:
				n.additional = c.node(a)
				ok = n.additional != nil
			default:
				ok = false
			}
		case "items":
			m, isMap := v.(map[string]any)
			ok = isMap
			if ok {
				n.items = c.node(m)
				ok = n.items != nil
			}
		case "minItems":
			n.minItems, ok = count(v)
		case "maxItems":
			n.maxItems, ok = count(v)
		case "minLength":
			n.minLen, ok = count(v)
		case "maxLength":
			n.maxLen, ok = count(v)
		case "enum":
			arr, isArr := v.([]any)
			ok = isArr
			n.hasEnum = true
			for _, e := range arr {
				s, isStr := e.(string)
				if !isStr {
					return false
				}
				n.enum = append(n.enum, s)
			}
		case "const":
			s, isStr := v.(string)
			ok = isStr
			n.hasEnum, n.enum = true, []string{s}
		case "pattern":
			p, isStr := v.(string)
			ok = isStr
			if ok {
				re, err := regexp.Compile(p)
				ok = err == nil
				n.pattern = re
			}
		case "minimum":
			n.min, ok = bound(v)
		case "maximum":
			n.max, ok = bound(v)
		case "exclusiveMinimum":
			n.exMin, ok = bound(v)
		case "exclusiveMaximum":
			n.exMax, ok = bound(v)
		case "format":
			f, isStr := v.(string)
			ok = isStr
			if ok {
				n.format = c.formatSchema(f)
				ok = n.format != nil
			}
		case "$ref":
			r, isStr := v.(string)
			ok = isStr
			n.ref = r
			c.pending = append(c.pending, n)
		default:
			ok = annotations[k]
		}
		if !ok {
			return false
		}
	}
	return true
}

func (c *fastCompiler) types(n *fastNode, v any) bool {
	add := func(t any) bool {
		s, ok := t.(string)
		if !ok || typeBits[s] == 0 {
			return false
		}
		n.types |= typeBits[s]
		return true
	}
	if arr, ok := v.([]any); ok {
		for _, t := range arr {
			if !add(t) {
				return false
			}
		}
		return len(arr) > 0
	}
	return add(v)
}

// formatSchema is {"format": f} compiled as the contract's schema is.
func (c *fastCompiler) formatSchema(f string) *jsonschema.Schema {
	if s, ok := c.formats[f]; ok {
		return s
	}
	doc, err := json.Marshal(map[string]any{"format": f})
	if err != nil {
		return nil
	}
	s, err := compileSchema(doc, "")
	if err != nil {
		return nil
	}
	c.formats[f] = s
	return s
}

// count reads a non-negative integer keyword value.
func count(v any) (int, bool) {
	f, ok := bound(v)
	if !ok || f < 0 || f != math.Trunc(f) || f > math.MaxInt32 {
		return 0, false
	}
	return int(f), true
}

// bound reads a numeric keyword value (jsonschema.UnmarshalJSON gives
// json.Number).
func bound(v any) (float64, bool) {
	num, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// accepts reports whether v surely passes n; false means "ask the
// library".
func (n *fastNode) accepts(v any) bool {
	if n.refNode != nil && !n.refNode.accepts(v) {
		return false
	}
	if n.hasEnum {
		// An enum or const of strings: only a string can pass it.
		s, ok := v.(string)
		return ok && (n.types == 0 || n.types&tString != 0) && n.str(s)
	}
	switch x := v.(type) {
	case map[string]any:
		if n.types != 0 && n.types&tObject == 0 {
			return false
		}
		return n.object(x)
	case []any:
		if n.types != 0 && n.types&tArray == 0 {
			return false
		}
		return n.array(x)
	case string:
		if n.types != 0 && n.types&tString == 0 {
			return false
		}
		return n.str(x)
	case json.Number:
		return n.number(x)
	case bool:
		return n.types == 0 || n.types&tBoolean != 0
	case nil:
		return n.types == 0 || n.types&tNull != 0
	}
	return false
}

func (n *fastNode) object(m map[string]any) bool {
	for _, r := range n.required {
		if _, ok := m[r]; !ok {
			return false
		}
	}
	for k, v := range m {
		if p, ok := n.props[k]; ok {
			if !p.accepts(v) {
				return false
			}
			continue
		}
		if n.addlFalse || n.additional != nil && !n.additional.accepts(v) {
			return false
		}
	}
	return true
}

func (n *fastNode) array(a []any) bool {
	if len(a) < n.minItems || n.maxItems >= 0 && len(a) > n.maxItems {
		return false
	}
	if n.items != nil {
		for _, v := range a {
			if !n.items.accepts(v) {
				return false
			}
		}
	}
	return true
}

func (n *fastNode) str(s string) bool {
	if n.minLen > 0 || n.maxLen >= 0 {
		l := utf8.RuneCountInString(s)
		if l < n.minLen || n.maxLen >= 0 && l > n.maxLen {
			return false
		}
	}
	if n.hasEnum {
		found := false
		for _, e := range n.enum {
			if e == s {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if n.pattern != nil && !n.pattern.MatchString(s) {
		return false
	}
	if n.format != nil && n.format.Validate(s) != nil {
		return false
	}
	return true
}

func (n *fastNode) number(num json.Number) bool {
	integral := !strings.ContainsAny(string(num), ".eE")
	switch {
	case n.types == 0 || n.types&tNumber != 0:
	case n.types&tInteger != 0 && integral:
	default:
		return false // not a number here, or an integer the library must judge (1.0)
	}
	if math.IsNaN(n.min) && math.IsNaN(n.max) && math.IsNaN(n.exMin) && math.IsNaN(n.exMax) {
		return true
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil || math.IsInf(f, 0) {
		return false
	}
	// A literal equal to a bound in float64 is decided here only when it
	// is an integer of at most 15 digits, which float64 holds exactly.
	exact := integral && len(strings.TrimPrefix(string(num), "-")) <= 15
	return above(f, n.min, false, exact) && above(f, n.exMin, true, exact) && below(f, n.max, false, exact) && below(f, n.exMax, true, exact)
}

// above and below compare a record's number with a bound in float64, and
// accept only when the two are far enough apart that rounding cannot
// have decided it (the library compares exactly); a value equal to an
// inclusive bound is accepted only when both are exact integers (exact:
// the record's literal is one float64 holds exactly).
func above(f, lo float64, exclusive, exact bool) bool {
	if math.IsNaN(lo) {
		return true
	}
	if f-lo > margin(lo) {
		return true
	}
	return f == lo && !exclusive && exact && exactInt(lo)
}

func below(f, hi float64, exclusive, exact bool) bool {
	if math.IsNaN(hi) {
		return true
	}
	if hi-f > margin(hi) {
		return true
	}
	return f == hi && !exclusive && exact && exactInt(hi)
}

func margin(b float64) float64 { return 1e-9 * math.Max(1, math.Abs(b)) }

func exactInt(f float64) bool { return f == math.Trunc(f) && math.Abs(f) < 1<<53 }
