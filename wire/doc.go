// Package wire is the codec for weir's producer protocol, version 1.
//
// A producer opens a stream (a Unix socket, later TCP with mutual TLS),
// writes request frames and reads one response frame per request. Every
// frame starts with an 8-byte header
//
//	magic   uint16  0x5752 ("WR")
//	version uint8   1
//	type    uint8   FrameType
//	length  uint32  number of body bytes after the header
//
// followed by exactly length bytes of body. All integers are big endian.
//
// Bodies by type:
//
//	Push      0x01  request_id u64, durability u8, payload (rest of body)
//	PushBatch 0x02  request_id u64, durability u8, count u32,
//	                count × (len u32, bytes); count >= 1, and the records
//	                fill the body exactly
//	Ack       0x81  request_id u64, count u32
//	Nack      0x82  request_id u64, code u16, msg_len u16, msg
//
// The durability byte is 0x00 (Durable) or 0x01 (Buffered). 0x02 is
// reserved: it is accepted and treated as Durable, and is never written by
// this package. Any other value is refused with CodeBadDurability.
//
// The Decoder checks a request frame in a fixed order (header, magic,
// version, length against the frame cap, type, body, request id, durability,
// batch structure) and reports the first failure as a *ProtocolError that
// names the Nack code to answer with and whether the connection must be
// closed. It never allocates for a body before the length has been checked
// against the cap, and it reuses one body buffer across frames.
//
// The full specification, including the validation table, the meaning of
// every Nack code and the pipelining rules, is docs/wire_protocol.md.
package wire
