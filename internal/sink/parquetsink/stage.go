package parquetsink

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// The stage file holds the committed records of the Parquet file being
// built, as a log of frames, one frame per Commit:
//
//	file   = magic(8) { frame }
//	frame  = marker(4) body_len(u32) crc32c(body)(u32) body
//	body   = committed_at(i64 unix nanos) token(32) count(u32) { record }
//	record = id(16) durability(u8) received_at(i64 unix nanos)
//	         source_len(u32) source payload_len(u32) payload
//	         meta_len(u32) meta                          -- version 2 only
//
// meta is the record's key, headers and event time as a record.Meta
// encoding (record.Append; docs/wab_format.md), empty when it has none of
// them. Version 2 stages start with the magic "WPQSTG02" and hold frames
// with the marker "WPQG"; version 1 ("WPQSTG01", frames "WPQF", records
// without meta) was written before records had metadata and is still read
// (a stage a crash left behind is converted at start). A version-1 reader
// refuses a version-2 stage as corrupt rather than dropping it.
//
// Integers are little-endian. The CRC is Castagnoli. A frame is written
// whole and fdatasynced before its Commit returns, so after a crash only the
// last frame can be torn.

const (
	stageMagic     = "WPQSTG02"
	stageMagicV1   = "WPQSTG01"
	stageHeaderLen = int64(len(stageMagic))
	frameMarker    = 0x47515057 // "WPQG": version 2, records with meta
	frameMarkerV1  = 0x46515057 // "WPQF": version 1
	frameHeaderLen = 12
	bodyHeaderLen  = 8 + 32 + 4
	recordFixedLen = 16 + 1 + 8 + 4 + 4 // version 1; version 2 adds 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frame is one decoded stage frame.
type frame struct {
	committed time.Time
	token     sink.DedupToken
	rows      []row
}

// appendFrame encodes records (skipping those whose index is in skip) as one
// frame appended to dst.
func appendFrame(dst []byte, committed time.Time, token sink.DedupToken, recs []sink.Record, skip map[int]bool) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, frameHeaderLen)...)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(committed.UnixNano()))
	dst = append(dst, token[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(recs)-len(skip)))
	for i := range recs {
		if skip[i] {
			continue
		}
		r := &recs[i]
		dst = append(dst, r.ID[:]...)
		dst = append(dst, byte(r.Durability))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(r.Received.UnixNano()))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Source)))
		dst = append(dst, r.Source...)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Payload)))
		dst = append(dst, r.Payload...)
		dst = appendMeta(dst, r)
	}
	body := dst[start+frameHeaderLen:]
	binary.LittleEndian.PutUint32(dst[start:], frameMarker)
	binary.LittleEndian.PutUint32(dst[start+4:], uint32(len(body)))
	binary.LittleEndian.PutUint32(dst[start+8:], crc32.Checksum(body, castagnoli))
	return dst
}

// appendMeta appends a record's meta length and meta (version 2).
func appendMeta(dst []byte, r *sink.Record) []byte {
	m := record.Meta{Key: r.Key, Headers: r.Headers}
	if !r.EventTime.IsZero() {
		m.EventTime = r.EventTime.UnixNano()
	}
	if m.Key == nil && len(m.Headers) == 0 && m.EventTime == 0 {
		return binary.LittleEndian.AppendUint32(dst, 0)
	}
	at := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	dst = record.Append(dst, &m)
	binary.LittleEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	return dst
}

// decodeMeta sets rw's key, headers and event time from a record's meta.
// They alias meta.
func decodeMeta(rw *row, meta []byte) error {
	if len(meta) == 0 {
		return nil
	}
	m, err := record.Decode(meta, record.LegacyOrigin)
	if err != nil {
		return err
	}
	if m.Key != nil {
		rw.Key = &m.Key
	}
	if len(m.Headers) > 0 {
		rw.Headers = make([]header, len(m.Headers))
		for i, h := range m.Headers {
			rw.Headers[i] = header{Key: h.Key, Value: h.Value}
		}
	}
	rw.EventTime = m.EventTime
	return nil
}

// decodeBody parses a frame body whose CRC has been checked, of the given
// format version. Rows alias body.
func decodeBody(body []byte, version int) (frame, error) {
	var fr frame
	if len(body) < bodyHeaderLen {
		return fr, errors.New("frame body too short")
	}
	fr.committed = time.Unix(0, int64(binary.LittleEndian.Uint64(body))).UTC()
	copy(fr.token[:], body[8:40])
	n := binary.LittleEndian.Uint32(body[40:])
	p := body[bodyHeaderLen:]
	fixed := uint64(recordFixedLen)
	if version >= 2 {
		fixed += 4
	}
	if uint64(n)*fixed > uint64(len(p)) {
		return fr, fmt.Errorf("frame claims %d records in %d bytes", n, len(p))
	}
	fr.rows = make([]row, n)
	committedNs := fr.committed.UnixNano()
	for i := range fr.rows {
		if uint64(len(p)) < fixed {
			return fr, fmt.Errorf("record %d truncated", i)
		}
		rw := &fr.rows[i]
		copy(rw.ID[:], p[:16])
		d := sink.Durability(p[16])
		rw.Durability = d.String()
		rw.ReceivedAt = int64(binary.LittleEndian.Uint64(p[17:]))
		rw.CommittedAt = committedNs
		sl := uint64(binary.LittleEndian.Uint32(p[25:]))
		p = p[29:]
		if sl+4 > uint64(len(p)) {
			return fr, fmt.Errorf("record %d: source length %d overruns the frame", i, sl)
		}
		rw.Source = string(p[:sl])
		p = p[sl:]
		pl := uint64(binary.LittleEndian.Uint32(p))
		p = p[4:]
		if pl > uint64(len(p)) {
			return fr, fmt.Errorf("record %d: payload length %d overruns the frame", i, pl)
		}
		rw.Payload = p[:pl:pl]
		p = p[pl:]
		if version < 2 {
			continue
		}
		if len(p) < 4 {
			return fr, fmt.Errorf("record %d: meta length truncated", i)
		}
		ml := uint64(binary.LittleEndian.Uint32(p))
		p = p[4:]
		if ml > uint64(len(p)) {
			return fr, fmt.Errorf("record %d: meta length %d overruns the frame", i, ml)
		}
		if err := decodeMeta(rw, p[:ml:ml]); err != nil {
			return fr, fmt.Errorf("record %d: %w", i, err)
		}
		p = p[ml:]
	}
	if len(p) != 0 {
		return fr, fmt.Errorf("%d trailing bytes after the last record", len(p))
	}
	return fr, nil
}

