package contract

import (
	"math"
	"reflect"
	"strconv"
	"testing"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"

	"github.com/weir-io/weir/sink"
)

// fastRuleExprs are rules within the fast path, each probing an edge of
// CEL's semantics; they must all compile to a fast path.
var fastRuleExprs = []string{
	// the benchmark's five
	"record.amount > 0",
	"record.currency in ['EUR', 'USD', 'GBP']",
	"size(record.items) > 0",
	"record.items.all(i, i.qty > 0)",
	"record.channel == 'web' || source == 'socket'",
	// the system benchmark's other two (internal/systest)
	"record.customer.startsWith('c-')", "record.amount < 100000.0",
	// numbers across int, uint and double
	"record.a == 1", "record.a == 1.0", "record.a != 1", "record.a < 2", "record.a <= 2.5",
	"record.a > -1", "record.a >= 1u", "0 < record.a", "record.a == -0.0",
	"record.a == 9007199254740993", "record.a == 9007199254740992.0", "record.a > 9223372036854775807",
	"record.a < 18446744073709551615u", "record.a >= 9.3e18", "record.a == record.b", "record.a < record.b",
	// other types, null, absent and nested members
	"record.a == 'x'", "record.a < 'x'", "record.a == true", "record.a > false", "record.a == null",
	"record.a != null", "record.a.b == 1", "record.a.b.c != 'x'", "has(record.a)", "has(record.a.b)",
	"!has(record.a) || record.a > 0",
	// in
	"record.a in [1, 2.5, 'x', true, 3u]", "record.a in [9007199254740993, -1]", "record.a in [9007199254740992.0]",
	"record.a in record.l", "1 in record.l", "'x' in record.l", "null in record.l", "record.a in []",
	// size, strings
	"size(record.s) == 3", "record.s.size() > 1", "size(record.l) >= 1", "size(record.m) == 0", "size(record.a) == 1",
	"record.s.startsWith('ab')", "record.s.endsWith('é')", "record.s.contains('b')", "record.s.matches('^[a-zé]+$')",
	// macros and logic
	"record.l.all(x, x > 0)", "record.l.exists(x, x == 'x')", "record.items.all(i, i.qty > 0 && has(i.sku))",
	"record.items.all(i, i.l.all(j, j < i.qty))", "record.l.all(record, record > 0)",
	"!(record.a > 1) && record.b == 'x'", "record.a > 1 || record.b == 'x'", "!(record.a == 1 || record.b == 2)",
	"record.a + 1 > 2 || record.b == 'x'", "record.a + 1 > 2 && record.b == 'x'",
	"source == 'orders' || record.a == 1", "record.m.exists(k, k == 'a') || record.a == 2",
}

// ruleUnderTest is a rule compiled both ways.
type ruleUnderTest struct {
	expr string
	prg  cel.Program
	fast *fastExpr
}

func loadFastRules(t testing.TB, exprs []string) []ruleUnderTest {
	t.Helper()
	env, err := newEnv()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]ruleUnderTest, 0, len(exprs))
	for _, e := range exprs {
		prg, fast, err := compileExpr(env, e)
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		if fast == nil {
			t.Fatalf("%s: no fast path", e)
		}
		out = append(out, ruleUnderTest{e, prg, fast})
	}
	return out
}

// agreeRules fails when a rule's fast path decides a record otherwise
// than cel-go: true or false where cel-go has the other bool or an
// error. It returns the fast verdicts ("yes", "no", "unsure").
func agreeRules(t testing.TB, rules []ruleUnderTest, payload []byte, source string) []string {
	doc, err := decode(payload)
	if err != nil {
		return nil
	}
	got := make([]string, len(rules))
	for i, ru := range rules {
		fr := fastFrame{rec: doc, source: source}
		pass, sure := ru.fast.verdict(&fr)
		if !sure {
			got[i] = "unsure"
			continue
		}
		got[i] = map[bool]string{true: "yes", false: "no"}[pass]
		out, _, err := ru.prg.Eval(&vars{rec: doc, r: &sink.Record{Source: source}})
		if err != nil {
			t.Fatalf("%s on %s: the fast path says %v, cel-go fails: %v", ru.expr, payload, pass, err)
		}
		if out != types.Bool(pass) {
			t.Fatalf("%s on %s: the fast path says %v, cel-go %v", ru.expr, payload, pass, out)
		}
	}
	return got
}

