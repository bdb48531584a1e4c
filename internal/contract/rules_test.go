package contract_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/contract"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// TestRuleEvaluation runs one fail rule at a time (no schema) over a
// record and checks the verdict: numbers, runtime errors and the
// key/headers/source variables.
func TestRuleEvaluation(t *testing.T) {
	tests := []struct {
		name, expr, payload string
		rec                 sink.Record // Payload is set from payload
		pass                bool
		err                 string // substring of Result.Error when !pass
	}{
		{name: "int > 0", expr: "record.amount > 0", payload: `{"amount":5}`, pass: true},
		{name: "float > 0", expr: "record.amount > 0", payload: `{"amount":5.5}`, pass: true},
		{name: "negative float", expr: "record.amount > 0", payload: `{"amount":-0.5}`, err: "record.amount > 0 is false"},
		{name: "exponent > 0", expr: "record.amount > 0", payload: `{"amount":1e2}`, pass: true},
		{name: "int == int literal", expr: "record.amount == 5", payload: `{"amount":5}`, pass: true},
		{name: "5.0 == int literal", expr: "record.amount == 5", payload: `{"amount":5.0}`, pass: true},
		{name: "5.5 != int literal", expr: "record.amount == 5", payload: `{"amount":5.5}`, err: "is false"},
		{name: "int > float literal", expr: "record.amount > 4.5", payload: `{"amount":5}`, pass: true},
		{name: "int arithmetic", expr: "record.n + 1 == 6", payload: `{"n":5}`, pass: true},
		{name: "beyond 2^53 exact", expr: "record.id == 9007199254740993", payload: `{"id":9007199254740993}`, pass: true},
		{name: "beyond 2^53 differs", expr: "record.id == 9007199254740992", payload: `{"id":9007199254740993}`, err: "is false"},
		{name: "beyond int64 as double", expr: "record.id > 0", payload: `{"id":18446744073709551616}`, pass: true},
		{name: "int plus double is an error", expr: "record.n + 1.5 > 0", payload: `{"n":5}`, err: "no such overload"},
		{name: "double() converts", expr: "double(record.n) + 1.5 > 0", payload: `{"n":5}`, pass: true},
		{name: "list macro", expr: "record.items.all(i, i.qty > 0)", payload: `{"items":[{"qty":1},{"qty":-1}]}`, err: "is false"},
		{name: "missing field", expr: "record.discount > 0", payload: `{"amount":5}`, err: "no such key: discount"},
		{name: "has() guards", expr: "!has(record.discount) || record.discount > 0", payload: `{"amount":5}`, pass: true},
		{name: "null field", expr: "record.discount == null", payload: `{"discount":null}`, pass: true},
		{name: "string field", expr: "record.sku.startsWith('SKU-')", payload: `{"sku":"SKU-1"}`, pass: true},
		{name: "key", expr: "key == 'k1'", payload: `{}`, rec: sink.Record{Key: []byte("k1")}, pass: true},
		{name: "no key is empty", expr: "key == ''", payload: `{}`, pass: true},
		{name: "headers last wins", expr: "headers['type'] == 'order'", payload: `{}`,
			rec: sink.Record{Headers: []sink.Header{{Key: "type", Value: []byte("x")}, {Key: "type", Value: []byte("order")}}}, pass: true},
		{name: "no headers", expr: "!('type' in headers)", payload: `{}`, pass: true},
		{name: "missing header", expr: "headers['type'] == 'order'", payload: `{}`, err: "no such key: type"},
		{name: "source", expr: "source == 'orders'", payload: `{}`, rec: sink.Record{Source: "orders"}, pass: true},
		{name: "root not an object", expr: "record.amount > 0", payload: `[1]`, err: "unsupported index type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustCompile(t, contract.Spec{Stream: "s", Rules: []contract.Rule{{Name: "r", Expr: tt.expr}}})
			r := tt.rec
			r.Payload = []byte(tt.payload)
			res := c.Check(&r)
			if tt.pass {
				if !res.Passed() {
					t.Fatalf("%s on %s: %+v, want pass", tt.expr, tt.payload, res)
				}
				return
			}
			if res.Code != record.CodeDQ || res.Rule != "r" || !strings.Contains(res.Error, tt.err) {
				t.Fatalf("%s on %s: %+v, want code dq, rule r, error containing %q", tt.expr, tt.payload, res, tt.err)
			}
		})
	}
}

// TestWarnRules checks that warn rules (false or erroring) pass the
// record and are all listed, in order, around passing fail rules.
func TestWarnRules(t *testing.T) {
	c := mustCompile(t, contract.Spec{Stream: "s", Rules: []contract.Rule{
		{Name: "w_false", Expr: "record.a == 2", Severity: contract.Warn},
		{Name: "f_true", Expr: "record.a == 1"},
		{Name: "w_error", Expr: "record.missing == 1", Severity: contract.Warn},
		{Name: "w_true", Expr: "record.a > 0", Severity: contract.Warn},
	}})
	res := c.Check(&sink.Record{Payload: []byte(`{"a":1}`)})
	if !res.Passed() || !slices.Equal(res.Warned, []string{"w_false", "w_error"}) {
		t.Fatalf("Check = %+v, want passed with Warned [w_false w_error]", res)
	}
	res = c.Check(&sink.Record{Payload: []byte(`{"a":3}`)})
	if res.Code != record.CodeDQ || res.Rule != "f_true" || !slices.Equal(res.Warned, []string{"w_false"}) {
		t.Fatalf("Check = %+v, want dq by f_true with Warned [w_false]", res)
	}
}
