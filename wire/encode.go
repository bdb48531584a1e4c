package wire

import (
	"encoding/binary"
	"unicode/utf8"
)

// Body sizes of the fixed parts of each frame type.
const (
	// PushPrefixSize is the version-1 Push body before the payload:
	// request id and durability byte.
	PushPrefixSize = 8 + 1
	// BatchPrefixSize is the version-1 PushBatch body before the first
	// record: request id, durability byte and record count.
	BatchPrefixSize = 8 + 1 + 4
	// BatchRecordOverhead is the length prefix in front of every record of
	// a version-1 PushBatch body.
	BatchRecordOverhead = 4
	// Push2PrefixSize is the version-2 Push body before the record: request
	// id, durability, first sequence number, event time and the metadata
	// length.
	Push2PrefixSize = 8 + 1 + 8 + 8 + 2
	// Batch2PrefixSize is the version-2 PushBatch body before the first
	// record: request id, durability, first sequence number, event time
	// and record count.
	Batch2PrefixSize = 8 + 1 + 8 + 8 + 4
	// Batch2RecordOverhead is the payload length and metadata length in
	// front of every record of a version-2 PushBatch body.
	Batch2RecordOverhead = 4 + 2
	// HelloBodySize is the size of a Hello body (a longer one is accepted;
	// the bytes after these are reserved).
	HelloBodySize = 1 + 1 + 16
	// HelloAckBodySize is the size of a HelloAck body (likewise).
	HelloAckBodySize = 1 + 1 + 1 + 1 + 4 + 4
	// AckBodySize is the size of an Ack body.
	AckBodySize = 8 + 4
	// NackPrefixSize is the Nack body before the message.
	NackPrefixSize = 8 + 2 + 2
	// MaxNackMessage is the longest Nack message AppendNack writes.
	MaxNackMessage = 1024
)

// PushBodySize is the body length of the version-1 frame AppendPush writes
// for payloads. Callers compare it with the daemon's frame cap before
// sending.
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

// BodySize is the body length of the frame AppendPush writes for p, of
// either version.
func BodySize(p Push) int {
	if p.Version < Version2 {
		return PushBodySize(p.Payloads)
	}
	n := Batch2PrefixSize
	per := Batch2RecordOverhead
	if len(p.Payloads) == 1 {
		n, per = Push2PrefixSize, 0
	}
	for i, pl := range p.Payloads {
		n += per + len(pl)
		if p.Metas != nil {
			n += len(p.Metas[i])
		}
	}
	return n
}

// AppendHeader appends a version-1 frame header for a body of bodyLen
// bytes.
func AppendHeader(dst []byte, t FrameType, bodyLen uint32) []byte {
	return AppendHeaderVersion(dst, Version, t, bodyLen)
}

// AppendHeaderVersion appends a frame header of version v.
func AppendHeaderVersion(dst []byte, v uint8, t FrameType, bodyLen uint32) []byte {
	dst = binary.BigEndian.AppendUint16(dst, Magic)
	dst = append(dst, v, byte(t))
	return binary.BigEndian.AppendUint32(dst, bodyLen)
}

// AppendPush appends a TypePush frame (len(p.Payloads)==1) or a
// TypePushBatch frame (any other count) to dst, in p.Version's layout (0
// means 1). A version-1 frame ignores FirstSeq, EventTime and Metas; a
// version-2 frame takes Metas as nil or one block per payload.
//
// The reserved durability byte is written as Durable; other values are
// written unchanged, so an invalid tier reaches the daemon and is refused
// there with CodeBadDurability. A batch of zero payloads encodes a frame the
// decoder refuses (count must be at least 1); the body length must fit in
// a uint32 and a metadata block in a uint16.
func AppendPush(dst []byte, p Push) []byte {
	if p.Version >= Version2 {
		return appendPush2(dst, p)
	}
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

func appendPush2(dst []byte, p Push) []byte {
	meta := func(i int) []byte {
		if p.Metas == nil {
			return nil
		}
		return p.Metas[i]
	}
	t := TypePushBatch
	if len(p.Payloads) == 1 {
		t = TypePush
	}
	dst = AppendHeaderVersion(dst, Version2, t, uint32(BodySize(p)))
	dst = binary.BigEndian.AppendUint64(dst, p.RequestID)
	dst = append(dst, byte(p.Durability.normalise()))
	dst = binary.BigEndian.AppendUint64(dst, p.FirstSeq)
	dst = binary.BigEndian.AppendUint64(dst, uint64(p.EventTime))
	if t == TypePush {
		m := meta(0)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(m)))
		dst = append(dst, m...)
		return append(dst, p.Payloads[0]...)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(p.Payloads)))
	for i, pl := range p.Payloads {
		m := meta(i)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(pl)))
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(m)))
		dst = append(dst, m...)
		dst = append(dst, pl...)
	}
	return dst
}

// AppendHello appends a Hello frame (always version 2: the lowest version
// that knows it, so that every daemon from version 2 on can read it).
func AppendHello(dst []byte, h Hello) []byte {
	dst = AppendHeaderVersion(dst, Version2, TypeHello, HelloBodySize)
	dst = append(dst, h.MaxVersion, h.Flags)
	return append(dst, h.Producer[:]...)
}

// AppendHelloAck appends a HelloAck frame (version 2).
func AppendHelloAck(dst []byte, a HelloAck) []byte {
	dst = AppendHeaderVersion(dst, Version2, TypeHelloAck, HelloAckBodySize)
	dst = append(dst, a.Version, a.MaxVersion, a.Flags, 0)
	dst = binary.BigEndian.AppendUint32(dst, a.MaxFrameBytes)
	return binary.BigEndian.AppendUint32(dst, a.MaxMetaBytes)
}

// AppendAck appends a version-1 Ack frame.
func AppendAck(dst []byte, requestID uint64, count uint32) []byte {
	return AppendAckVersion(dst, Version, requestID, count)
}

// AppendAckVersion appends an Ack frame of version v (the version of the
// request it answers).
func AppendAckVersion(dst []byte, v uint8, requestID uint64, count uint32) []byte {
	dst = AppendHeaderVersion(dst, v, TypeAck, AckBodySize)
	dst = binary.BigEndian.AppendUint64(dst, requestID)
	return binary.BigEndian.AppendUint32(dst, count)
}

// AppendNack appends a version-1 Nack frame; msg is truncated to 1024
// bytes (MaxNackMessage), backing off to a UTF-8 character boundary.
func AppendNack(dst []byte, requestID uint64, code Code, msg string) []byte {
	return AppendNackVersion(dst, Version, requestID, code, msg)
}

// AppendNackVersion appends a Nack frame of version v, as AppendNack.
func AppendNackVersion(dst []byte, v uint8, requestID uint64, code Code, msg string) []byte {
	if len(msg) > MaxNackMessage {
		cut := MaxNackMessage
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut]
	}
	dst = AppendHeaderVersion(dst, v, TypeNack, uint32(NackPrefixSize+len(msg)))
	dst = binary.BigEndian.AppendUint64(dst, requestID)
	dst = binary.BigEndian.AppendUint16(dst, uint16(code))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(msg)))
	return append(dst, msg...)
}
