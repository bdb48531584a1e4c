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

// keptBodyBytes is the most body buffer a Decoder keeps once a frame that
// fits in it arrives: a larger frame's buffer is dropped then, so a
// connection that sent one large frame does not keep its size
// (docs/flow_control.md, "Buffers outside records").
const keptBodyBytes = 1 << 20

// minBodyGrowth is the smallest step by which the body buffer grows.
const minBodyGrowth = 64 << 10

// Decoder reads request frames from a stream.
//
// The Decoder owns the read side of the stream: it reads ahead through an
// internal buffer (unless r already is a large enough *bufio.Reader). Its
// memory is one body buffer, grown as frames need it and never beyond the
// frame cap, plus reused slices of payload and metadata headers.
type Decoder struct {
	r          *bufio.Reader
	max        int
	maxVersion uint8
	hdr        [HeaderSize]byte
	body       []byte
	payloads   [][]byte
	metas      [][]byte
	infos      []MetaInfo
}

// NewDecoder reads frames of versions 1 and 2 from r, refusing bodies over
// maxFrameBytes before allocating anything for them. A maxFrameBytes of
// zero or less means DefaultMaxFrameBytes.
func NewDecoder(r io.Reader, maxFrameBytes int) *Decoder {
	if maxFrameBytes <= 0 {
		maxFrameBytes = DefaultMaxFrameBytes
	}
	return &Decoder{r: bufio.NewReaderSize(r, readBufferSize), max: maxFrameBytes, maxVersion: MaxVersion}
}

// MaxFrameBytes is the body cap the Decoder enforces.
func (d *Decoder) MaxFrameBytes() int { return d.max }

// SetMaxVersion makes the Decoder refuse frames of a version above v (1 or
// 2) at step 3, as a daemon that speaks only up to v does.
func (d *Decoder) SetMaxVersion(v uint8) { d.maxVersion = min(max(v, Version), MaxVersion) }

func protoErr(code Code, id uint64, fatal bool, format string, args ...any) *ProtocolError {
	return &ProtocolError{Code: code, RequestID: id, Fatal: fatal, Reason: fmt.Sprintf(format, args...)}
}

// Next decodes the next request frame. It returns io.EOF at a clean end of
// stream (between frames), io.ErrUnexpectedEOF inside a frame, an I/O error
// from the reader, or a *ProtocolError. Payload and metadata slices alias a
// buffer owned by the Decoder and are valid until the next call.
//
// The checks run in this order, and the first failure is returned:
//
//  1. read the 8-byte header
//  2. magic (fatal CodeBadFrame)
//  3. version: 1 or 2 (fatal CodeBadVersion)
//  4. length against the frame cap, before anything is allocated or read
//     (fatal CodeFrameTooLarge)
//  5. type, among those of the frame's version; an unknown type has its
//     body skipped (CodeBadFrame)
//  6. read the body
//
// then for a Hello (version 2): its fields (CodeBadFrame); for a push:
//
//  7. request id present (CodeBadFrame)
//  8. durability byte present and valid (CodeBadDurability when invalid)
//  9. version 1: batch structure: count at least 1, record lengths filling
//     the body exactly (CodeBadFrame);
//     version 2: first sequence number and event time present, then the
//     record structure as for version 1 with a metadata length per record,
//     and sequence numbers that do not wrap (CodeBadFrame)
//  10. version 2: every metadata block passes InspectMeta (CodeBadMeta)
//
// Failures from step 5 on leave the stream positioned at the next frame, so
// they are not Fatal.
func (d *Decoder) Next() (Frame, error) {
	// 1. Header.
	if n, err := io.ReadFull(d.r, d.hdr[:]); err != nil {
		if err == io.EOF && n == 0 {
			return Frame{}, io.EOF
		}
		return Frame{}, readErr("header", err)
	}
	// 2. Magic.
	if m := binary.BigEndian.Uint16(d.hdr[0:2]); m != Magic {
		return Frame{}, protoErr(CodeBadFrame, 0, true, "bad magic 0x%04x", m)
	}
	// 3. Version.
	v := d.hdr[2]
	if v < Version || v > d.maxVersion {
		return Frame{}, protoErr(CodeBadVersion, 0, true, "unsupported version %d", v)
	}
	f, err := d.next(v)
	if err != nil {
		var pe *ProtocolError
		if errors.As(err, &pe) {
			pe.Version = v
		}
	}
	return f, err
}

