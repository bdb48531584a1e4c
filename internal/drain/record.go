package drain

import (
	"fmt"
	"time"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

// SinkRecord turns the index-th record of a buffer segment into the record
// a sink receives: its metadata (record.Meta) gives the key, headers,
// event time, source and id; a record without an id of its own (a wire
// version-1 producer record) gets the id of its buffer position. Ids
// derived here are time-ordered in segments that say so
// (wab.FlagTimeOrderedIDs; record.Meta.RecordID). The returned record
// aliases rec's bytes.
//
// A Meta that does not decode is reported (the record still gets its
// position's id, so it is delivered rather than lost); the caller logs it.
func SinkRecord(h wab.Header, index uint64, rec wab.Record) (sink.Record, error) {
	out := sink.Record{
		Payload:    rec.Payload,
		Durability: sink.Durability(rec.Durability),
		Received:   time.Unix(0, rec.Received),
		Source:     RecordSource,
	}
	d := record.Derivation{
		ByPosition:  func() sink.RecordID { return sink.RecordID(wab.RecordID(h, index, rec.Payload)) },
		TimeOrdered: h.Flags&wab.FlagTimeOrderedIDs != 0,
		Received:    rec.Received,
	}
	m, err := record.Decode(rec.Meta, record.LegacyOrigin)
	if err != nil {
		var none record.Meta
		out.ID = none.RecordID(rec.Payload, d)
		return out, fmt.Errorf("record %d of segment %d (shard %d): %w", index, h.Seq, h.Shard, err)
	}
	out.ID = m.RecordID(rec.Payload, d)
	if m.Source != "" {
		out.Source = m.Source
	}
	out.Key = m.Key
	out.Headers = m.Headers
	if m.EventTime != 0 {
		out.EventTime = time.Unix(0, m.EventTime)
	}
	return out, nil
}