// contractPair is a contract compiled with the rules' fast path and the
// same contract without it (cel-go alone).
type contractPair struct{ fast, celOnly *Contract }

// rulesContracts are fastRuleExprs as one contract of warn rules (all
// run) and one of fail rules (the first failing one decides), each with
// and without the fast path.
func rulesContracts(t testing.TB) []contractPair {
	t.Helper()
	var out []contractPair
	for _, sev := range []Severity{Warn, Fail} {
		spec := Spec{Stream: "s"}
		for i, e := range fastRuleExprs {
			spec.Rules = append(spec.Rules, Rule{Name: "r" + strconv.Itoa(i), Expr: e, Severity: sev})
		}
		c, err := Compile(spec)
		if err != nil {
			t.Fatal(err)
		}
		celOnly := *c
		celOnly.rules = append([]rule(nil), c.rules...)
		for i := range celOnly.rules {
			celOnly.rules[i].fast = nil
		}
		out = append(out, contractPair{c, &celOnly})
	}
	return out
}

// agreeChecks fails when Check's result with the fast path differs from
// cel-go's alone: verdict, failing rule, message and warned rules.
func agreeChecks(t testing.TB, pairs []contractPair, payload []byte, source string) {
	r := &sink.Record{Payload: payload, Source: source}
	for _, p := range pairs {
		if got, want := p.fast.Check(r), p.celOnly.Check(r); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: with the fast path %+v, cel-go alone %+v", payload, got, want)
		}
	}
}

