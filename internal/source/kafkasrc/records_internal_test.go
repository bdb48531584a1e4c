package kafkasrc

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func benchBatch(n int) []*kgo.Record {
	batch := make([]*kgo.Record, n)
	for i := range batch {
		batch[i] = &kgo.Record{Topic: "orders", Partition: int32(i % 3), Offset: int64(1_000_000 + i),
			Value: make([]byte, 256), Key: fmt.Appendf(nil, "k%d", i), Timestamp: time.UnixMilli(1_764_770_000_000 + int64(i))}
	}
	return batch
}

// BenchmarkRecords: what turning a fetched batch into source records costs
// a record (ids, metadata, origin positions).
func BenchmarkRecords(b *testing.B) {
	s := &Source{opts: Options{Name: "kafka:orders"}}
	batch := benchBatch(1000)
	b.ReportAllocs()
	for b.Loop() {
		s.records("cluster", batch)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/record")
}