// next runs steps 4 on for a frame of version v.
func (d *Decoder) next(v uint8) (Frame, error) {
	// 4. Length, before any allocation.
	length := binary.BigEndian.Uint32(d.hdr[4:8])
	if uint64(length) > uint64(d.max) {
		return Frame{}, protoErr(CodeFrameTooLarge, 0, true,
			"frame body of %d bytes exceeds the %d byte cap", length, d.max)
	}
	n := int(length)
	// 5. Type.
	t := FrameType(d.hdr[3])
	if t != TypePush && t != TypePushBatch && (t != TypeHello || v < Version2) {
		if _, err := d.r.Discard(n); err != nil {
			return Frame{}, readErr("body", err)
		}
		return Frame{}, protoErr(CodeBadFrame, 0, false, "unknown version-%d request type %s", v, t)
	}
	// 6. Body.
	body, err := d.readBody(n)
	if err != nil {
		return Frame{}, readErr("body", err)
	}
	if t == TypeHello {
		return decodeHello(body)
	}
	// 7. Request id.
	if len(body) < 8 {
		return Frame{}, protoErr(CodeBadFrame, 0, false,
			"%s body of %d bytes has no request id", t, len(body))
	}
	id := binary.BigEndian.Uint64(body[0:8])
	// 8. Durability.
	if len(body) < PushPrefixSize {
		return Frame{}, protoErr(CodeBadFrame, id, false, "%s body has no durability byte", t)
	}
	dur := Durability(body[8])
	if !dur.Valid() {
		return Frame{}, protoErr(CodeBadDurability, id, false, "unknown durability byte 0x%02x", byte(dur))
	}
	f := Frame{Type: t, Push: Push{Version: v, RequestID: id, Durability: dur.normalise()}}
	if v == Version {
		err = d.records1(&f.Push, t, body)
	} else {
		err = d.records2(&f.Push, t, body)
	}
	return f, err
}

// decodeHello checks a Hello body.
func decodeHello(body []byte) (Frame, error) {
	if len(body) < HelloBodySize {
		return Frame{}, protoErr(CodeBadFrame, 0, false, "Hello body of %d bytes, want %d", len(body), HelloBodySize)
	}
	h := Hello{MaxVersion: body[0], Flags: body[1]}
	copy(h.Producer[:], body[2:18])
	if h.MaxVersion < Version2 {
		return Frame{}, protoErr(CodeBadFrame, 0, false, "Hello with highest version %d", h.MaxVersion)
	}
	if h.Flags&FlagIdempotent != 0 && h.Producer == (ProducerID{}) {
		return Frame{}, protoErr(CodeBadFrame, 0, false, "Hello asks for an idempotent producer with a zero producer id")
	}
	return Frame{Type: TypeHello, Push: Push{Version: Version2}, Hello: h}, nil
}

// records1 is step 9 of a version-1 push.
func (d *Decoder) records1(p *Push, t FrameType, body []byte) error {
	id := p.RequestID
	if t == TypePush {
		d.payloads = append(d.payloads[:0], body[PushPrefixSize:len(body):len(body)])
		p.Payloads = d.payloads
		return nil
	}
	if len(body) < BatchPrefixSize {
		return protoErr(CodeBadFrame, id, false, "PushBatch body has no record count")
	}
	count := binary.BigEndian.Uint32(body[9:13])
	rest := body[BatchPrefixSize:]
	if err := d.checkCount(id, count, len(rest), BatchRecordOverhead); err != nil {
		return err
	}
	for i := range count {
		if len(rest) < BatchRecordOverhead {
			return protoErr(CodeBadFrame, id, false, "PushBatch record %d: missing length", i)
		}
		l := binary.BigEndian.Uint32(rest[:4])
		rest = rest[4:]
		if uint64(l) > uint64(len(rest)) {
			return protoErr(CodeBadFrame, id, false,
				"PushBatch record %d: length %d exceeds the %d bytes left", i, l, len(rest))
		}
		d.payloads = append(d.payloads, rest[:l:l])
		rest = rest[l:]
	}
	if len(rest) != 0 {
		return protoErr(CodeBadFrame, id, false, "PushBatch has %d bytes after its %d records", len(rest), count)
	}
	p.Payloads = d.payloads
	return nil
}

