package contract_test

import (
	"bytes"
	"testing"

	"github.com/weir-io/weir/internal/contract"
	"github.com/weir-io/weir/sink"
)

func keyOf(t *testing.T, c *contract.Contract, payload string) []byte {
	t.Helper()
	res := c.Check(&sink.Record{Payload: []byte(payload)})
	if !res.Passed() {
		t.Fatalf("Check(%s) = %+v, want pass", payload, res)
	}
	return res.Key
}

// TestKey checks the key material: its exact encoding, and which
// payloads share a key and which do not.
func TestKey(t *testing.T) {
	tests := []struct {
		name       string
		natural    []string
		eventTime  string
		a, b       string // two payloads
		same       bool   // whether a and b share a key
		wantA      string // the exact key of a; "" skips
		payloadKey bool
	}{
		{name: "string", natural: []string{"/id"}, a: `{"id":"o-1","x":1}`, b: `{"x":2,"id":"o-1"}`, same: true, wantA: `["o-1"]`},
		{name: "different ids", natural: []string{"/id"}, a: `{"id":"o-1"}`, b: `{"id":"o-2"}`},
		{name: "object members sorted", natural: []string{"/k"}, a: `{"k":{"a":1,"b":2}}`, b: `{"k":{"b":2,"a":1}}`, same: true, wantA: `[{"a":1,"b":2}]`},
		{name: "nested objects sorted", natural: []string{"/k"}, a: `{"k":{"z":[{"y":1,"x":2}],"a":null}}`, b: `{"k":{"a":null,"z":[{"x":2,"y":1}]}}`,
			same: true, wantA: `[{"a":null,"z":[{"x":2,"y":1}]}]`},
		{name: "array order matters", natural: []string{"/k"}, a: `{"k":[1,2]}`, b: `{"k":[2,1]}`},
		{name: "1 and 1.0", natural: []string{"/n"}, a: `{"n":1}`, b: `{"n":1.0}`, same: true, wantA: `[1]`},
		{name: "1 and 1e0", natural: []string{"/n"}, a: `{"n":1}`, b: `{"n":1e0}`, same: true},
		{name: "100 and 1E2", natural: []string{"/n"}, a: `{"n":100}`, b: `{"n":1E2}`, same: true},
		{name: "0 and -0", natural: []string{"/n"}, a: `{"n":0}`, b: `{"n":-0.0}`, same: true, wantA: `[0]`},
		{name: "0.50 and 5e-1", natural: []string{"/n"}, a: `{"n":0.50}`, b: `{"n":5e-1}`, same: true, wantA: `[0.5]`},
		{name: "1e20 as integer", natural: []string{"/n"}, a: `{"n":100000000000000000000}`, b: `{"n":1e20}`, same: true},
		{name: "int64 ids exact", natural: []string{"/n"}, a: `{"n":9007199254740993}`, b: `{"n":9007199254740992}`},
		{name: "number is not string", natural: []string{"/n"}, a: `{"n":1}`, b: `{"n":"1"}`},
		{name: "escapes canonical", natural: []string{"/s"}, a: `{"s":"\u00e9\"\n"}`, b: `{"s":"é\"\u000a"}`, same: true, wantA: "[\"é\\\"\\u000a\"]"},
		{name: "composite unambiguous", natural: []string{"/a", "/b"}, a: `{"a":"x\",\"y","b":"z"}`, b: `{"a":"x","b":"y\",\"z"}`},
		{name: "composite", natural: []string{"/a", "/b/0"}, a: `{"a":1,"b":[true]}`, b: `{"b":[true],"a":1}`, same: true, wantA: `[1,true]`},
		{name: "escaped pointer", natural: []string{"/a~1b", "/m~0n"}, a: `{"a/b":1,"m~n":2}`, b: `{"m~n":2,"a/b":1}`, same: true, wantA: `[1,2]`},
		{name: "event time appended", natural: []string{"/id"}, eventTime: "/ts", a: `{"id":"o","ts":"t1"}`, b: `{"id":"o","ts":"t2"}`, wantA: `["o","t1"]`},
		{name: "event time same", natural: []string{"/id"}, eventTime: "/ts", a: `{"id":"o","ts":5}`, b: `{"ts":5.0,"id":"o"}`, same: true},
		{name: "whole document", natural: []string{""}, a: `{"b":1,"a":2}`, b: `{"a":2,"b":1}`, same: true, wantA: `[{"a":2,"b":1}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustCompile(t, contract.Spec{Stream: "s", NaturalKey: tt.natural, EventTime: tt.eventTime, Unique: true})
			ka, kb := keyOf(t, c, tt.a), keyOf(t, c, tt.b)
			if ka == nil || kb == nil {
				t.Fatalf("keys %q, %q: want both set", ka, kb)
			}
			if bytes.Equal(ka, kb) != tt.same {
				t.Fatalf("keys %q and %q: same = %v, want %v", ka, kb, !tt.same, tt.same)
			}
			if tt.wantA != "" && string(ka) != tt.wantA {
				t.Fatalf("key of %s = %s, want %s", tt.a, ka, tt.wantA)
			}
		})
	}
}

// TestKeyAbsent checks that a record lacking a declared field has no key
// (it cannot be deduped) yet passes.
func TestKeyAbsent(t *testing.T) {
	c := mustCompile(t, contract.Spec{Stream: "s", NaturalKey: []string{"/id", "/items/1/sku"}, EventTime: "/ts", Unique: true})
	for _, p := range []string{
		`{"items":[{},{"sku":"a"}],"ts":1}`,           // no /id
		`{"id":null,"items":[{},{"sku":"a"}],"ts":1}`, // null is absent
		`{"id":1,"items":[{"sku":"a"}],"ts":1}`,       // index out of range
		`{"id":1,"items":{"1":{"sku":"a"}},"ts":1}`,   // not an array: a member named "1" is found
		`{"id":1,"items":"ab","ts":1}`,                // a scalar has no members
		`{"id":1,"items":[{},{"sku":"a"}]}`,           // no event time
		`{"id":1,"items":[{},{"sku":"a"}],"ts":null}`, // null event time
		`[{"id":1}]`, // root not an object
	} {
		res := c.Check(&sink.Record{Payload: []byte(p)})
		wantKey := p == `{"id":1,"items":{"1":{"sku":"a"}},"ts":1}`
		if !res.Passed() || (res.Key != nil) != wantKey {
			t.Errorf("Check(%s) = %+v, want passed with key set=%v", p, res, wantKey)
		}
	}
	if k := keyOf(t, c, `{"id":1,"items":[{},{"sku":"a"}],"ts":1}`); string(k) != `[1,"a",1]` {
		t.Fatalf("key = %s, want [1,\"a\",1]", k)
	}
}

// TestKeyKinds checks when Check fills Key at all.
func TestKeyKinds(t *testing.T) {
	const p = `{"id":"o-1","n":2}`
	tests := []struct {
		name  string
		spec  contract.Spec
		keyed bool
		want  string // "" means nil
	}{
		{name: "natural key, unique", spec: contract.Spec{NaturalKey: []string{"/id"}, Unique: true}, keyed: true, want: `["o-1"]`},
		{name: "natural key, not unique", spec: contract.Spec{NaturalKey: []string{"/id"}}},
		{name: "nothing declared", spec: contract.Spec{}},
		{name: "payload unique", spec: contract.Spec{PayloadUnique: true}, keyed: true, want: p},
		{name: "payload unique, key not unique", spec: contract.Spec{NaturalKey: []string{"/id"}, PayloadUnique: true}, keyed: true, want: p},
		{name: "both: natural key first", spec: contract.Spec{NaturalKey: []string{"/id"}, Unique: true, PayloadUnique: true}, keyed: true, want: `["o-1"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.spec.Stream = "s"
			c := mustCompile(t, tt.spec)
			if c.DedupKeyed() != tt.keyed {
				t.Fatalf("DedupKeyed = %v, want %v", c.DedupKeyed(), tt.keyed)
			}
			k := keyOf(t, c, p)
			if (tt.want == "" && k != nil) || string(k) != tt.want {
				t.Fatalf("Key = %q, want %q", k, tt.want)
			}
		})
	}
}
