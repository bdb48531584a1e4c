// Package wire is the codec for weir's producer protocol, versions 1 and 2.
//
// A producer opens a stream (a Unix socket, or TCP with mutual TLS),
// writes request frames and reads one response frame per request. Every
// frame starts with an 8-byte header
//
//	magic   uint16  0x5752 ("WR")
//	version uint8   1 or 2
//	type    uint8   FrameType
//	length  uint32  number of body bytes after the header
//
// followed by exactly length bytes of body. All integers are big endian.
//
// # Version 1
//
//	Push      0x01  request_id u64, durability u8, payload (rest of body)
//	PushBatch 0x02  request_id u64, durability u8, count u32,
//	                count × (len u32, bytes); count >= 1, and the records
//	                fill the body exactly
//	Ack       0x81  request_id u64, count u32
//	Nack      0x82  request_id u64, code u16, msg_len u16, msg
//
// A Nack's msg may start with a retry-after hint, "retry_after_ms=N; "
// (RetryAfterMessage, ParseRetryAfter); the daemon sends one with every
// CodeOverloaded.
//
// The durability byte is 0x00 (Durable) or 0x01 (Buffered). 0x02 is
// reserved: it is accepted and treated as Durable, and is never written by
// this package. Any other value is refused with CodeBadDurability. A
// version-1 record has no producer id: a resend after a reconnect is a new
// record with a new id.
//
// # Version 2
//
// Version 2 adds idempotent producers and per-record metadata. A producer
// opens the session with Hello (always sent with version byte 2) and waits
// for HelloAck before it sends version-2 pushes:
//
//	Hello     0x03  max_version u8 (>= 2), flags u8, producer_id [16]
//	HelloAck  0x83  version u8, max_version u8, flags u8, reserved u8,
//	                max_frame_bytes u32, max_meta_bytes u32
//
// Hello's flags ask for FlagIdempotent (0x01: producer_id names the
// producer; it must not be all zero) and FlagReplay (0x02: records may set
// replay fields); HelloAck's flags are those granted (replay only on the
// Unix socket). Bytes after these fields are reserved and ignored. A
// daemon that speaks only version 1 answers Hello with a version-1 Nack
// BadVersion and closes the connection; the producer then speaks version 1
// to it.
//
// Version-2 pushes (same type bytes as version 1):
//
//	Push      0x01  request_id u64, durability u8, first_seq u64,
//	                event_time i64, meta_len u16, meta, payload (rest)
//	PushBatch 0x02  request_id u64, durability u8, first_seq u64,
//	                event_time i64, count u32,
//	                count × (len u32, meta_len u16, meta, payload)
//
// Record i has sequence number first_seq+i (the numbers may not wrap);
// event_time is Unix nanoseconds, 0 for none, and applies to every record
// of the frame that does not carry its own. meta is empty or the record
// package's tagged metadata encoding (record.Encode), restricted to key,
// header and event-time fields, plus — on a connection granted
// FlagReplay — id, source and origin-position fields; InspectMeta is the
// check. Responses carry the version of the request they answer; a Nack
// to a frame whose version was refused is version 1.
//
// # Decoding
//
// The Decoder checks a request frame in a fixed order (header, magic,
// version, length against the frame cap, type, body, then the Hello's
// fields, or request id, durability, record structure and metadata) and
// reports the first failure as a *ProtocolError that names the Nack code
// to answer with and whether the connection must be closed. It never
// allocates for a body before the length has been checked against the
// cap, and it reuses one body buffer across frames.
//
// The full specification, including version negotiation, the validation
// table, the meaning of every Nack code and the pipelining rules, is
// docs/wire_protocol.md.
package wire