// checkCount refuses a batch count of zero or one the body cannot hold
// (every record needs at least its fixed part), before the payload slices
// are grown for it, and resets them.
func (d *Decoder) checkCount(id uint64, count uint32, rest, per int) error {
	if count == 0 {
		return protoErr(CodeBadFrame, id, false, "PushBatch with zero records")
	}
	if uint64(count) > uint64(rest/per) {
		return protoErr(CodeBadFrame, id, false, "PushBatch count %d does not fit in %d body bytes", count, rest)
	}
	if cap(d.payloads) < int(count) {
		d.payloads = make([][]byte, 0, count)
	}
	if cap(d.metas) < int(count) {
		d.metas = make([][]byte, 0, count)
	}
	d.payloads, d.metas = d.payloads[:0], d.metas[:0]
	return nil
}

// records2 is steps 9 and 10 of a version-2 push.
func (d *Decoder) records2(p *Push, t FrameType, body []byte) error {
	id := p.RequestID
	if len(body) < PushPrefixSize+16 {
		return protoErr(CodeBadFrame, id, false, "version-2 %s body has no sequence number and event time", t)
	}
	p.FirstSeq = binary.BigEndian.Uint64(body[9:17])
	p.EventTime = int64(binary.BigEndian.Uint64(body[17:25]))
	if t == TypePush {
		if len(body) < Push2PrefixSize {
			return protoErr(CodeBadFrame, id, false, "version-2 Push body has no metadata length")
		}
		ml := int(binary.BigEndian.Uint16(body[25:27]))
		rest := body[Push2PrefixSize:]
		if ml > len(rest) {
			return protoErr(CodeBadFrame, id, false, "metadata length %d exceeds the %d bytes left", ml, len(rest))
		}
		d.metas = append(d.metas[:0], rest[:ml:ml])
		d.payloads = append(d.payloads[:0], rest[ml:len(rest):len(rest)])
		return d.checkMetas(p)
	}
	if len(body) < Batch2PrefixSize {
		return protoErr(CodeBadFrame, id, false, "PushBatch body has no record count")
	}
	count := binary.BigEndian.Uint32(body[25:29])
	rest := body[Batch2PrefixSize:]
	if err := d.checkCount(id, count, len(rest), Batch2RecordOverhead); err != nil {
		return err
	}
	if uint64(count)-1 > ^p.FirstSeq {
		return protoErr(CodeBadFrame, id, false, "sequence numbers from %d for %d records wrap around", p.FirstSeq, count)
	}
	for i := range count {
		if len(rest) < Batch2RecordOverhead {
			return protoErr(CodeBadFrame, id, false, "PushBatch record %d: missing lengths", i)
		}
		l := uint64(binary.BigEndian.Uint32(rest[:4]))
		ml := uint64(binary.BigEndian.Uint16(rest[4:6]))
		rest = rest[Batch2RecordOverhead:]
		if l+ml > uint64(len(rest)) {
			return protoErr(CodeBadFrame, id, false,
				"PushBatch record %d: payload %d and metadata %d bytes exceed the %d bytes left", i, l, ml, len(rest))
		}
		d.metas = append(d.metas, rest[:ml:ml])
		d.payloads = append(d.payloads, rest[ml:ml+l:ml+l])
		rest = rest[ml+l:]
	}
	if len(rest) != 0 {
		return protoErr(CodeBadFrame, id, false, "PushBatch has %d bytes after its %d records", len(rest), count)
	}
	return d.checkMetas(p)
}

// checkMetas is step 10: it sets p's payloads, and its metas and their
// summaries when any record has one.
func (d *Decoder) checkMetas(p *Push) error {
	p.Payloads = d.payloads
	for i, m := range d.metas {
		if len(m) == 0 {
			continue
		}
		info, err := InspectMeta(m)
		if err != nil {
			return protoErr(CodeBadMeta, p.RequestID, false, "record %d: %v", i, err)
		}
		if p.Metas == nil {
			p.Metas = d.metas
			if cap(d.infos) < len(d.metas) {
				d.infos = make([]MetaInfo, len(d.metas))
			}
			d.infos = d.infos[:len(d.metas)]
			clear(d.infos)
			p.MetaInfos = d.infos
		}
		d.infos[i] = info
		p.Replay = p.Replay || info.Replay
	}
	return nil
}

// readBody reads n body bytes into the reused buffer. When the buffer must
// grow it grows step by step as bytes arrive, so a peer announcing a large
// body has to send it before the memory is committed.
func (d *Decoder) readBody(n int) ([]byte, error) {
	if n <= keptBodyBytes && cap(d.body) > keptBodyBytes {
		// A large frame grew the buffer: drop it rather than keep the
		// largest frame's size for the connection's life (the previous
		// frame's slices, if still held, keep it alive until released).
		d.body = nil
	}
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
