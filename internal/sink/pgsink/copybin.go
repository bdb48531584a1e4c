package pgsink

import (
	"encoding/binary"
	"io"
	"time"
)

// copyReader streams a batch as PostgreSQL's binary COPY format (COPY …
// FROM STDIN (FORMAT binary); the format is in the PostgreSQL manual, COPY,
// "Binary Format"), encoding the rows as the server reads them, a chunk at
// a time. The column types are the ones validateTable checked the table
// has — uuid, bytea or jsonb, text, text, timestamptz, then bytea, jsonb,
// timestamptz with metadata and bigint with positions — so each value is
// written straight from the batch's columns, without the per-value type
// lookup and boxing of pgx's generic CopyFrom (which spent 10–30 % of the
// daemon's CPU in the Kafka → raw → Postgres benchmark).
type copyReader struct {
	r     *batchRows
	jsonb bool // the payload column is jsonb
	k     int  // the next row to encode
	buf   []byte
	off   int // buf[off:] is not read yet
	done  bool
}

// copyChunk is how many bytes copyReader encodes at a time.
const copyChunk = 64 << 10

// copySignature opens a binary COPY stream: the signature, then a flags
// field and a header extension length, both 0.
var copySignature = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// pgEpochMicros is 2000-01-01 00:00:00 UTC, PostgreSQL's timestamp epoch,
// in microseconds since 1970.
const pgEpochMicros = 946_684_800_000_000

func newCopyReader(r *batchRows, jsonb bool) *copyReader {
	return &copyReader{r: r, jsonb: jsonb, buf: append(make([]byte, 0, copyChunk+4096), copySignature...)}
}

// Read implements io.Reader.
func (c *copyReader) Read(p []byte) (int, error) {
	for c.off == len(c.buf) {
		if c.done {
			return 0, io.EOF
		}
		c.fill()
	}
	n := copy(p, c.buf[c.off:])
	c.off += n
	return n, nil
}

// fill encodes rows into buf until it holds copyChunk bytes or the rows
// end, then the trailer.
func (c *copyReader) fill() {
	if c.off == len(c.buf) {
		c.buf, c.off = c.buf[:0], 0
	}
	r := c.r
	for ; c.k < len(r.ids) && len(c.buf) < copyChunk; c.k++ {
		c.buf = c.appendRow(c.buf, c.k)
	}
	if c.k == len(r.ids) {
		c.buf = binary.BigEndian.AppendUint16(c.buf, 0xffff) // -1: no more tuples
		c.done = true
	}
}

// appendRow appends row k in the column order of batchRows.args.
func (c *copyReader) appendRow(b []byte, k int) []byte {
	r := c.r
	fields := 5
	if r.meta {
		fields += 3
	}
	if r.pos != nil {
		fields++
	}
	b = binary.BigEndian.AppendUint16(b, uint16(fields))
	b = appendField(b, r.ids[k][:])
	if c.jsonb {
		b = binary.BigEndian.AppendUint32(b, uint32(1+len(r.payloads[k])))
		b = append(b, 1) // jsonb's binary version
		b = append(b, r.payloads[k]...)
	} else {
		b = appendField(b, r.payloads[k])
	}
	b = appendText(b, r.sources[k])
	b = appendText(b, r.durs[k])
	b = appendTime(b, r.recv[k])
	if r.meta {
		if r.keys[k] == nil {
			b = appendNull(b)
		} else {
			b = appendField(b, r.keys[k])
		}
		if r.headers[k] == nil {
			b = appendNull(b)
		} else {
			b = binary.BigEndian.AppendUint32(b, uint32(1+len(r.headers[k])))
			b = append(b, 1)
			b = append(b, r.headers[k]...)
		}
		if ev := r.events[k]; ev.Valid {
			b = appendTime(b, ev.Time)
		} else {
			b = appendNull(b)
		}
	}
	if r.pos != nil {
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(r.pos[k]))
	}
	return b
}

func appendField(b, v []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

func appendText(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendNull(b []byte) []byte { return binary.BigEndian.AppendUint32(b, 0xffffffff) }

// appendTime appends a timestamptz: microseconds since 2000-01-01 UTC,
// the sub-microsecond rest cut off as pgx does.
func appendTime(b []byte, t time.Time) []byte {
	b = binary.BigEndian.AppendUint32(b, 8)
	return binary.BigEndian.AppendUint64(b, uint64(t.UnixMicro()-pgEpochMicros))
}
