package wire

// This file holds the frame layout constants and the decoded types. The
// decoder lives in decode.go, the encoders in encode.go.

import "fmt"

// Frame header: every frame, in both directions, starts with these 8 bytes:
//
//	magic   uint16  0x5752 ("WR"), big endian
//	version uint8   1
//	type    uint8   FrameType
//	length  uint32  bytes of body that follow, big endian
const (
	Magic      uint16 = 0x5752
	Version    uint8  = 1
	HeaderSize        = 8
	// DefaultMaxFrameBytes is the default cap on a frame's body.
	DefaultMaxFrameBytes = 4 << 20
)

// FrameType is a frame's type byte.
type FrameType uint8

const (
	TypePush      FrameType = 0x01 // request: one record
	TypePushBatch FrameType = 0x02 // request: many records, one ack
	TypeAck       FrameType = 0x81 // response
	TypeNack      FrameType = 0x82 // response
)

// Durability is the durability byte of a push.
type Durability uint8

const (
	Durable  Durability = 0x00
	Buffered Durability = 0x01
	// ReservedDurable is reserved; it decodes as Durable and is never
	// produced by the encoder.
	ReservedDurable Durability = 0x02
)

// Code is a Nack's reason.
type Code uint16

const (
	CodeFrameTooLarge Code = 1
	CodeBadVersion    Code = 2
	CodeBadDurability Code = 3
	CodeBadFrame      Code = 4 // malformed body, unknown type, bad magic
	CodeQueueTimeout  Code = 5
	CodeDiskFull      Code = 6
	CodeShardFailed   Code = 7
	CodeShuttingDown  Code = 8
	CodeInternal      Code = 9
)

// Push is a decoded push frame. A TypePush frame has exactly one payload.
type Push struct {
	RequestID  uint64
	Durability Durability // normalised: never ReservedDurable
	Payloads   [][]byte
}

// Response is a decoded Ack or Nack.
type Response struct {
	Type      FrameType
	RequestID uint64
	Count     uint32 // Ack: records acknowledged
	Code      Code   // Nack
	Message   string // Nack
}

// ProtocolError is a request the decoder refused. Code is the Nack to send;
// RequestID is set when the frame got far enough to carry one. Fatal means
// the stream can no longer be trusted (bad magic or version, oversized
// length, truncated frame): send the Nack, then close the connection.
type ProtocolError struct {
	Code      Code
	RequestID uint64
	Fatal     bool
	Reason    string
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("wire: %s: %s", e.Code, e.Reason)
}
