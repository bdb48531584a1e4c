package flightsink

import (
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/sink"
)

// The columns the sink adds to arrowrec's generic schema: what weir knows
// of a record besides its id, event time, key, headers and payload.
const (
	ColID         = "weir_record_id" // arrowrec.GenericSchema's first column
	ColSource     = "source"
	ColDurability = "durability"
	ColReceived   = "received_at"
)

var tsUTC = &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}

// GenericSchema is the schema of every batch the sink sends without typed
// columns: arrowrec.GenericSchema (weir_record_id, event_time, key,
// headers, payload) followed by source, durability and received_at.
var GenericSchema = arrow.NewSchema(append(slices.Clone(arrowrec.GenericSchema.Fields()),
	arrow.Field{Name: ColSource, Type: arrow.BinaryTypes.String},
	arrow.Field{Name: ColDurability, Type: arrow.BinaryTypes.String},
	arrow.Field{Name: ColReceived, Type: tsUTC},
), nil)

var nGeneric = arrowrec.GenericSchema.NumFields()

// idField is the id column a typed batch starts with.
var idField = arrow.Field{Name: ColID, Type: &arrow.FixedSizeBinaryType{ByteWidth: 16}}

// group is the rows of a commit that share one schema: one DoPut.
type group struct {
	send  *arrow.Schema    // the schema sent
	typed *arrowrec.Schema // the rows' own Arrow schema; nil: generic
	rows  []int
}

// typedSchema is the schema a typed batch of s is sent in: the id column,
// then s's columns.
func typedSchema(s *arrow.Schema) (*arrow.Schema, error) {
	if len(s.FieldIndices(ColID)) > 0 {
		return nil, fmt.Errorf("the stream's schema has a column named %s, which the sink adds", ColID)
	}
	md := s.Metadata()
	return arrow.NewSchema(append([]arrow.Field{idField}, s.Fields()...), &md), nil
}

// encode builds one record batch of g's schema from recs[rows...]. A row
// whose payload does not fit the typed columns is left out and returned
// as a rejection (CodeDecode); ok says which rows the batch holds.
func encode(mem memory.Allocator, g group, recs []sink.Record, rows []int) (rec arrow.RecordBatch, ok []int, bad []sink.Rejection, err error) {
	if g.typed == nil {
		b := array.NewRecordBuilder(mem, GenericSchema)
		defer b.Release()
		b.Reserve(len(rows))
		payloads := 0
		for _, i := range rows {
			payloads += len(recs[i].Payload)
		}
		b.Field(arrowrec.GenericSchema.FieldIndices("payload")[0]).(*array.BinaryBuilder).ReserveData(payloads)
		src := b.Field(nGeneric).(*array.StringBuilder)
		dur := b.Field(nGeneric + 1).(*array.StringBuilder)
		recv := b.Field(nGeneric + 2).(*array.TimestampBuilder)
		for _, i := range rows {
			r := &recs[i]
			arrowrec.AppendGeneric(b, r)
			src.Append(r.Source)
			dur.Append(r.Durability.String())
			recv.Append(arrow.Timestamp(r.Received.UnixNano()))
		}
		return b.NewRecordBatch(), rows, nil, nil
	}
	tb, err := arrowrec.NewBuilder(mem, g.typed.Arrow)
	if err != nil {
		return nil, nil, nil, err
	}
	defer tb.Release()
	ids := array.NewFixedSizeBinaryBuilder(mem, idField.Type.(*arrow.FixedSizeBinaryType))
	defer ids.Release()
	ok = make([]int, 0, len(rows))
	for _, i := range rows {
		if err := tb.Append(recs[i].Payload); err != nil {
			bad = append(bad, sink.Rejection{Index: i, Code: sink.CodeDecode,
				Reason: fmt.Sprintf("the payload does not fit the typed columns (Arrow schema %.12s…): %v", g.typed.Fingerprint, err)})
			continue
		}
		ids.Append(recs[i].ID[:])
		ok = append(ok, i)
	}
	typed := tb.NewRecordBatch()
	defer typed.Release()
	idArr := ids.NewArray()
	defer idArr.Release()
	cols := append([]arrow.Array{idArr}, typed.Columns()...)
	return array.NewRecordBatch(g.send, cols, int64(len(ok))), ok, bad, nil
}
