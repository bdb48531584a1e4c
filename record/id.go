package record

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"time"

	"github.com/weir-io/weir/sink"
)

// Derivation is how Meta.RecordID derives the id of a record that has
// none of its own.
type Derivation struct {
	// ByPosition returns the hash of the record's buffer position.
	ByPosition func() sink.RecordID
	// TimeOrdered lays derived ids out by time: the record's buffer
	// segment says so (wab.FlagTimeOrderedIDs). A segment written before
	// ids were time-ordered leaves it false, and its records keep the ids
	// they always had.
	TimeOrdered bool
	// Received is the record's receive time as its buffer stores it (a
	// replay of the buffer reads it back), Unix nanoseconds.
	Received int64
}

// RecordID returns the record's id: the id field, else an id derived from
// the idempotent producer's (producer, seq, payload), else d.ByPosition().
//
// With d.TimeOrdered a derived id carries the record's event time in its
// leading 48 bits (TimeOrdered) — else, for a record whose id comes from
// its buffer position, d.Received. An idempotent producer's record without
// an event time gets ms 0, never its receive time: a resend of it arrives
// at another time and must get the first copy's id. The id field is
// returned as it is: it was fixed, and laid out, where the record came
// from.
func (m *Meta) RecordID(payload []byte, d Derivation) sink.RecordID {
	var id sink.RecordID
	switch {
	case m.HasID:
		return m.ID
	case m.HasProducer:
		id = ProducerRecordID(m.Producer, m.Seq, payload)
	default:
		id = d.ByPosition()
	}
	if !d.TimeOrdered {
		return id
	}
	at := d.Received
	switch {
	case m.EventTime != 0:
		at = m.EventTime
	case m.HasProducer:
		at = 0 // the receive time differs between a record and its resend
	}
	return TimeOrdered(id, at)
}

// TimeOrdered lays id out as a UUIDv7 (RFC 9562, §5.7) at time t (Unix
// nanoseconds): bytes 0–5 are t in milliseconds, big endian (0 for a time
// before 1970, 2⁴⁸−1 past the year 10889); the high nibble of byte 6 is
// the version, 7; the two high bits of byte 8 are the variant, 10. The
// other 74 bits are id's own, so the result is as deterministic as id:
// the same hash at the same time gives the same id. Ids of records in
// time order sort in time order at millisecond resolution, and a
// B-tree keyed by them grows at its right edge.
func TimeOrdered(id sink.RecordID, t int64) sink.RecordID {
	ms := uint64(0)
	if t > 0 {
		ms = min(uint64(t/int64(time.Millisecond)), maxIDMillis)
	}
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], ms)
	copy(id[:6], ts[2:])
	id[6] = 0x70 | id[6]&0x0f
	id[8] = 0x80 | id[8]&0x3f
	return id
}

// maxIDMillis is the largest time a time-ordered id holds.
const maxIDMillis = 1<<48 - 1

// IDTime returns the time a time-ordered id carries, at millisecond
// resolution, and whether id is laid out as one (version 7, variant 10).
// An id derived before ids were time-ordered is one by chance once in 64.
func IDTime(id sink.RecordID) (time.Time, bool) {
	if id[6]>>4 != 7 || id[8]>>6 != 2 {
		return time.Time{}, false
	}
	var ts [8]byte
	copy(ts[2:], id[:6])
	return time.UnixMilli(int64(binary.BigEndian.Uint64(ts[:]))), true
}

// ProducerRecordID is the hash of an idempotent producer's record: the
// same for every resend of (producer, seq) with the same payload. It is the
// first 16 bytes of
//
//	SHA-256( "producer" ‖ p ‖ seq as u64 big endian ‖ payload )
//
// — 32 fixed bytes before the payload, which needs no length prefix as it
// comes last, so that a 256-byte record takes five SHA-256 blocks, as
// its buffer position's id does, not six. Meta.RecordID lays it out by
// time.
func ProducerRecordID(p ProducerID, seq uint64, payload []byte) sink.RecordID {
	var pre [producerPrefixSize]byte
	copy(pre[:], producerDomain)
	copy(pre[len(producerDomain):], p[:])
	binary.BigEndian.PutUint64(pre[len(producerDomain)+len(p):], seq)
	h := sha256.New()
	h.Write(pre[:])
	h.Write(payload)
	return idOf(h)
}

// producerDomain begins ProducerRecordID's input; producerPrefixSize is
// the size of everything before the payload.
const (
	producerDomain     = "producer"
	producerPrefixSize = len(producerDomain) + len(ProducerID{}) + 8
)

// HashID hashes parts into a record id: SHA-256 over each part, length-
// prefixed (so ("ab","c") and ("a","bc") differ), truncated to 128 bits.
func HashID(parts ...[]byte) sink.RecordID {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return idOf(h)
}

// idOf is the record id a SHA-256 digest yields: its first 128 bits.
func idOf(h hash.Hash) sink.RecordID {
	var sum [sha256.Size]byte
	return sink.RecordID(h.Sum(sum[:0]))
}
