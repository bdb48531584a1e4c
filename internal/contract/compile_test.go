package contract_test

import (
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/contract"
	"github.com/weir-io/weir/sink"
)

// TestCompileRefusals checks every refusal and that its error names the
// stream and the field at fault.
func TestCompileRefusals(t *testing.T) {
	schema := func(name string) contract.Spec {
		return contract.Spec{Schema: readSchema(t, name), SchemaPath: name}
	}
	rule := func(name, expr string, sev contract.Severity) contract.Spec {
		return contract.Spec{Rules: []contract.Rule{{Name: name, Expr: expr, Severity: sev}}}
	}
	tests := []struct {
		name string
		spec contract.Spec
		want []string // substrings, in order
	}{
		{name: "schema not JSON", spec: schema("not-json.schema.json"), want: []string{"schema not-json.schema.json: not JSON"}},
		{name: "schema without a path", spec: contract.Spec{Schema: []byte("[")}, want: []string{"schema: not JSON"}},
		{name: "bad keyword", spec: schema("bad-keyword.schema.json"),
			want: []string{"schema bad-keyword.schema.json: ", "/properties/amount/type"}},
		{name: "remote $ref", spec: schema("remote-ref.schema.json"),
			want: []string{"schema remote-ref.schema.json: ", "https://schemas.example.com/customer.json", "not loaded"}},
		{name: "file $ref", spec: schema("file-ref.schema.json"),
			want: []string{"schema file-ref.schema.json: ", "customer.schema.json", "not loaded"}},
		{name: "draft 7", spec: schema("draft7.schema.json"), want: []string{"schema draft7.schema.json: draft 7 is not supported"}},
		{name: "CEL syntax", spec: rule("positive_amount", "record.amount >", contract.Fail),
			want: []string{`rule "positive_amount": ERROR: <input>:1:16: Syntax error`}},
		{name: "CEL undeclared", spec: rule("positive_amount", "amount > 0", contract.Fail),
			want: []string{`rule "positive_amount": ERROR: <input>:1:1: undeclared reference to 'amount'`}},
		{name: "CEL int", spec: rule("sum", "record.amount + 1", contract.Warn), want: []string{`rule "sum": record.amount + 1: evaluates to int, want bool`}},
		{name: "CEL dyn", spec: rule("active", "record.active", contract.Fail), want: []string{`rule "active": record.active: evaluates to dyn, want bool`}},
		{name: "CEL string", spec: rule("h", "headers['x']", contract.Fail), want: []string{`rule "h": `, "evaluates to string, want bool"}},
		{name: "empty expr", spec: rule("e", "", contract.Fail), want: []string{`rule "e": ERROR`}},
		{name: "empty rule name", spec: rule("", "true", contract.Fail), want: []string{"rule 1: name is empty"}},
		{name: "reserved decode", spec: rule("decode", "true", contract.Fail), want: []string{`rule "decode": the name is reserved`}},
		{name: "reserved schema", spec: rule("schema", "true", contract.Fail), want: []string{`rule "schema": the name is reserved`}},
		{name: "bad severity", spec: rule("r", "true", contract.Severity(7)), want: []string{`rule "r": unknown severity 7`}},
		{name: "duplicate rule", spec: contract.Spec{Rules: []contract.Rule{{Name: "a", Expr: "true"}, {Name: "b", Expr: "true"}, {Name: "a", Expr: "false"}}},
			want: []string{`rule "a": name used twice`}},
		{name: "pointer without slash", spec: contract.Spec{NaturalKey: []string{"/id", "order_id"}, Unique: true},
			want: []string{`natural_key[1] "order_id": not a JSON pointer`}},
		{name: "pointer bad escape", spec: contract.Spec{NaturalKey: []string{"/a~2b"}, Unique: true},
			want: []string{`natural_key[0] "/a~2b": not a JSON pointer: "~" must be followed by 0 or 1`}},
		{name: "pointer trailing tilde", spec: contract.Spec{NaturalKey: []string{"/a~"}},
			want: []string{`natural_key[0] "/a~": not a JSON pointer`}},
		{name: "event time pointer", spec: contract.Spec{NaturalKey: []string{"/id"}, EventTime: "ts"},
			want: []string{`event_time "ts": not a JSON pointer`}},
		{name: "unique without key", spec: contract.Spec{Unique: true}, want: []string{"unique: declared without a natural_key"}},
		{name: "header value without header", spec: contract.Spec{HeaderValue: "order"}, want: []string{"header_value without header"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.spec.Stream = "orders"
			_, err := contract.Compile(tt.spec)
			if err == nil {
				t.Fatal("Compile succeeded")
			}
			want := append([]string{`contract for stream "orders": `}, tt.want...)
			msg := err.Error()
			for _, w := range want {
				i := strings.Index(msg, w)
				if i < 0 {
					t.Fatalf("error %q\nlacks (in order) %q", err, w)
				}
				msg = msg[i+len(w):]
			}
		})
	}
	if _, err := contract.Compile(contract.Spec{}); err == nil || !strings.Contains(err.Error(), "stream is empty") {
		t.Fatalf("Compile without a stream: %v", err)
	}
}

// TestCompileAccepts checks the drafts and shapes Compile takes.
func TestCompileAccepts(t *testing.T) {
	for _, s := range []contract.Spec{
		{Schema: readSchema(t, "orders.schema.json")},
		{Schema: readSchema(t, "orders-2019.schema.json")},
		{Schema: []byte(`{"type":"object"}`)}, // no $schema: 2020-12
		{Schema: []byte(`true`)},
		{NaturalKey: []string{"", "/", "/a/0/~0~1"}, EventTime: "/ts", Unique: true},
		{Rules: []contract.Rule{{Name: "t", Expr: "true"}, {Name: "h", Expr: "size(headers) >= 0 && key != 'x'", Severity: contract.Warn}}},
	} {
		s.Stream = "s"
		if _, err := contract.Compile(s); err != nil {
			t.Errorf("Compile: %v", err)
		}
	}
}

func TestNameSpecMatches(t *testing.T) {
	spec := ordersSpec(t)
	spec.Header, spec.HeaderValue = "type", "order"
	c := mustCompile(t, spec)
	if c.Name() != "orders@3" {
		t.Fatalf("Name = %q", c.Name())
	}
	got := c.Spec()
	got.Rules[0].Expr = "false" // a copy: the contract keeps its own
	if c.Spec().Rules[0].Expr != fiveRules[0].Expr || c.Spec().Stream != "orders" {
		t.Fatalf("Spec() shares or loses state: %+v", c.Spec())
	}
	if n := mustCompile(t, contract.Spec{Stream: "socket"}).Name(); n != "socket@0" {
		t.Fatalf("Name without version = %q", n)
	}
	h := func(kv ...string) *sink.Record {
		r := &sink.Record{}
		for i := 0; i < len(kv); i += 2 {
			r.Headers = append(r.Headers, sink.Header{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return r
	}
	for _, tt := range []struct {
		r    *sink.Record
		want bool
	}{
		{h("type", "order"), true},
		{h("x", "1", "type", "order"), true},
		{h("type", "refund"), false},
		{h("type", "refund", "type", "order"), true}, // last value wins
		{h("type", "order", "type", "refund"), false},
		{h(), false},
		{h("Type", "order"), false},
	} {
		if got := c.Matches(tt.r); got != tt.want {
			t.Errorf("Matches(%v) = %v, want %v", tt.r.Headers, got, tt.want)
		}
	}
	if !mustCompile(t, contract.Spec{Stream: "socket"}).Matches(h()) {
		t.Fatal("a contract without Header does not match every record")
	}
}
