package wire

import (
	"encoding/binary"
	"unicode/utf8"
)

// Body sizes of the fixed parts of each frame type.
const (
	// PushPrefixSize is the Push body before the payload: request id and
	// durability byte.
	PushPrefixSize = 8 + 1
	// BatchPrefixSize is the PushBatch body before the first record:
	// request id, durability byte and record count.
	BatchPrefixSize = 8 + 1 + 4
	// BatchRecordOverhead is the length prefix in front of every record of
	// a PushBatch body.
	BatchRecordOverhead = 4
	// AckBodySize is the size of an Ack body.
	AckBodySize = 8 + 4
	// NackPrefixSize is the Nack body before the message.
	NackPrefixSize = 8 + 2 + 2
	// MaxNackMessage is the longest Nack message AppendNack writes.
	MaxNackMessage = 1024
)

// PushBodySize is the body length of the frame AppendPush writes for
// payloads. Callers compare it with the daemon's frame cap before sending.
func PushBodySize(payloads [][]byte) int {
	if len(payloads) == 1 {
		return PushPrefixSize + len(payloads[0])
	}
	n := BatchPrefixSize
	for _, p := range payloads {
		n += BatchRecordOverhead + len(p)
	}
	return n
}

// AppendHeader appends a frame header for a body of bodyLen bytes.
func AppendHeader(dst []byte, t FrameType, bodyLen uint32) []byte {
	dst = binary.BigEndian.AppendUint16(dst, Magic)
	dst = append(dst, Version, byte(t))
	return binary.BigEndian.AppendUint32(dst, bodyLen)
}

// AppendPush appends a TypePush frame (len(payloads)==1) or a TypePushBatch
// frame (any other count) to dst.
//
// The reserved durability byte is written as Durable; other values are
// written unchanged, so an invalid tier reaches the daemon and is refused
// there with CodeBadDurability. A batch of zero payloads encodes a frame the
// decoder refuses (count must be at least 1); the body length must fit in
// a uint32.
func AppendPush(dst []byte, p Push) []byte {
	d := byte(p.Durability.normalise())
	body := PushBodySize(p.Payloads)
	if len(p.Payloads) == 1 {
		dst = AppendHeader(dst, TypePush, uint32(body))
		dst = binary.BigEndian.AppendUint64(dst, p.RequestID)
		dst = append(dst, d)
		return append(dst, p.Payloads[0]...)
	}
	dst = AppendHeader(dst, TypePushBatch, uint32(body))
	dst = binary.BigEndian.AppendUint64(dst, p.RequestID)
	dst = append(dst, d)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(p.Payloads)))
	for _, pl := range p.Payloads {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(pl)))
		dst = append(dst, pl...)
	}
	return dst
}

// AppendAck appends an Ack frame.
func AppendAck(dst []byte, requestID uint64, count uint32) []byte {
	dst = AppendHeader(dst, TypeAck, AckBodySize)
	dst = binary.BigEndian.AppendUint64(dst, requestID)
	return binary.BigEndian.AppendUint32(dst, count)
}

// AppendNack appends a Nack frame; msg is truncated to 1024 bytes
// (MaxNackMessage), backing off to a UTF-8 character boundary.
func AppendNack(dst []byte, requestID uint64, code Code, msg string) []byte {
	if len(msg) > MaxNackMessage {
		cut := MaxNackMessage
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut]
	}
	dst = AppendHeader(dst, TypeNack, uint32(NackPrefixSize+len(msg)))
	dst = binary.BigEndian.AppendUint64(dst, requestID)
	dst = binary.BigEndian.AppendUint16(dst, uint16(code))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(msg)))
	return append(dst, msg...)
}
