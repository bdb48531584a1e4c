package httpin

import (
	"crypto/rand"
	"hash/fnv"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// Ids. Every record of a request is stored as an idempotent producer's
// record is (record.Meta's producer field): the producer id and the
// record's index in the request as its sequence number. Its id is derived
// from them as the drain would derive it (record.Meta.RecordID:
// ProducerRecordID laid out by TimeOrdered at the record's event time),
// listed in the answer and stored in the meta (its id field, fixed at the
// origin), so the drain takes it as it is.
//
//   - With an Idempotency-Key the producer id is IdempotentProducer(stream,
//     key): a retry of the request is the same producer, the same
//     sequence numbers and (with the same payloads) the same ids.
//   - Without one it is 16 random bytes: each request is a producer of its
//     own, and its records get fresh ids.
//
// A record without an event time of its own (event_time, or the
// Weir-Event-Time header) gets the idempotent producer's ms 0 in its id
// when the request has an Idempotency-Key — a retry arrives at another
// time and must get the first copy's id — and its receive time as its
// event time otherwise, so fresh ids are time-ordered.

// IdempotentProducer is the producer id of the requests carrying
// Idempotency-Key key on stream: the first 16 bytes of
// SHA-256(len ‖ "weir-http" ‖ len ‖ stream ‖ len ‖ key) (record.HashID).
func IdempotentProducer(stream, key string) record.ProducerID {
	return record.ProducerID(record.HashID([]byte("weir-http"), []byte(stream), []byte(key)))
}

// freshProducer is a request's own producer id, without Idempotency-Key.
func freshProducer() record.ProducerID {
	var p record.ProducerID
	_, _ = rand.Read(p[:]) // never fails (crypto/rand, Go 1.24)
	return p
}

// stored is a request's records as the buffer stores them, and the ids
// the sinks will hold.
type stored struct {
	payloads [][]byte
	metas    [][]byte
	ids      []sink.RecordID
	bytes    int // payloads and metas
}

// storeRecords builds the stored metadata and the ids of recs, the first
// with sequence number firstSeq. received is
// the request's receive time (Unix ns); idempotent says whether it has
// an Idempotency-Key.
func storeRecords(stream string, p record.ProducerID, idempotent bool, firstSeq uint64, recs []rec, received int64) stored {
	s := stored{
		payloads: make([][]byte, len(recs)),
		metas:    make([][]byte, len(recs)),
		ids:      make([]sink.RecordID, len(recs)),
	}
	// The metas share one allocation, of their size as first estimated
	// (a longer one gets an allocation of its own when append grows it).
	est := 0
	for i := range recs {
		est += metaEstimate + len(stream) + len(recs[i].key)
		for _, h := range recs[i].headers {
			est += 8 + len(h.Key) + len(h.Value)
		}
	}
	arena := make([]byte, 0, est)
	for i := range recs {
		r := &recs[i]
		m := record.Meta{
			Source:      stream,
			Key:         r.key,
			Headers:     r.headers,
			EventTime:   r.eventTime,
			Producer:    p,
			Seq:         firstSeq + uint64(i),
			HasProducer: true,
		}
		if m.EventTime == 0 && !idempotent {
			m.EventTime = received
		}
		// What the drain would derive for this record (drain.SinkRecord):
		// the buffer's segments lay ids out by time
		// (wab.FlagTimeOrderedIDs). It is stored in the meta, so the drain
		// reads it instead of hashing the payload a second time.
		m.ID = m.RecordID(r.payload, record.Derivation{TimeOrdered: true, Received: received})
		m.HasID = true
		s.ids[i] = m.ID
		s.payloads[i] = r.payload
		start := len(arena)
		arena = record.Append(arena, &m)
		s.metas[i] = arena[start:len(arena):len(arena)]
		s.bytes += len(r.payload) + len(s.metas[i])
	}
	return s
}

// metaEstimate is a record meta's size besides its source name, key and
// headers: the fields' tags and lengths, the id, an event time, a producer
// id and sequence number.
const metaEstimate = 68

// shardOf spreads requests over shards: an idempotent producer's by its
// id (a retry goes where the first copy went), others in turn.
func shardOf(p record.ProducerID, shards int) int {
	h := fnv.New32a()
	h.Write(p[:])
	return int(h.Sum32() % uint32(shards))
}
