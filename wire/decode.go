package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// readBufferSize is the Decoder's read-ahead buffer. Bodies larger than it
// are read straight into the body buffer.
const readBufferSize = 32 << 10

// minBodyGrowth is the smallest step by which the body buffer grows.
const minBodyGrowth = 64 << 10

// Decoder reads request frames from a stream.
//
// The Decoder owns the read side of the stream: it reads ahead through an
// internal buffer (unless r already is a large enough *bufio.Reader). Its
// memory is one body buffer, grown as frames need it and never beyond the
// frame cap, plus one reused slice of payload headers.
type Decoder struct {
	r        *bufio.Reader
	max      int
	hdr      [HeaderSize]byte
	body     []byte
	payloads [][]byte
}

// NewDecoder reads frames from r, refusing bodies over maxFrameBytes before
// allocating anything for them. A maxFrameBytes of zero or less means
// DefaultMaxFrameBytes.
func NewDecoder(r io.Reader, maxFrameBytes int) *Decoder {
	if maxFrameBytes <= 0 {
		maxFrameBytes = DefaultMaxFrameBytes
	}
	return &Decoder{r: bufio.NewReaderSize(r, readBufferSize), max: maxFrameBytes}
}

// MaxFrameBytes is the body cap the Decoder enforces.
func (d *Decoder) MaxFrameBytes() int { return d.max }

func protoErr(code Code, id uint64, fatal bool, format string, args ...any) *ProtocolError {
	return &ProtocolError{Code: code, RequestID: id, Fatal: fatal, Reason: fmt.Sprintf(format, args...)}
}

// Next decodes the next request frame. It returns io.EOF at a clean end of
// stream (between frames), io.ErrUnexpectedEOF inside a frame, an I/O error
// from the reader, or a *ProtocolError. Payload slices alias a buffer owned
// by the Decoder and are valid until the next call.
//
// The checks run in this order, and the first failure is returned:
//
//  1. read the 8-byte header
//  2. magic (fatal CodeBadFrame)
//  3. version (fatal CodeBadVersion)
//  4. length against the frame cap, before anything is allocated or read
//     (fatal CodeFrameTooLarge)
//  5. type; an unknown type has its body skipped (CodeBadFrame)
//  6. read the body
//  7. request id present (CodeBadFrame)
//  8. durability byte present and valid (CodeBadDurability when invalid)
//  9. batch structure: count at least 1, record lengths filling the body
//     exactly (CodeBadFrame)
//
// Failures from step 5 on leave the stream positioned at the next frame, so
// they are not Fatal.
func (d *Decoder) Next() (Push, error) {
	// 1. Header.
	if n, err := io.ReadFull(d.r, d.hdr[:]); err != nil {
		if err == io.EOF && n == 0 {
			return Push{}, io.EOF
		}
		return Push{}, readErr("header", err)
	}
	// 2. Magic.
	if m := binary.BigEndian.Uint16(d.hdr[0:2]); m != Magic {
		return Push{}, protoErr(CodeBadFrame, 0, true, "bad magic 0x%04x", m)
	}
	// 3. Version.
	if v := d.hdr[2]; v != Version {
		return Push{}, protoErr(CodeBadVersion, 0, true, "unsupported version %d", v)
	}
	// 4. Length, before any allocation.
	length := binary.BigEndian.Uint32(d.hdr[4:8])
	if uint64(length) > uint64(d.max) {
		return Push{}, protoErr(CodeFrameTooLarge, 0, true,
			"frame body of %d bytes exceeds the %d byte cap", length, d.max)
	}
	n := int(length)
	// 5. Type.
	t := FrameType(d.hdr[3])
	if t != TypePush && t != TypePushBatch {
		if _, err := d.r.Discard(n); err != nil {
			return Push{}, readErr("body", err)
		}
		return Push{}, protoErr(CodeBadFrame, 0, false, "unknown request type %s", t)
	}
	// 6. Body.
	body, err := d.readBody(n)
	if err != nil {
		return Push{}, readErr("body", err)
	}
	// 7. Request id.
	if len(body) < 8 {
		return Push{}, protoErr(CodeBadFrame, 0, false,
			"%s body of %d bytes has no request id", t, len(body))
	}
	id := binary.BigEndian.Uint64(body[0:8])
	// 8. Durability.
	if len(body) < PushPrefixSize {
		return Push{}, protoErr(CodeBadFrame, id, false, "%s body has no durability byte", t)
	}
	dur := Durability(body[8])
	if !dur.Valid() {
		return Push{}, protoErr(CodeBadDurability, id, false, "unknown durability byte 0x%02x", byte(dur))
	}
	p := Push{RequestID: id, Durability: dur.normalise()}
	if t == TypePush {
		d.payloads = append(d.payloads[:0], body[PushPrefixSize:n:n])
		p.Payloads = d.payloads
		return p, nil
	}
	// 9. Batch structure.
	if len(body) < BatchPrefixSize {
		return Push{}, protoErr(CodeBadFrame, id, false, "PushBatch body has no record count")
	}
	count := binary.BigEndian.Uint32(body[9:13])
	rest := body[BatchPrefixSize:]
	if count == 0 {
		return Push{}, protoErr(CodeBadFrame, id, false, "PushBatch with zero records")
	}
	// Every record needs at least its length prefix: a count the body
	// cannot hold is refused before the payload slice is grown for it.
	if uint64(count) > uint64(len(rest)/BatchRecordOverhead) {
		return Push{}, protoErr(CodeBadFrame, id, false,
			"PushBatch count %d does not fit in %d body bytes", count, len(rest))
	}
	if cap(d.payloads) < int(count) {
		d.payloads = make([][]byte, 0, count)
	}
	d.payloads = d.payloads[:0]
	for i := range count {
		if len(rest) < BatchRecordOverhead {
			return Push{}, protoErr(CodeBadFrame, id, false, "PushBatch record %d: missing length", i)
		}
		l := binary.BigEndian.Uint32(rest[:4])
		rest = rest[4:]
		if uint64(l) > uint64(len(rest)) {
			return Push{}, protoErr(CodeBadFrame, id, false,
				"PushBatch record %d: length %d exceeds the %d bytes left", i, l, len(rest))
		}
		d.payloads = append(d.payloads, rest[:l:l])
		rest = rest[l:]
	}
	if len(rest) != 0 {
		return Push{}, protoErr(CodeBadFrame, id, false,
			"PushBatch has %d bytes after its %d records", len(rest), count)
	}
	p.Payloads = d.payloads
	return p, nil
}

// readBody reads n body bytes into the reused buffer. When the buffer must
// grow it grows step by step as bytes arrive, so a peer announcing a large
// body has to send it before the memory is committed.
func (d *Decoder) readBody(n int) ([]byte, error) {
	if n <= cap(d.body) {
		b := d.body[:n]
		_, err := io.ReadFull(d.r, b)
		return b, err
	}
	b := d.body[:0]
	for len(b) < n {
		if len(b) == cap(b) {
			c := min(max(2*cap(b), minBodyGrowth), n)
			nb := make([]byte, len(b), c)
			copy(nb, b)
			b = nb
			d.body = nb
		}
		end := min(cap(b), n)
		m, err := io.ReadFull(d.r, b[len(b):end])
		b = b[:len(b)+m]
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// readErr turns a read failure inside a frame into io.ErrUnexpectedEOF
// when the stream ended, and wraps other I/O errors.
func readErr(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return io.ErrUnexpectedEOF
	}
	return fmt.Errorf("wire: read %s: %w", what, err)
}