// TestFastRulesEdges: records at the edges of CEL's semantics; every
// definite fast verdict must be cel-go's, and the plain cases must be
// decided (or it would not be a fast path).
func TestFastRulesEdges(t *testing.T) {
	pairs := rulesContracts(t)
	for _, tc := range []struct {
		expr, doc, want string
	}{
		{"record.customer.startsWith('c-')", `{"customer":"c-17","amount":17.5}`, "yes"},
		{"record.amount < 100000.0", `{"customer":"c-17","amount":17.5}`, "yes"},
		{"record.a == 1", `{"a":1}`, "yes"},
		{"record.a == 1", `{"a":1.0}`, "yes"},
		{"record.a == 1", `{"a":1e0}`, "yes"},
		{"record.a == 1", `{"a":-0}`, "no"},
		{"record.a == 1", `{"a":"1"}`, "no"},
		{"record.a == 1", `{"a":null}`, "no"},
		{"record.a == 1", `{"a":[1]}`, "no"},
		{"record.a == 1", `{"b":1}`, "unsure"},
		{"record.a == 1", `[1]`, "unsure"},
		{"record.a == 1", `{"a":1e400}`, "unsure"}, // cel-go makes it the string "1e400"
		{"record.a == 1.0", `{"a":1}`, "yes"},
		{"record.a == -0.0", `{"a":0}`, "yes"},
		{"record.a == -0.0", `{"a":-0.0}`, "yes"},
		{"record.a != 1", `{"a":2}`, "yes"},
		{"record.a != 1", `{"a":"x"}`, "yes"},
		{"record.a <= 2.5", `{"a":2}`, "yes"},
		{"record.a <= 2.5", `{"a":2.5000001}`, "no"},
		{"record.a < 2", `{"a":"x"}`, "unsure"},
		{"record.a < 2", `{"a":null}`, "unsure"},
		{"record.a >= 1u", `{"a":1}`, "yes"},
		{"record.a >= 1u", `{"a":-1}`, "no"},
		{"record.a >= 1u", `{"a":0.5}`, "no"},
		{"record.a == 9007199254740993", `{"a":9007199254740993}`, "yes"},
		{"record.a == 9007199254740993", `{"a":9007199254740992}`, "no"},
		{"record.a == 9007199254740993", `{"a":9007199254740992.0}`, "yes"}, // in float64, as cel-go
		{"record.a == 9007199254740992.0", `{"a":9007199254740993}`, "yes"},
		{"record.a > 9223372036854775807", `{"a":9223372036854775808}`, "no"}, // 2^63 as a double
		{"record.a > 9223372036854775807", `{"a":1e19}`, "yes"},
		{"record.a < 18446744073709551615u", `{"a":1e20}`, "no"},
		{"record.a >= 9.3e18", `{"a":9223372036854775807}`, "no"},
		{"record.a == record.b", `{"a":1,"b":1.0}`, "yes"},
		{"record.a == record.b", `{"a":{},"b":{}}`, "unsure"},
		{"record.a == record.b", `{"a":[],"b":{}}`, "no"},
		{"record.a < record.b", `{"a":"a","b":"b"}`, "yes"},
		{"record.a > false", `{"a":true}`, "yes"},
		{"record.a == null", `{"a":null}`, "yes"},
		{"record.a == null", `{"a":0}`, "no"},
		{"record.a != null", `{"a":false}`, "yes"},
		{"record.a.b == 1", `{"a":{"b":1}}`, "yes"},
		{"record.a.b == 1", `{"a":null}`, "unsure"},
		{"record.a.b == 1", `{"a":{}}`, "unsure"},
		{"has(record.a)", `{"a":null}`, "yes"},
		{"has(record.a)", `{}`, "no"},
		{"has(record.a.b)", `{"a":1}`, "unsure"},
		{"!has(record.a) || record.a > 0", `{}`, "yes"},
		{"!has(record.a) || record.a > 0", `{"a":-1}`, "no"},
		{"record.a in [1, 2.5, 'x', true, 3u]", `{"a":1.0}`, "yes"},
		{"record.a in [1, 2.5, 'x', true, 3u]", `{"a":3}`, "yes"},
		{"record.a in [1, 2.5, 'x', true, 3u]", `{"a":"y"}`, "no"},
		{"record.a in [1, 2.5, 'x', true, 3u]", `{"a":null}`, "no"},
		{"record.a in [1, 2.5, 'x', true, 3u]", `{"a":[1]}`, "unsure"},
		{"record.a in [9007199254740993, -1]", `{"a":9007199254740993}`, "unsure"},
		{"record.a in [9007199254740993, -1]", `{"a":-1.0}`, "yes"},
		{"record.a in [9007199254740992.0]", `{"a":9007199254740993}`, "unsure"}, // a set, not ==: false
		{"record.a in record.l", `{"a":1,"l":["1",1.0]}`, "yes"},
		{"record.a in record.l", `{"a":1,"l":[1e400]}`, "unsure"},
		{"record.a in record.l", `{"a":1,"l":[[1],{"a":1},null]}`, "no"},
		{"null in record.l", `{"l":[0,null]}`, "yes"},
		{"record.a in []", `{"a":1}`, "no"},
		{"size(record.s) == 3", `{"s":"éàü"}`, "yes"},
		{"size(record.s) == 3", `{"s":"\ud83d\ude00ab"}`, "yes"},
		{"size(record.s) == 3", `{"s":"\ud83dab"}`, "yes"}, // a lone surrogate decodes to U+FFFD
		{"size(record.s) == 3", `{"s":"abcd"}`, "no"},
		{"size(record.l) >= 1", `{"l":[]}`, "no"},
		{"size(record.m) == 0", `{"m":{}}`, "yes"},
		{"size(record.a) == 1", `{"a":{"x":1,"x":2}}`, "yes"},
		{"size(record.a) == 1", `{"a":1}`, "unsure"},
		{"record.s.startsWith('ab')", `{"s":"abc"}`, "yes"},
		{"record.s.startsWith('ab')", `{"s":1}`, "unsure"},
		{"record.s.endsWith('é')", `{"s":"café"}`, "yes"},
		{"record.s.matches('^[a-zé]+$')", `{"s":"cafe1"}`, "no"},
		{"record.l.all(x, x > 0)", `{"l":[]}`, "yes"},
		{"record.l.all(x, x > 0)", `{"l":[1,2.5]}`, "yes"},
		{"record.l.all(x, x > 0)", `{"l":["a",-1]}`, "no"}, // false wins over an error
		{"record.l.all(x, x > 0)", `{"l":["a",1]}`, "unsure"},
		{"record.l.all(x, x > 0)", `{"l":{"a":1}}`, "unsure"},
		{"record.l.exists(x, x == 'x')", `{"l":[{},"x"]}`, "yes"},
		{"record.l.exists(x, x == 'x')", `{"l":[]}`, "no"},
		{"record.items.all(i, i.qty > 0 && has(i.sku))", `{"items":[{"qty":1,"sku":"a"}]}`, "yes"},
		{"record.items.all(i, i.qty > 0 && has(i.sku))", `{"items":[{"sku":"a"},{"qty":0}]}`, "no"},
		{"record.items.all(i, i.l.all(j, j < i.qty))", `{"items":[{"qty":3,"l":[1,2]},{"qty":1,"l":[]}]}`, "yes"},
		{"record.l.all(record, record > 0)", `{"l":[1]}`, "yes"},
		{"record.a > 1 || record.b == 'x'", `{"b":"x"}`, "yes"}, // an error || true is true
		{"record.a > 1 || record.b == 'x'", `{"b":"y"}`, "unsure"},
		{"!(record.a > 1) && record.b == 'x'", `{"a":2}`, "no"}, // false && an error is false
		{"!(record.a == 1 || record.b == 2)", `{"a":3,"b":3}`, "yes"},
		{"record.a + 1 > 2 || record.b == 'x'", `{"a":5,"b":"x"}`, "yes"},
		{"record.a + 1 > 2 || record.b == 'x'", `{"a":5,"b":"y"}`, "unsure"},
		{"record.a + 1 > 2 && record.b == 'x'", `{"a":5,"b":"y"}`, "no"},
		{"source == 'orders' || record.a == 1", `{}`, "yes"},
		{"record.m.exists(k, k == 'a') || record.a == 2", `{"m":{"a":1},"a":1}`, "unsure"},
		{"record.m.exists(k, k == 'a') || record.a == 2", `{"m":{"a":1},"a":2}`, "yes"},
	} {
		rules := loadFastRules(t, []string{tc.expr})
		got := agreeRules(t, rules, []byte(tc.doc), "orders")
		agreeChecks(t, pairs, []byte(tc.doc), "orders")
		if got == nil {
			t.Fatalf("%s: not JSON", tc.doc)
		}
		if got[0] != tc.want {
			t.Errorf("%s on %s: fast verdict %s, want %s", tc.expr, tc.doc, got[0], tc.want)
		}
	}
}

