package arrowrec

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/weir-io/weir/sink"
)

// GenericSchema is the schema of any record, whatever its payload: its id
// (which a server deduplicating on it makes replays idempotent with), its
// event time, key, headers and payload bytes.
var GenericSchema = arrow.NewSchema([]arrow.Field{
	{Name: "weir_record_id", Type: &arrow.FixedSizeBinaryType{ByteWidth: 16}},
	{Name: "event_time", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}, Nullable: true},
	{Name: "key", Type: arrow.BinaryTypes.Binary, Nullable: true},
	{Name: "headers", Type: arrow.ListOf(arrow.StructOf(
		arrow.Field{Name: "key", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "value", Type: arrow.BinaryTypes.Binary},
	))},
	{Name: "payload", Type: arrow.BinaryTypes.Binary},
}, nil)

// AppendGeneric appends r as one row to b, a builder of GenericSchema.
func AppendGeneric(b *array.RecordBuilder, r *sink.Record) {
	b.Field(0).(*array.FixedSizeBinaryBuilder).Append(r.ID[:])
	if t := b.Field(1).(*array.TimestampBuilder); r.EventTime.IsZero() {
		t.AppendNull()
	} else {
		t.Append(arrow.Timestamp(r.EventTime.UnixNano()))
	}
	if k := b.Field(2).(*array.BinaryBuilder); r.Key == nil {
		k.AppendNull()
	} else {
		k.Append(r.Key)
	}
	hs := b.Field(3).(*array.ListBuilder)
	hs.Append(true)
	st := hs.ValueBuilder().(*array.StructBuilder)
	for _, h := range r.Headers {
		st.Append(true)
		st.FieldBuilder(0).(*array.StringBuilder).Append(h.Key)
		st.FieldBuilder(1).(*array.BinaryBuilder).Append(h.Value)
	}
	b.Field(4).(*array.BinaryBuilder).Append(r.Payload)
}
