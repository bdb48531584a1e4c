package contract

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// fastSchemas are schemas within the fast path's subset, each with
// keywords whose edges the differential tests probe.
var fastSchemas = map[string]string{
	"bounds": `{"type":"object","properties":{
		"i":{"type":"integer","minimum":1,"maximum":10},
		"n":{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1.5},
		"big":{"type":"number","maximum":9007199254740993},
		"any":{}}}`,
	"strings": `{"type":"object","required":["s"],"additionalProperties":false,"properties":{
		"s":{"type":"string","minLength":2,"maxLength":4,"pattern":"^[a-zé]+$"},
		"e":{"enum":["a","b"]},"c":{"const":"x"},
		"t":{"type":["string","null"],"format":"date-time"},
		"d":{"type":"string","format":"date"}}}`,
	"arrays": `{"type":"array","minItems":1,"maxItems":3,"items":{"$ref":"#/$defs/item"},
		"$defs":{"item":{"type":"object","required":["k"],"additionalProperties":{"type":"boolean"},
		"properties":{"k":{"type":"integer"},"next":{"$ref":"#/$defs/item"}}}}}`,
}

// schemaPair is a schema compiled both ways.
type schemaPair struct {
	lib  *jsonschema.Schema
	fast *fastNode
}

func loadFast(t testing.TB) map[string]schemaPair {
	t.Helper()
	out := map[string]schemaPair{}
	add := func(name string, doc []byte) {
		lib, err := compileSchema(doc, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
		if err != nil {
			t.Fatal(err)
		}
		fast := compileFast(v)
		if fast == nil {
			t.Fatalf("%s: no fast path", name)
		}
		out[name] = schemaPair{lib, fast}
	}
	for name, doc := range fastSchemas {
		add(name, []byte(doc))
	}
	orders, err := os.ReadFile(filepath.Join("testdata", "orders.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	add("orders", orders)
	return out
}

// agree fails when the fast path accepts what the library refuses.
func agree(t testing.TB, schemas map[string]schemaPair, payload []byte) {
	doc, err := decode(payload)
	if err != nil {
		return
	}
	for name, s := range schemas {
		if s.fast.accepts(doc) {
			if err := s.lib.Validate(doc); err != nil {
				t.Fatalf("%s: the fast path accepts %s, the library refuses it: %v", name, payload, err)
			}
		}
	}
}

// TestFastSchemaEdges: values at every keyword's edge; where the fast
// path accepts, the library must too, and the fast path accepts the
// plainly valid ones (or it would not be a fast path).
func TestFastSchemaEdges(t *testing.T) {
	schemas := loadFast(t)
	for _, tc := range []struct {
		schema, doc string
		fast        bool // the fast path must accept it
	}{
		{"bounds", `{"i":1,"n":0.5,"big":1}`, true},
		{"bounds", `{"i":10}`, true},
		{"bounds", `{"i":1.0}`, false},
		{"bounds", `{"i":0}`, false},
		{"bounds", `{"i":11}`, false},
		{"bounds", `{"i":10.0000000000000000001}`, false},
		{"bounds", `{"i":1e1}`, false},
		{"bounds", `{"n":0}`, false},
		{"bounds", `{"n":1.5}`, false},
		{"bounds", `{"n":1.4999999999999999999}`, false},
		{"bounds", `{"n":0.0000000000000000001}`, false},
		{"bounds", `{"big":9007199254740993}`, false},
		{"bounds", `{"big":9007199254740994}`, false},
		{"bounds", `{"any":[1,{"x":null}]}`, true},
		{"strings", `{"s":"ab"}`, true},
		{"strings", `{"s":"éé"}`, true},
		{"strings", `{"s":"a"}`, false},
		{"strings", `{"s":"abcde"}`, false},
		{"strings", `{"s":"AB"}`, false},
		{"strings", `{"s":"ab","x":1}`, false},
		{"strings", `{"s":"ab","e":"a","c":"x","t":null,"d":"2026-12-05"}`, true},
		{"strings", `{"s":"ab","e":"c"}`, false},
		{"strings", `{"s":"ab","e":true}`, false},
		{"strings", `{"s":"ab","e":null}`, false},
		{"strings", `{"s":"ab","c":"y"}`, false},
		{"strings", `{"s":"ab","t":"2026-12-05T22:00:00Z"}`, true},
		{"strings", `{"s":"ab","t":"2026-13-05T22:00:00Z"}`, false},
		{"strings", `{"s":"ab","t":"yesterday"}`, false},
		{"strings", `{"s":"ab","d":"2026-02-30"}`, false},
		{"strings", `{}`, false},
		{"arrays", `[{"k":1,"b":true,"next":{"k":2}}]`, true},
		{"arrays", `[]`, false},
		{"arrays", `[{"k":1},{"k":2},{"k":3},{"k":4}]`, false},
		{"arrays", `[{"k":1,"b":1}]`, false},
		{"arrays", `[{"k":1,"next":{"k":"2"}}]`, false},
		{"arrays", `{"k":1}`, false},
	} {
		doc, err := decode([]byte(tc.doc))
		if err != nil {
			t.Fatalf("%s: %v", tc.doc, err)
		}
		s := schemas[tc.schema]
		got := s.fast.accepts(doc)
		if got != tc.fast {
			t.Errorf("%s %s: fast path accepts = %v, want %v", tc.schema, tc.doc, got, tc.fast)
		}
		agree(t, map[string]schemaPair{tc.schema: s}, []byte(tc.doc))
	}
}

// TestFastSchemaSubset: a schema with a keyword outside the subset has no
// fast path (the library alone judges it).
func TestFastSchemaSubset(t *testing.T) {
	for _, doc := range []string{
		`{"type":"object","patternProperties":{"^x":{}}}`,
		`{"properties":{"a":{"oneOf":[{"type":"string"}]}}}`,
		`{"$id":"https://example.com/s","type":"object"}`,
		`{"items":[{"type":"string"}]}`,
		`{"properties":{"a":true}}`,
		`{"enum":[1,2]}`,
		`{"$ref":"https://example.com/other.json"}`,
		`{"unevaluatedProperties":false}`,
		`{"$schema":"http://json-schema.org/draft-07/schema#"}`,
	} {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(doc)))
		if err != nil {
			t.Fatal(err)
		}
		if compileFast(v) != nil {
			t.Errorf("%s: compiled a fast path", doc)
		}
	}
}

// FuzzFastSchemaAgrees: for any payload, what the fast path accepts, the
// library accepts (go test -fuzz FuzzFastSchemaAgrees ./internal/contract).
func FuzzFastSchemaAgrees(f *testing.F) {
	for _, s := range []string{
		`{"order_id":"ord-1","amount":1.5,"currency":"EUR","ts":"2026-03-14T09:26:53.589Z","items":[{"sku":"a","qty":1,"price":0.01}],"customer":{"id":1,"tier":"gold"}}`,
		`{"i":5,"n":1.2,"big":3}`, `{"s":"abc","e":"b","t":"2026-12-05T22:00:00+01:00"}`,
		`[{"k":1,"z":false,"next":{"k":3,"next":{"k":4}}}]`, `{"i":1.0,"n":1e-300}`,
	} {
		f.Add([]byte(s))
	}
	schemas := loadFast(f)
	f.Fuzz(func(t *testing.T, payload []byte) {
		agree(t, schemas, payload)
	})
}
