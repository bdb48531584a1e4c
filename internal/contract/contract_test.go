package contract_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/contract"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// order is a realistic order record (~256 bytes) that passes ordersSpec.
const order = `{"order_id":"ord-000123456","customer":{"id":48213,"tier":"gold"},` +
	`"amount":129.95,"currency":"EUR","items":[{"sku":"SKU-1001","qty":2,"price":39.99},` +
	`{"sku":"SKU-2002","qty":1,"price":49.97}],"ts":"2026-03-14T09:26:53.589Z","channel":"web"}`

// fiveRules are the benchmark's and tests' rules: four fail, one warn.
var fiveRules = []contract.Rule{
	{Name: "positive_amount", Expr: "record.amount > 0"},
	{Name: "known_currency", Expr: "record.currency in ['EUR', 'USD', 'GBP']"},
	{Name: "has_items", Expr: "size(record.items) > 0"},
	{Name: "qty_positive", Expr: "record.items.all(i, i.qty > 0)"},
	{Name: "web_channel", Expr: "record.channel == 'web' || source == 'socket'", Severity: contract.Warn},
}

func readSchema(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ordersSpec(t testing.TB) contract.Spec {
	return contract.Spec{
		Stream:     "orders",
		Version:    "3",
		Schema:     readSchema(t, "orders.schema.json"),
		SchemaPath: "orders.schema.json",
		NaturalKey: []string{"/order_id"},
		EventTime:  "/ts",
		Unique:     true,
		Rules:      fiveRules,
	}
}

func mustCompile(t testing.TB, s contract.Spec) *contract.Contract {
	t.Helper()
	c, err := contract.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// patch returns order with one substring replaced, failing the test if it
// is absent.
func patch(t *testing.T, old, new string) string {
	t.Helper()
	if !strings.Contains(order, old) {
		t.Fatalf("order has no %q", old)
	}
	return strings.Replace(order, old, new, 1)
}

func TestCheckOutcomes(t *testing.T) {
	c := mustCompile(t, ordersSpec(t))
	tests := []struct {
		name    string
		payload string
		source  string
		code    record.Code
		rule    string
		err     string // prefix of Result.Error
		warned  []string
	}{
		{name: "good", payload: order},
		{name: "good, warn rule fails", payload: patch(t, `"web"`, `"app"`), warned: []string{"web_channel"}},
		{name: "good, warn rule passes by source", payload: patch(t, `"web"`, `"app"`), source: "socket"},
		{name: "trailing white space", payload: order + " \n\t\r"},
		{name: "empty", payload: "", code: record.CodeDecode, rule: "decode", err: "not JSON: empty payload"},
		{name: "truncated", payload: order[:40], code: record.CodeDecode, rule: "decode", err: "not JSON: unexpected end"},
		{name: "not JSON", payload: "order 42", code: record.CodeDecode, rule: "decode", err: "not JSON: invalid character 'o'"},
		{name: "trailing garbage", payload: order + " {}", code: record.CodeDecode, rule: "decode", err: "not JSON: invalid character '{' after the top-level value"},
		{name: "wrong type", payload: patch(t, `129.95`, `"129.95"`), code: record.CodeContract, rule: "schema",
			err: "/properties/amount/type: got string, want number (at /amount)"},
		{name: "missing required", payload: patch(t, `"currency":"EUR",`, ``), code: record.CodeContract, rule: "schema",
			err: "/required: missing property 'currency'"},
		{name: "through $ref", payload: patch(t, `"qty":1`, `"qty":0`), code: record.CodeContract, rule: "schema",
			err: "/properties/items/items/$ref/properties/qty/minimum: minimum: got 0, want 1 (at /items/1/qty)"},
		{name: "format asserted", payload: patch(t, `2026-03-14T09:26:53.589Z`, `yesterday`), code: record.CodeContract, rule: "schema",
			err: "/properties/ts/format: "},
		{name: "pattern", payload: patch(t, `"EUR"`, `"eur"`), code: record.CodeContract, rule: "schema",
			err: "/properties/currency/pattern: "},
		{name: "not an object", payload: `[1,2]`, code: record.CodeContract, rule: "schema", err: "/type: got array, want object (at the root)"},
		{name: "fail rule false", payload: patch(t, `129.95`, `-1`), code: record.CodeDQ, rule: "positive_amount",
			err: "record.amount > 0 is false"},
		{name: "first failing fail rule wins", payload: strings.NewReplacer(`"web"`, `"app"`, `"EUR"`, `"CHF"`, `129.95`, `0`).Replace(order),
			code: record.CodeDQ, rule: "positive_amount", err: "record.amount > 0 is false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := c.Check(&sink.Record{Payload: []byte(tt.payload), Source: tt.source})
			if res.Code != tt.code || res.Rule != tt.rule || !strings.HasPrefix(res.Error, tt.err) || (tt.err == "" && res.Error != "") {
				t.Fatalf("Check = code %v rule %q error %q; want code %v rule %q error %q…", res.Code, res.Rule, res.Error, tt.code, tt.rule, tt.err)
			}
			if !slices.Equal(res.Warned, tt.warned) {
				t.Fatalf("Warned = %q, want %q", res.Warned, tt.warned)
			}
			if res.Passed() != (tt.code == record.CodeUnknown) {
				t.Fatalf("Passed() = %v for code %v", res.Passed(), res.Code)
			}
			if res.Passed() != (res.Key != nil) {
				t.Fatalf("Key = %q on a record that passed=%v", res.Key, res.Passed())
			}
		})
	}
}

// TestSchemaViolationCounts checks that a record breaking several
// keywords names the first and counts the rest.
func TestSchemaViolationCounts(t *testing.T) {
	c := mustCompile(t, ordersSpec(t))
	p := strings.Replace(strings.Replace(order, `"EUR"`, `"eur"`, 1), `129.95`, `"x"`, 1)
	res := c.Check(&sink.Record{Payload: []byte(p)})
	if res.Rule != "schema" || !strings.HasSuffix(res.Error, " and 1 more") {
		t.Fatalf("Check = %+v, want a schema violation ending in %q", res, " and 1 more")
	}
}
