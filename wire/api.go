package wire

// This file holds the frame layout constants and the decoded types. The
// decoder lives in decode.go, the encoders in encode.go, the metadata
// check in meta.go.

import (
	"fmt"

	"github.com/weir-io/weir/record"
)

// Frame header: every frame, in both directions, starts with these 8 bytes:
//
//	magic   uint16  0x5752 ("WR"), big endian
//	version uint8   1 or 2
//	type    uint8   FrameType
//	length  uint32  bytes of body that follow, big endian
const (
	Magic uint16 = 0x5752
	// Version is protocol version 1, the original framing; AppendHeader
	// writes it.
	Version uint8 = 1
	// Version2 adds Hello, producer ids, sequence numbers, event times and
	// per-record metadata.
	Version2 uint8 = 2
	// MaxVersion is the highest version this package speaks.
	MaxVersion = Version2
	HeaderSize = 8
	// DefaultMaxFrameBytes is the default cap on a frame's body.
	DefaultMaxFrameBytes = 4 << 20
)

// FrameType is a frame's type byte.
type FrameType uint8

const (
	TypePush      FrameType = 0x01 // request: one record
	TypePushBatch FrameType = 0x02 // request: many records, one ack
	TypeHello     FrameType = 0x03 // request, version 2 only: open a version-2 session
	TypeAck       FrameType = 0x81 // response
	TypeNack      FrameType = 0x82 // response
	TypeHelloAck  FrameType = 0x83 // response, version 2 only: answer to Hello
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
	// CodeNoHello: a version-2 push on a connection that has not sent
	// Hello.
	CodeNoHello Code = 10
	// CodeBadMeta: a record's metadata block is malformed, too large, or
	// sets a field producers may not set.
	CodeBadMeta Code = 11
	// CodeNotPermitted: a record sets replay fields (id, source, origin
	// position) on a connection that may not set them.
	CodeNotPermitted Code = 12
	// CodeOverloaded: the daemon holds as much in memory as its budget
	// allows (or is throttling producers) and refused the request before
	// taking any of its records. Retryable: the message starts with a
	// retry-after hint (RetryAfterMessage, ParseRetryAfter).
	CodeOverloaded Code = 13
	// MaxCode is the highest code this package knows.
	MaxCode = CodeOverloaded
)

// Hello flags: what a producer asks for in Hello; HelloAck carries the
// subset the daemon grants.
const (
	// FlagIdempotent: the producer id identifies this producer; the daemon
	// gives each record the id derived from (producer id, sequence
	// number, payload).
	FlagIdempotent uint8 = 0x01
	// FlagReplay: records may carry replay fields (an explicit id, source
	// and origin position). Granted only on the Unix socket.
	FlagReplay uint8 = 0x02
	// knownFlags are the flags a daemon of this version can grant.
	knownFlags = FlagIdempotent | FlagReplay
)

// ProducerID is an idempotent producer's id: 16 random bytes chosen once
// per producer and kept across its reconnects.
type ProducerID = record.ProducerID

// Push is a decoded push frame, or one to encode. A TypePush frame has
// exactly one payload.
type Push struct {
	// Version is the frame's version: 1 (or 0, encoded as 1) or 2. A
	// version-1 push has no sequence, event time or metadata.
	Version    uint8
	RequestID  uint64
	Durability Durability // normalised: never ReservedDurable
	// FirstSeq is the sequence number of the first record; record i has
	// FirstSeq+i (version 2).
	FirstSeq uint64
	// EventTime is the producer's time stamp for the records, Unix
	// nanoseconds; 0 means none (version 2).
	EventTime int64
	Payloads  [][]byte
	// Metas holds one metadata block per payload (version 2), each empty
	// or a record metadata encoding (package record) restricted to the
	// fields in docs/wire_protocol.md. nil means no record has one.
	Metas [][]byte
	// MetaInfos holds InspectMeta's summary of each metadata block (the
	// zero MetaInfo for an empty one), set by the decoder whenever it sets
	// Metas, so that the daemon need not inspect a block twice. Like
	// Metas it is reused by the decoder's next frame. Encoders ignore it.
	MetaInfos []MetaInfo
	// Replay reports that some record's metadata sets a replay field (id,
	// source or origin position). Set by the decoder.
	Replay bool
}

// Hello opens a version-2 session (producer → daemon).
type Hello struct {
	// MaxVersion is the highest version the producer speaks (at least 2).
	MaxVersion uint8
	// Flags asks for FlagIdempotent and/or FlagReplay; unknown bits are
	// ignored (not granted).
	Flags uint8
	// Producer is the producer's id; it must not be all zero when
	// FlagIdempotent is set.
	Producer ProducerID
}

// HelloAck answers a Hello (daemon → producer).
type HelloAck struct {
	// Version is the version the connection uses from now on:
	// min(Hello.MaxVersion, MaxVersion).
	Version uint8
	// MaxVersion is the highest version the daemon speaks.
	MaxVersion uint8
	// Flags are the Hello flags granted.
	Flags uint8
	// MaxFrameBytes is the daemon's cap on a frame body.
	MaxFrameBytes uint32
	// MaxMetaBytes is the daemon's cap on one record's metadata block.
	MaxMetaBytes uint32
}

// Frame is a decoded request frame: a push (the embedded Push, whose
// Version is set for every frame type) or a Hello.
type Frame struct {
	Type FrameType
	Push
	Hello Hello // TypeHello
}

// Response is a decoded Ack, Nack or HelloAck.
type Response struct {
	Type      FrameType
	Version   uint8 // the frame's version byte
	RequestID uint64
	Count     uint32   // Ack: records acknowledged
	Code      Code     // Nack
	Message   string   // Nack
	Hello     HelloAck // HelloAck
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
	// Version is the version of the refused frame, when its header got
	// that far (the version to answer in); 0 otherwise.
	Version uint8
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("wire: %s: %s", e.Code, e.Reason)
}
