package contract_test

import (
	"testing"

	"github.com/weir-io/weir/internal/contract"
	"github.com/weir-io/weir/sink"
)

// BenchmarkCheck measures Check on a realistic ~256-byte order record
// that passes: decoding only, with the orders schema, with the schema
// and five rules (plus the natural-key extraction), and with the rules
// but no schema. Besides wall time it reports the process's CPU time per
// check (cpu-ns/op), which other work on the machine disturbs less.
//
//	go test -run '^$' -bench Check -count 5 ./internal/contract
func BenchmarkCheck(b *testing.B) {
	full := ordersSpec(b)
	schemaOnly := contract.Spec{Stream: "orders", Schema: full.Schema, SchemaPath: full.SchemaPath}
	for _, bc := range []struct {
		name string
		spec contract.Spec
	}{
		{"decode", contract.Spec{Stream: "orders"}},
		{"schema", schemaOnly},
		{"schema+5rules", full},
		{"5rules", contract.Spec{Stream: "orders", Rules: full.Rules}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := mustCompile(b, bc.spec)
			r := &sink.Record{Payload: []byte(order), Source: "orders"}
			if res := c.Check(r); !res.Passed() {
				b.Fatalf("order does not pass: %+v", res)
			}
			b.SetBytes(int64(len(order)))
			b.ReportAllocs()
			cpu0 := contract.ProcessCPU(b)
			for b.Loop() {
				c.Check(r)
			}
			b.ReportMetric(float64(contract.ProcessCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