// frameAt reads and checks the frame at off in a file of the given size.
// A nil error with ok=false means there is no valid frame there (torn,
// truncated, zeros or junk).
func frameAt(r io.ReaderAt, off, size int64) (fr frame, end int64, ok bool, err error) {
	if size-off < frameHeaderLen {
		return fr, 0, false, nil
	}
	var h [frameHeaderLen]byte
	if _, err := r.ReadAt(h[:], off); err != nil {
		return fr, 0, false, err
	}
	version := frameVersion(binary.LittleEndian.Uint32(h[:]))
	if version == 0 {
		return fr, 0, false, nil
	}
	n := int64(binary.LittleEndian.Uint32(h[4:]))
	if n > size-off-frameHeaderLen {
		return fr, 0, false, nil // checked against the file before allocating
	}
	body := make([]byte, n)
	if _, err := r.ReadAt(body, off+frameHeaderLen); err != nil {
		return fr, 0, false, err
	}
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(h[8:]) {
		return fr, 0, false, nil
	}
	fr, derr := decodeBody(body, version)
	if derr != nil {
		// The CRC matched but the body does not parse: written wrong,
		// not torn.
		return fr, 0, false, fmt.Errorf("frame at offset %d: %w", off, derr)
	}
	return fr, off + frameHeaderLen + n, true, nil
}

// frameVersion is the format version a frame marker says, 0 for none.
func frameVersion(marker uint32) int {
	switch marker {
	case frameMarker:
		return 2
	case frameMarkerV1:
		return 1
	}
	return 0
}

// isStageMagic reports whether m is the magic of a stage of either
// version.
func isStageMagic(m []byte) bool { return string(m) == stageMagic || string(m) == stageMagicV1 }

// CorruptionError reports a stage file whose damage is not a torn tail:
// a bad frame with a valid one after it, or a bad header on a file holding
// more than a header.
type CorruptionError struct {
	File   string
	Offset int64
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("parquetsink: %s: corrupt at offset %d: %s", e.File, e.Offset, e.Reason)
}

// scanStage calls fn for every valid frame of a stage file of the given
// size, in order, and returns the end of the last valid frame. What follows
// it is a torn tail unless strict finds a valid frame right after the bad
// one, which is corruption. Without strict (a reader racing a live writer)
// scanning simply stops at the first frame that is not complete.
func scanStage(r io.ReaderAt, name string, size int64, strict bool, fn func(frame, int64) error) (int64, error) {
	if size < stageHeaderLen {
		if strict && size > 0 && !allZero(r, 0, size) && !isMagicPrefix(r, size) {
			return 0, &CorruptionError{File: name, Offset: 0, Reason: "bad header"}
		}
		return 0, nil
	}
	var m [stageHeaderLen]byte
	if _, err := r.ReadAt(m[:], 0); err != nil {
		return 0, fmt.Errorf("parquetsink: read %s: %w", name, err)
	}
	if !isStageMagic(m[:]) {
		if strict && !allZero(r, 0, size) {
			return 0, &CorruptionError{File: name, Offset: 0, Reason: "bad header"}
		}
		return 0, nil
	}
	off := stageHeaderLen
	for {
		fr, end, ok, err := frameAt(r, off, size)
		if err != nil {
			return off, fmt.Errorf("parquetsink: read %s: %w", name, err)
		}
		if !ok {
			break
		}
		if err := fn(fr, off); err != nil {
			return off, err
		}
		off = end
	}
	if strict && off < size {
		// A bad frame whose claimed length fits, followed by a good one,
		// is not a torn tail.
		var h [frameHeaderLen]byte
		if _, err := r.ReadAt(h[:], off); err == nil && frameVersion(binary.LittleEndian.Uint32(h[:])) != 0 {
			next := off + frameHeaderLen + int64(binary.LittleEndian.Uint32(h[4:]))
			if _, _, ok, _ := frameAt(r, next, size); ok {
				return off, &CorruptionError{File: name, Offset: off, Reason: "bad frame followed by a valid one"}
			}
		}
	}
	return off, nil
}

func allZero(r io.ReaderAt, off, n int64) bool {
	buf := make([]byte, 64<<10)
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := r.ReadAt(buf[:k], off); err != nil {
			return false
		}
		if bytes.ContainsFunc(buf[:k], func(r rune) bool { return r != 0 }) {
			return false
		}
		off += k
		n -= k
	}
	return true
}

func isMagicPrefix(r io.ReaderAt, size int64) bool {
	buf := make([]byte, size)
	if _, err := r.ReadAt(buf, 0); err != nil {
		return false
	}
	return bytes.HasPrefix([]byte(stageMagic), buf) || bytes.HasPrefix([]byte(stageMagicV1), buf)
}
