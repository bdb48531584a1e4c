package flightsink

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/weir-io/weir/sink"
)

// The generic schema's column names; see the package documentation.
const (
	ColID         = "weir_record_id"
	ColPayload    = "payload"
	ColSource     = "source"
	ColDurability = "durability"
	ColReceived   = "received_at"
	ColKey        = "key"
	ColHeaders    = "headers"
	ColEventTime  = "event_time"
)

var tsUTC = &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}

// headerType is one header: a name and a value.
var headerType = arrow.StructOf(
	arrow.Field{Name: "key", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "value", Type: arrow.BinaryTypes.Binary},
)

// GenericSchema is the schema of every batch the sink sends without typed
// columns.
var GenericSchema = arrow.NewSchema([]arrow.Field{
	{Name: ColID, Type: &arrow.FixedSizeBinaryType{ByteWidth: 16}},
	{Name: ColPayload, Type: arrow.BinaryTypes.Binary},
	{Name: ColSource, Type: arrow.BinaryTypes.String},
	{Name: ColDurability, Type: arrow.BinaryTypes.String},
	{Name: ColReceived, Type: tsUTC},
	{Name: ColKey, Type: arrow.BinaryTypes.Binary, Nullable: true},
	{Name: ColHeaders, Type: arrow.ListOfNonNullable(headerType)},
	{Name: ColEventTime, Type: tsUTC, Nullable: true},
}, nil)

// encodeGeneric builds one record batch of the generic schema from
// recs[idx...].
func encodeGeneric(mem memory.Allocator, recs []sink.Record, idx []int) arrow.RecordBatch {
	b := array.NewRecordBuilder(mem, GenericSchema)
	defer b.Release()
	b.Reserve(len(idx))
	id := b.Field(0).(*array.FixedSizeBinaryBuilder)
	payload := b.Field(1).(*array.BinaryBuilder)
	source := b.Field(2).(*array.StringBuilder)
	dur := b.Field(3).(*array.StringBuilder)
	recv := b.Field(4).(*array.TimestampBuilder)
	key := b.Field(5).(*array.BinaryBuilder)
	hdrs := b.Field(6).(*array.ListBuilder)
	hdr := hdrs.ValueBuilder().(*array.StructBuilder)
	hk := hdr.FieldBuilder(0).(*array.StringBuilder)
	hv := hdr.FieldBuilder(1).(*array.BinaryBuilder)
	ev := b.Field(7).(*array.TimestampBuilder)
	for _, i := range idx {
		r := &recs[i]
		id.Append(r.ID[:])
		payload.Append(r.Payload)
		source.Append(r.Source)
		dur.Append(r.Durability.String())
		recv.Append(arrow.Timestamp(r.Received.UnixNano()))
		if r.Key == nil {
			key.AppendNull()
		} else {
			key.Append(r.Key)
		}
		hdrs.Append(true)
		for _, h := range r.Headers {
			hdr.Append(true)
			hk.Append(h.Key)
			hv.Append(h.Value)
		}
		if r.EventTime.IsZero() {
			ev.AppendNull()
		} else {
			ev.Append(arrow.Timestamp(r.EventTime.UnixNano()))
		}
	}
	return b.NewRecordBatch()
}
