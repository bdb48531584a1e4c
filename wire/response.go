package wire

import (
	"encoding/binary"
	"io"
)

// maxResponseBody is the largest body a valid response can have.
const maxResponseBody = NackPrefixSize + 0xFFFF

// ReadResponse reads one Ack, Nack or HelloAck frame, of version 1 or 2
// (a HelloAck only of version 2).
//
// It returns io.EOF at a clean end of stream, io.ErrUnexpectedEOF inside a
// frame, a wrapped I/O error, or a *ProtocolError for a malformed response.
// A response of unknown type has its body skipped and yields a non-fatal
// *ProtocolError; any other malformed response is Fatal. ReadResponse reads
// exactly one frame and nothing beyond it; give it a buffered reader.
func ReadResponse(r io.Reader) (Response, error) {
	var hdr [HeaderSize]byte
	if n, err := io.ReadFull(r, hdr[:]); err != nil {
		if err == io.EOF && n == 0 {
			return Response{}, io.EOF
		}
		return Response{}, readErr("header", err)
	}
	if m := binary.BigEndian.Uint16(hdr[0:2]); m != Magic {
		return Response{}, protoErr(CodeBadFrame, 0, true, "bad magic 0x%04x", m)
	}
	v := hdr[2]
	if v < Version || v > MaxVersion {
		return Response{}, protoErr(CodeBadVersion, 0, true, "unsupported version %d", v)
	}
	length := binary.BigEndian.Uint32(hdr[4:8])
	if length > maxResponseBody {
		return Response{}, protoErr(CodeFrameTooLarge, 0, true, "response body of %d bytes", length)
	}
	t := FrameType(hdr[3])
	switch t {
	case TypeAck:
		if length != AckBodySize {
			return Response{}, protoErr(CodeBadFrame, 0, true, "Ack body of %d bytes, want %d", length, AckBodySize)
		}
		var b [AckBodySize]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return Response{}, readErr("body", err)
		}
		return Response{
			Type:      TypeAck,
			Version:   v,
			RequestID: binary.BigEndian.Uint64(b[0:8]),
			Count:     binary.BigEndian.Uint32(b[8:12]),
		}, nil
	case TypeNack:
		if length < NackPrefixSize {
			return Response{}, protoErr(CodeBadFrame, 0, true, "Nack body of %d bytes is too short", length)
		}
		b := make([]byte, length)
		if _, err := io.ReadFull(r, b); err != nil {
			return Response{}, readErr("body", err)
		}
		id := binary.BigEndian.Uint64(b[0:8])
		msgLen := int(binary.BigEndian.Uint16(b[10:12]))
		if NackPrefixSize+msgLen != len(b) {
			return Response{}, protoErr(CodeBadFrame, id, true,
				"Nack message length %d does not match body of %d bytes", msgLen, len(b))
		}
		return Response{
			Type:      TypeNack,
			Version:   v,
			RequestID: id,
			Code:      Code(binary.BigEndian.Uint16(b[8:10])),
			Message:   string(b[NackPrefixSize:]),
		}, nil
	case TypeHelloAck:
		if v < Version2 {
			break
		}
		return readHelloAck(r, length)
	}
	if _, err := io.CopyN(io.Discard, r, int64(length)); err != nil {
		return Response{}, readErr("body", err)
	}
	return Response{}, protoErr(CodeBadFrame, 0, false, "unknown version-%d response type %s", v, t)
}

// readHelloAck reads a HelloAck body of length bytes; bytes after the
// known fields are skipped.
func readHelloAck(r io.Reader, length uint32) (Response, error) {
	if length < HelloAckBodySize {
		return Response{}, protoErr(CodeBadFrame, 0, true, "HelloAck body of %d bytes, want %d", length, HelloAckBodySize)
	}
	var b [HelloAckBodySize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return Response{}, readErr("body", err)
	}
	if _, err := io.CopyN(io.Discard, r, int64(length-HelloAckBodySize)); err != nil {
		return Response{}, readErr("body", err)
	}
	return Response{
		Type:    TypeHelloAck,
		Version: Version2,
		Hello: HelloAck{
			Version:       b[0],
			MaxVersion:    b[1],
			Flags:         b[2],
			MaxFrameBytes: binary.BigEndian.Uint32(b[4:8]),
			MaxMetaBytes:  binary.BigEndian.Uint32(b[8:12]),
		},
	}, nil
}
