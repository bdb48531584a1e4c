package contract

import (
	"syscall"
	"testing"

	"github.com/weir-io/weir/sink"
)

// BenchmarkEvalRules measures BenchmarkCheck's five rules alone (four
// fail, one warn: the first five of fastRuleExprs) over an order decoded
// once, so neither decoding nor the schema blurs their cost.
//
//	go test -run '^$' -bench EvalRules -count 5 -benchtime 20000x ./internal/contract
func BenchmarkEvalRules(b *testing.B) {
	var spec []Rule
	for i, e := range fastRuleExprs[:5] {
		spec = append(spec, Rule{Name: string(rune('a' + i)), Expr: e, Severity: map[bool]Severity{true: Warn}[i == 4]})
	}
	rules, err := compileRules(spec)
	if err != nil {
		b.Fatal(err)
	}
	c := &Contract{rules: rules}
	payload := []byte(`{"order_id":"ord-000123456","amount":129.95,"currency":"EUR","channel":"web",` +
		`"items":[{"sku":"SKU-1001","qty":2,"price":39.99},{"sku":"SKU-2002","qty":1,"price":49.97}]}`)
	doc, err := decode(payload)
	if err != nil {
		b.Fatal(err)
	}
	r := &sink.Record{Payload: payload, Source: "orders"}
	b.ReportAllocs()
	cpu0 := ProcessCPU(b)
	for b.Loop() {
		var res Result
		if c.evalRules(doc, r, &res); !res.Passed() || len(res.Warned) > 0 {
			b.Fatalf("the order does not pass: %+v", res)
		}
	}
	b.ReportMetric(float64(ProcessCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// ProcessCPU is the process's user and system CPU time so far, in
// nanoseconds: the benchmarks' cpu-ns/op, which other work on the
// machine disturbs less than wall time. (Exported for the package's
// external tests only.)
func ProcessCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
