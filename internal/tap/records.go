package tap

import (
	"time"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

// ProducerSource is the source of a producer's record over the socket,
// whose metadata names none.
const ProducerSource = "socket"

// FromSource is a source's record as a tap shows it.
func FromSource(r *source.Record) Record {
	return Record{ID: r.ID, HasID: true, Source: r.Source, Key: r.Key, Headers: r.Headers, EventTime: r.Time, Payload: r.Payload}
}

// FromSink is a record on its way to a sink as a tap shows it.
func FromSink(r *sink.Record) Record {
	return Record{ID: r.ID, HasID: true, Source: r.Source, Key: r.Key, Headers: r.Headers, EventTime: r.EventTime, Payload: r.Payload}
}

// OfferBuffered offers the records of a write-ahead buffer request: each
// payload with its encoded metadata (metas nil: none; FromBuffered). Call
// it only when p is Active.
func (p *Point) OfferBuffered(payloads, metas [][]byte) {
	p.Offer(len(payloads), func(i int) Record {
		var meta []byte
		if metas != nil {
			meta = metas[i]
		}
		return FromBuffered(payloads[i], meta)
	})
}

// FromBuffered is a record handed to the write-ahead buffer — its payload
// and its encoded metadata (record.Meta; nil for a version-1 producer's)
// — as a tap shows it. Its id is the one the drain will give it when the
// metadata fixes it (a source's id, an idempotent producer's); a
// version-1 producer's record has none until the buffer places it.
func FromBuffered(payload, meta []byte) Record {
	rec := Record{Source: ProducerSource, Payload: payload}
	m, err := record.Decode(meta, record.LegacyOrigin)
	if err != nil {
		rec.Error = "metadata: " + err.Error()
		return rec
	}
	if m.Source != "" {
		rec.Source = m.Source
	}
	rec.Key, rec.Headers = m.Key, m.Headers
	if m.EventTime != 0 {
		rec.EventTime = time.Unix(0, m.EventTime).UTC()
	}
	if m.HasID || m.HasProducer {
		rec.ID, rec.HasID = m.RecordID(payload, record.Derivation{TimeOrdered: true}), true
	}
	return rec
}
