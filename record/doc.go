// Package record defines what weir keeps about a record besides its payload
// — its key, headers, event time, origin and, for a rejected record, why it
// was rejected — and the tagged, versioned encoding of that metadata, which
// is what a write-ahead-buffer record's Meta slot holds (wab.Record.Meta) in
// the buffer and in the dead-letter lane.
//
// # Encoding (version 2)
//
// An encoded Meta is one version byte followed by fields, back to back:
//
//	u8 version = 2
//	repeated: tag uvarint, length uvarint, value (length bytes)
//
// A decoder skips a field whose tag it does not know, by its length, so a
// later version may add tags without breaking an older reader. A known tag
// with a value of the wrong size is an error (ErrBadMeta). Fields may come
// in any order; the encoder writes them in tag order. Every tag appears at
// most once except TagHeader, which repeats once per header, in order. The
// function Fields walks an encoding's fields; Decode and the wire
// protocol's check of a producer's metadata (wire.InspectMeta) both read
// through it.
//
//	tag  name            value
//	  1  id              16 bytes: the record id (sink.RecordID)
//	  2  source          UTF-8: the source instance's name
//	  3  key             bytes: the record's key (present even when empty)
//	  4  header          uvarint key length, key (UTF-8), value (the rest)
//	  5  event time      8 bytes: i64 Unix nanoseconds, the record's own time
//	  6  producer id     16 bytes: the idempotent producer's id (read only)
//	  7  producer seq    8 bytes: u64 the record's sequence number (read only)
//	  8  origin pos      UTF-8: where the origin keeps it ("orders/3@1234")
//	  9  producer        16 bytes: the idempotent producer's id, then
//	                     uvarint: the record's sequence number
//	 16  reject code     1 byte: Code
//	 17  reject stage    UTF-8: the stage that rejected it (Stage)
//	 18  reject comp.    UTF-8: the component (sink or source name)
//	 19  reject error    UTF-8: the error text (at most MaxErrorBytes)
//	 20  reject attempts uvarint: delivery attempts made
//	 21  first seen      8 bytes: i64 Unix nanoseconds of the first rejection
//	 22  location        18 bytes: buffer shard u16, segment seq u64,
//	                     record index u64 — where the record sat in the buffer
//	 23  reject rule     UTF-8: the contract's part that refused it
//	                     (stage check: "decode", "schema" or a rule's name)
//
// All fixed-size integers are big endian.
//
// An idempotent producer's record names its producer and sequence number
// in tag 9, in 19 to 28 bytes (20 or 21 for a producer's first two million
// records). Builds before tag 9 wrote them as tags 6 and 7, 28 bytes;
// Decode reads both forms, and writes only tag 9. A reader that predates
// tag 9 skips it, as it skips any unknown tag, and so gives such a record
// its buffer position's id instead: segments written with tag 9 are not
// for older builds.
//
// # Version 1 (still read)
//
// Segments written before version 2 hold one of two untagged layouts, both
// starting with the byte 1 and told apart only by where the file lives:
//
//   - a source record in the buffer (LegacyOrigin): u8 1, 16-byte id, u8
//     name length, name;
//   - a dead-letter record (LegacyDeadLetter): u8 1, 16-byte id, u16 shard,
//     u64 segment seq, u64 index, uvarint reason length, reason.
//
// Decode reads both; a version-1 dead-letter reason becomes Rejection.Error
// with CodeUnknown. An empty Meta is a producer record of wire version 1:
// its id derives from its position in the buffer.
//
// # Record ids
//
// A record's id is chosen in this order (Meta.RecordID):
//
//  1. the id field, when present (source records, replayed dead letters,
//     the HTTP door's records — which store the id 2 gives, so that it is
//     hashed once): it was fixed where the record came from and is never
//     changed;
//  2. for an idempotent producer's record, ProducerRecordID(producer id,
//     seq, payload) — the same for every resend of that record, whatever
//     connection or segment carried it;
//  3. otherwise the caller's fallback (the buffer position's hash).
//
// Ids derived by 2 and 3 from a buffer segment that lays ids out by time
// (wab.FlagTimeOrderedIDs: every segment written since) are time-ordered:
// TimeOrdered puts the record's event time — for a producer record the
// time its client stamped when it first pushed it, kept on every resend —
// else, for an id of 3, its receive time as stored in the buffer (a
// producer record without an event time gets 0: a resend arrives at
// another time), in milliseconds, in the leading 48 bits of a UUIDv7. Sources lay out the ids they fix in the
// same way (source.TimedID) with a time of the record's own that a
// re-read gives back: the broker's timestamp, the stream's time, a
// file's birth time. docs/architecture.md §Record ids says why and what
// it means for tables written before.
package record