// TestFastRulesOutside: a rule with nothing the fast path handles at its
// top has no fast path.
func TestFastRulesOutside(t *testing.T) {
	env, err := newEnv()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{
		"record.a + 1 > 2", "key == 'k'", "headers['type'] == 'order'", "double(record.a) > 1.5",
		"record.l.exists_one(x, x == 1)", "record.a in [1, null]", "record.a in [[1]]",
		"record.l.map(x, x * 2).all(y, y > 0)", "(record.a > 1 ? record.b : record.c) == 1",
		"record.s.matches(record.p)", "record.a == b'x'",
	} {
		_, fast, err := compileExpr(env, e)
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		if fast != nil {
			t.Errorf("%s: compiled a fast path", e)
		}
	}
}

// TestFastNumbersAgree: the six comparisons of every pair of a grid of
// numbers (int, uint and double edges, NaN and infinities included)
// against cel-go's own Equal and Compare.
func TestFastNumbersAgree(t *testing.T) {
	var vals []fval
	for _, i := range []int64{0, 1, -1, 1<<53 - 1, 1 << 53, 1<<53 + 1, math.MaxInt64, math.MinInt64} {
		vals = append(vals, intVal(i))
	}
	for _, u := range []uint64{0, 1, 1 << 53, 1<<53 + 1, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64} {
		vals = append(vals, uintVal(u))
	}
	for _, d := range []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1 << 53, 1<<53 + 2, 1 << 63, -(1 << 63),
		1 << 64, math.MaxFloat64, math.Inf(1), math.Inf(-1), math.NaN()} {
		vals = append(vals, dblVal(d))
	}
	celVal := func(v fval) ref.Val {
		switch v.k {
		case kInt:
			return types.Int(v.asInt())
		case kUint:
			return types.Uint(v.n)
		}
		return types.Double(v.asDbl())
	}
	for _, a := range vals {
		for _, b := range vals {
			ca, cb := celVal(a), celVal(b)
			want := map[string]ref.Val{"_==_": types.Equal(ca, cb)}
			if eq, ok := want["_==_"].(types.Bool); ok {
				want["_!=_"] = !eq
			}
			c := ca.(interface{ Compare(ref.Val) ref.Val }).Compare(cb)
			for op, holds := range map[string]func(types.Int) bool{
				"_<_": func(c types.Int) bool { return c < 0 }, "_<=_": func(c types.Int) bool { return c <= 0 },
				"_>_": func(c types.Int) bool { return c > 0 }, "_>=_": func(c types.Int) bool { return c >= 0 },
			} {
				want[op] = c
				if ci, ok := c.(types.Int); ok {
					want[op] = types.Bool(holds(ci))
				}
			}
			for op, w := range want {
				got := compare(op, a, b)
				wb, isBool := w.(types.Bool)
				switch {
				case got.k != kBool && isBool:
					t.Errorf("%v %s %v: fast path unsure, cel-go %v", ca, op, cb, w)
				case got.k == kBool && (!isBool || bool(wb) != got.b):
					t.Errorf("%v %s %v: fast path %v, cel-go %v", ca, op, cb, got.b, w)
				}
			}
		}
	}
}

