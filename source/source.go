// Package source is weir's intake seam: the contract between something
// records are read from (a broker, a file, the daemon's own socket) and the
// gate that makes them durable.
//
// # The acknowledgement rule
//
// A source commits its position — a Kafka group offset, a JetStream ack, a
// file cursor — only after Gate.Write has returned nil for every record up
// to that position. Write returns only once the records are durable at the
// gate (fdatasynced in the write-ahead buffer, or committed by the
// primary-raw sink when there is no buffer). Positions may lag what is
// durable — a crash then re-reads a few records, which the deterministic
// record ids make harmless — but they must never lead it: a position ahead
// of what is durable is silent loss.
//
// # Record ids
//
// A source gives every record an id derived from where it came from and
// what it holds (for Kafka: cluster, topic, partition, offset and payload),
// so that a redelivered record gets the same id and every sink can drop the
// duplicate. See ID.
//
// # Pausing
//
// A source that reads from upstream at its own pace — a broker, files —
// should implement Pausable, so that flow control can stop it reading
// when memory runs short (the Critical state) without losing its place:
// a Kafka source stops fetching its partitions but stays in its consumer
// group (no rebalance), a JetStream source stops pulling while the acks
// of what it already holds proceed, a file source stops reading. Pause
// and Resume are idempotent and safe from any goroutine, before, during
// and between runs; a source paused before Run starts paused. A batch
// already read when Pause is called is still written and committed:
// pausing bounds what is read next, it does not abandon what is held.
// Pauser is a ready-made implementation for a source that reads in a
// loop. A kind declares the capability in the component registry
// (component.SourceCaps.Pausable), which hands the daemon the Pausable of
// each source it opens.
package source

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// Regime says who persists a source's position.
type Regime int

const (
	// BrokerManaged: the position lives server-side (a consumer-group
	// offset, a durable consumer's ack floor); the source commits it to the
	// broker, which redelivers anything unacknowledged.
	BrokerManaged Regime = iota
	// StoreManaged: nothing upstream keeps a position; weir persists the
	// source's Cursor in its offset store, after the gate's durable ack.
	StoreManaged
	// ProducerManaged: the producer keeps its own position — it holds
	// every record until weir acknowledges it and resends what was not
	// acknowledged (the socket ingress). weir persists nothing; the
	// acknowledgement itself is the position commit, sent only once the
	// record is durable to the tier the producer asked for.
	ProducerManaged
)

func (r Regime) String() string {
	switch r {
	case BrokerManaged:
		return "broker-managed"
	case StoreManaged:
		return "store-managed"
	case ProducerManaged:
		return "producer-managed"
	}
	return fmt.Sprintf("regime(%d)", int(r))
}

// Record is one record read from a source.
type Record struct {
	// ID is the record's deterministic id (see ID).
	ID sink.RecordID
	// Payload is the record's bytes.
	Payload []byte
	// Source names the source instance, e.g. "kafka:orders".
	Source string
	// Time is the record's own timestamp when the source has one (a Kafka
	// record's timestamp, a JetStream message's stream timestamp); the
	// zero Time when it has none (a line of a file). The gate keeps it as
	// the record's event time (sink.Record.EventTime).
	Time time.Time
	// Received is when the source read the record, for a source that
	// keeps it itself (a file source that is its own raw); the zero Time
	// lets the gate stamp its own. It is never an event time.
	Received time.Time
	// Key is the record's key at the origin (a Kafka key); nil if none.
	Key []byte
	// Headers are the record's headers at the origin, in order (names may
	// repeat).
	Headers []sink.Header
	// OriginPos says where the origin keeps the record, for people
	// ("orders/3@1234" for a Kafka record); empty if the source has no such
	// place. It is stored with the record (record.Meta.OriginPos) and
	// derives nothing.
	OriginPos string
	// Undecodable, when not empty, says why the source could not decode
	// what it read (a corrupt Arrow batch, say); Payload holds the bytes
	// as read. The gate does not write such a record: it stores it in its
	// rejection lane with reason code decode (stage gate), durably before
	// Write returns, so that the source may move its position past it —
	// it is never nowhere. A gate without a rejection lane fails the
	// Write.
	Undecodable string
}

// Size is the bytes of r's data — payload, key, header names and values —
// the size flow control's estimates start from (see Sizes).
func (r *Record) Size() int {
	n := len(r.Payload) + len(r.Key)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// Sizes returns the data size of recs (the sum of Size) and the memory
// they take in proportion to it while a gate holds them: the data, the
// origin positions, and the copy of keys and headers the gate encodes
// into their metadata. A source tells its size estimator the pair
// (flow.Estimator.Observe), adding what its transport keeps per byte. The
// fixed cost of a record — its structs, whatever its size — is not in
// held: it is what the estimator's floor, record_size_estimate, covers.
func Sizes(recs []Record) (data, held int64) {
	for i := range recs {
		r := &recs[i]
		n := r.Size()
		data += int64(n)
		held += int64(n + n - len(r.Payload) + len(r.OriginPos))
	}
	return data, held
}

// Gate is where a source writes. Write returns nil only once every record
// is durable at the gate; on error none of them may be considered durable
// (some may be, and will be deduplicated by id if written again).
type Gate interface {
	Write(ctx context.Context, recs []Record) error
}

// Cursor is a store-managed source's position, opaque to the store.
type Cursor []byte

// CursorStore persists store-managed cursors. Save must be durable when it
// returns.
type CursorStore interface {
	Load(ctx context.Context, source string) (Cursor, error) // nil, nil if none
	Save(ctx context.Context, source string, c Cursor) error
}

// Source is something weir reads records from.
type Source interface {
	// Name identifies the source instance in logs, metrics and the offset
	// store.
	Name() string
	// Regime says who persists the position.
	Regime() Regime
	// Replayable reports whether the origin can be read again from an
	// earlier position (files can; a socket feed cannot). Only a replayable
	// source may serve as its own raw system of record.
	Replayable() bool
	// Run reads until ctx ends, writing to gate and committing positions
	// only after the gate's durable ack. It returns nil when ctx ended, or
	// the error that stopped it. Store-managed sources use cursors.
	Run(ctx context.Context, gate Gate, cursors CursorStore) error
}

// ID derives a record id from its origin: SHA-256 over each part
// (length-prefixed, so ("ab","c") and ("a","bc") differ), truncated to 128
// bits. Pass the parts that locate the record — e.g. cluster, topic,
// partition, offset — then the payload last. Prefer TimedID where the
// origin gives the record a time of its own.
func ID(parts ...[]byte) sink.RecordID { return record.HashID(parts...) }

// TimedID is ID laid out by time (record.TimeOrdered): the leading 48 bits
// are t in milliseconds, so ids of records in time order sort in time
// order and a table keyed by them grows at its right edge. t must be a
// time the origin gives back with the record every time it is read — a
// broker's timestamp, a stream's time — never the time of reading, or a
// re-read record would get a new id; the zero time gives ms 0.
func TimedID(t time.Time, parts ...[]byte) sink.RecordID {
	var ns int64
	if ms := t.UnixMilli(); !t.IsZero() && ms > 0 {
		ns = min(ms, math.MaxInt64/int64(time.Millisecond)) * int64(time.Millisecond)
	}
	return record.TimeOrdered(record.HashID(parts...), ns)
}

// Uint64 is a helper for ID parts.
func Uint64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}
