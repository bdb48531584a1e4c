package flightsink

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/weir-io/weir/sink"
)

// EncodeGeneric builds the generic record batch the sink would send for
// recs, for a bare client's baseline in the benchmark.
func EncodeGeneric(recs []sink.Record) arrow.RecordBatch {
	rows := make([]int, len(recs))
	for i := range rows {
		rows[i] = i
	}
	rec, _, _, _ := encode(memory.DefaultAllocator, group{send: GenericSchema}, recs, rows)
	return rec
}