// FuzzFastRulesAgree: for any payload, every fast verdict of the rules
// in fastRuleExprs is cel-go's, and Check's results with and without the
// fast path are the same (go test -fuzz FuzzFastRulesAgree
// ./internal/contract).
func FuzzFastRulesAgree(f *testing.F) {
	for _, s := range []string{
		`{"amount":129.95,"currency":"EUR","items":[{"sku":"a","qty":2,"l":[1]}],"channel":"web"}`,
		`{"a":1,"b":1.0,"s":"éàü","l":[1,"x",null,2.5],"m":{"a":{}}}`,
		`{"a":9007199254740993,"b":9007199254740992.0,"l":[9223372036854775808,-0]}`,
		`{"a":{"b":{"c":"x"}},"s":"ab\u00e9","l":[{"q":1}],"items":[{"qty":0}]}`,
		`{"a":null,"b":"x","l":[],"m":{},"s":""}`, `{"a":1e400,"l":[1e-400,-1.5e300]}`, `[1,{"a":1}]`, `"x"`,
	} {
		f.Add([]byte(s), "orders")
	}
	rules := loadFastRules(f, fastRuleExprs)
	pairs := rulesContracts(f)
	f.Fuzz(func(t *testing.T, payload []byte, source string) {
		agreeRules(t, rules, payload, source)
		agreeChecks(t, pairs, payload, source)
	})
}
