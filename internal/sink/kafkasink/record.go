package kafkasink

import (
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-io/weir/sink"
)

// The headers weir adds after a record's own, in this order; the last one
// only when the record has an event time.
const (
	// HeaderRecordID is the record id, 32 lowercase hex digits: the
	// deduplication key. Weir's headers start at the last header of this
	// name.
	HeaderRecordID = "weir_record_id"
	// HeaderSource is the name of the source the record came from.
	HeaderSource = "weir_source"
	// HeaderDurability is "durable" or "buffered": the tier the record was
	// acknowledged under.
	HeaderDurability = "weir_durability"
	// HeaderReceivedAt is when the daemon accepted the record, RFC 3339
	// with nanoseconds, UTC.
	HeaderReceivedAt = "weir_received_at"
	// HeaderEventTime is the record's own time to the nanosecond (RFC
	// 3339, UTC), present only when it has one; the Kafka timestamp holds
	// it to the millisecond.
	HeaderEventTime = "weir_event_time"
)

// weirHeaders is how many headers weir adds at most.
const weirHeaders = 5

var (
	durableValue  = []byte("durable")
	bufferedValue = []byte("buffered")
)

// encoder turns sink records into Kafka records, keeping every byte it
// makes in one slab per batch.
type encoder struct {
	slab []byte
}

// alloc appends n bytes made by fill to the slab and returns them, capped
// so that a later append never writes into them.
func (e *encoder) alloc(fill func([]byte) []byte) []byte {
	start := len(e.slab)
	e.slab = fill(e.slab)
	return e.slab[start:len(e.slab):len(e.slab)]
}

// encode fills dst from r: the key and payload as they are (an empty
// payload stays an empty value, never a null one, which a compacted topic
// would take as a tombstone), r's headers in order followed by weir's, and
// the event time as the timestamp when r has one at or after the Unix
// epoch (Kafka's timestamps cannot be earlier; the record then gets the
// time it is produced, and weir_event_time keeps its own).
func (e *encoder) encode(r *sink.Record, dst *kgo.Record, hs []kgo.RecordHeader) {
	*dst = kgo.Record{Key: r.Key, Value: r.Payload}
	if dst.Value == nil {
		dst.Value = []byte{}
	}
	for _, h := range r.Headers {
		hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderRecordID, Value: e.alloc(func(b []byte) []byte { return hex.AppendEncode(b, r.ID[:]) })},
		kgo.RecordHeader{Key: HeaderSource, Value: e.alloc(func(b []byte) []byte { return append(b, r.Source...) })},
		kgo.RecordHeader{Key: HeaderDurability, Value: durabilityValue(r.Durability)},
		kgo.RecordHeader{Key: HeaderReceivedAt, Value: e.alloc(func(b []byte) []byte { return appendTime(b, r.Received) })},
	)
	if !r.EventTime.IsZero() {
		hs = append(hs, kgo.RecordHeader{Key: HeaderEventTime, Value: e.alloc(func(b []byte) []byte { return appendTime(b, r.EventTime) })})
		if r.EventTime.UnixMilli() >= 0 {
			dst.Timestamp = r.EventTime
		}
	}
	dst.Headers = hs
}

func appendTime(b []byte, t time.Time) []byte { return t.UTC().AppendFormat(b, time.RFC3339Nano) }

func durabilityValue(d sink.Durability) []byte {
	switch d {
	case sink.Durable:
		return durableValue
	case sink.Buffered:
		return bufferedValue
	}
	return []byte(d.String())
}

// ErrNotWeir is returned by Decode for a record without a weir_record_id
// header: not written by this sink.
var ErrNotWeir = errors.New("kafkasink: record has no weir_record_id header")

// Decode reads a record the sink wrote back into the sink record it came
// from: what a consumer of the topic does to find a record's id, source,
// durability, receive and event time. The record's own headers are the
// ones before the last weir_record_id header; weir's start there (an
// unknown weir header after it is skipped, for later versions).
func Decode(r *kgo.Record) (sink.Record, error) {
	at := lastID(r)
	if at < 0 {
		return sink.Record{}, ErrNotWeir
	}
	out := sink.Record{Key: r.Key, Payload: r.Value}
	for _, h := range r.Headers[:at] {
		out.Headers = append(out.Headers, sink.Header{Key: h.Key, Value: h.Value})
	}
	var err error
	if out.ID, err = sink.ParseRecordID(string(r.Headers[at].Value)); err != nil {
		return out, fmt.Errorf("kafkasink: %s: %w", HeaderRecordID, err)
	}
	for _, h := range r.Headers[at+1:] {
		switch h.Key {
		case HeaderSource:
			out.Source = string(h.Value)
		case HeaderDurability:
			switch string(h.Value) {
			case string(durableValue):
				out.Durability = sink.Durable
			case string(bufferedValue):
				out.Durability = sink.Buffered
			default:
				err = fmt.Errorf("kafkasink: %s %q", HeaderDurability, h.Value)
			}
		case HeaderReceivedAt:
			out.Received, err = time.Parse(time.RFC3339Nano, string(h.Value))
		case HeaderEventTime:
			out.EventTime, err = time.Parse(time.RFC3339Nano, string(h.Value))
		}
		if err != nil {
			return out, fmt.Errorf("kafkasink: %s: %w", h.Key, err)
		}
	}
	return out, nil
}

// partitioner places a record with a key by the key, exactly as Kafka's
// default partitioner does (murmur2 of the key, sign bit masked, modulo
// the partition count), and a record without one as if its key were its
// weir_record_id header: every copy of a record, a replay included, lands
// on the same partition. Placement is consistent: a record waits for its
// partition rather than moving to another.
type partitioner struct{}

func (partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &topicPartitioner{keyed: kgo.StickyKeyPartitioner(nil).ForTopic(topic)}
}

type topicPartitioner struct {
	keyed   kgo.TopicPartitioner // used only with a key: murmur2
	scratch kgo.Record           // the id as a key; one record at a time per topic
}

func (*topicPartitioner) RequiresConsistency(*kgo.Record) bool { return true }

func (p *topicPartitioner) Partition(r *kgo.Record, n int) int {
	if r.Key != nil {
		return p.keyed.Partition(r, n)
	}
	p.scratch.Key = []byte{} // not the sink's record: still consistent
	if at := lastID(r); at >= 0 {
		p.scratch.Key = r.Headers[at].Value
	}
	return p.keyed.Partition(&p.scratch, n)
}

// lastID is the index of r's last weir_record_id header, -1 without one.
func lastID(r *kgo.Record) int {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == HeaderRecordID {
			return i
		}
	}
	return -1
}
