package flightsrc

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// BenchmarkDoPut: one arrow-go client puts batches of 1,024 rows of
// about 256 bytes into a source over a real write-ahead buffer; rows/s.
func BenchmarkDoPut(b *testing.B) {
	r := startSourceB(b)
	c := dial(b, r.addr)
	body := strings.Repeat("x", 200)
	js := "["
	for i := range 1024 {
		if i > 0 {
			js += ","
		}
		js += fmt.Sprintf(`{"id": %d, "customer": %q, "at": %d}`, i, body, 1709298245000+i)
	}
	batch := batchOf(b, ordersSchema, js+"]")
	const per = 16
	bs := make([]arrow.RecordBatch, per)
	seqs := make([]uint64, per)
	for i := range bs {
		bs[i] = batch
	}
	b.ResetTimer()
	for n := range b.N {
		for i := range seqs {
			seqs[i] = uint64(n*per + i)
		}
		if _, err := put(context.Background(), c, []string{"orders", "bench"}, bs, seqs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*per*1024)/b.Elapsed().Seconds(), "rows/s")
}
