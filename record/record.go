package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/weir-io/weir/sink"
)

// Version is the first byte of every encoded Meta written by this package.
const Version = 2

// Tag names one field of an encoded Meta; see the package documentation.
type Tag uint64

const (
	TagID              Tag = 1
	TagSource          Tag = 2
	TagKey             Tag = 3
	TagHeader          Tag = 4
	TagEventTime       Tag = 5
	TagProducerID      Tag = 6 // read, no longer written: see TagProducer
	TagProducerSeq     Tag = 7 // read, no longer written: see TagProducer
	TagOriginPos       Tag = 8
	TagProducer        Tag = 9
	TagRejectCode      Tag = 16
	TagRejectStage     Tag = 17
	TagRejectComponent Tag = 18
	TagRejectError     Tag = 19
	TagRejectAttempts  Tag = 20
	TagRejectFirstSeen Tag = 21
	TagRejectLocation  Tag = 22
	TagRejectRule      Tag = 23
)

// MaxErrorBytes bounds Rejection.Error as encoded; longer texts are cut at
// a UTF-8 boundary.
const MaxErrorBytes = 4096

// RejectionRoom is how much of the write-ahead buffer's 65,535-byte meta
// slot a record's stored metadata leaves free, so that a rejection lane
// in the buffer's format (the drain's dead letters) can add the record's
// id, its source and a Rejection when it refuses it: a gate admits no
// more metadata than the slot minus this, and the wire protocol's 60 KiB
// block leaves more. The rejection's error text is then cut to what is
// left.
const RejectionRoom = 1024

// ErrBadMeta is returned (wrapped) by Decode for bytes that are not an
// encoded Meta.
var ErrBadMeta = errors.New("record: malformed meta")

// ProducerID identifies an idempotent producer: chosen once per client
// instance and kept across its reconnects.
type ProducerID [16]byte

// Meta is a record's metadata. The zero Meta is a producer record of wire
// version 1 (no key, no headers, id from its buffer position).
type Meta struct {
	// ID, when HasID, is the record's id, fixed at its origin.
	ID    sink.RecordID
	HasID bool
	// Source names the source instance ("kafka:orders"); empty for
	// producer records, which the drain names "socket".
	Source string
	// Key is the record's key; nil when it has none (an empty non-nil key
	// is kept as such).
	Key []byte
	// Headers are the record's headers, in order (names may repeat).
	Headers []sink.Header
	// EventTime is the record's own time (a broker's timestamp, a
	// producer's stamp), Unix nanoseconds; 0 when it has none.
	EventTime int64
	// Producer and Seq, when HasProducer, identify an idempotent
	// producer's record.
	Producer    ProducerID
	Seq         uint64
	HasProducer bool
	// OriginPos says where the origin keeps the record, for people
	// ("orders/3@1234"); it is not used to derive anything.
	OriginPos string
	// Reject is set on a record in a rejection lane.
	Reject *Rejection
}

// Rejection is why and where a record was rejected.
type Rejection struct {
	Code      Code
	Stage     Stage
	Component string // the sink, source or contract that refused it
	// Rule names the part of a contract that refused it (StageCheck):
	// "decode", "schema" or a quality rule's name.
	Rule     string
	Error    string
	Attempts int
	// FirstSeen is when the record was first rejected, Unix nanoseconds.
	FirstSeen int64
	// Shard, Seq and Index locate the record in the write-ahead buffer it
	// was read from, when HasLocation.
	Shard       uint16
	Seq         uint64
	Index       uint64
	HasLocation bool
}

// Encode returns m's encoding.
func Encode(m *Meta) []byte { return Append(nil, m) }

// Append appends m's encoding to dst.
func Append(dst []byte, m *Meta) []byte {
	dst = append(dst, Version)
	if m.HasID {
		dst = appendField(dst, TagID, m.ID[:])
	}
	if m.Source != "" {
		dst = appendString(dst, TagSource, m.Source)
	}
	if m.Key != nil {
		dst = appendField(dst, TagKey, m.Key)
	}
	for _, h := range m.Headers {
		dst = binary.AppendUvarint(dst, uint64(TagHeader))
		dst = binary.AppendUvarint(dst, uint64(uvarintLen(uint64(len(h.Key)))+len(h.Key)+len(h.Value)))
		dst = binary.AppendUvarint(dst, uint64(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = append(dst, h.Value...)
	}
	if m.EventTime != 0 {
		dst = appendU64(dst, TagEventTime, uint64(m.EventTime))
	}
	if m.OriginPos != "" {
		dst = appendString(dst, TagOriginPos, m.OriginPos)
	}
	if m.HasProducer {
		dst = AppendProducer(dst, m.Producer, m.Seq)
	}
	if r := m.Reject; r != nil {
		dst = appendField(dst, TagRejectCode, []byte{byte(r.Code)})
		if r.Stage != "" {
			dst = appendString(dst, TagRejectStage, string(r.Stage))
		}
		if r.Component != "" {
			dst = appendString(dst, TagRejectComponent, r.Component)
		}
		if r.Error != "" {
			dst = appendString(dst, TagRejectError, truncateUTF8(r.Error, MaxErrorBytes))
		}
		if r.Rule != "" {
			dst = appendString(dst, TagRejectRule, r.Rule)
		}
		if r.Attempts > 0 {
			dst = appendField(dst, TagRejectAttempts, binary.AppendUvarint(nil, uint64(r.Attempts)))
		}
		if r.FirstSeen != 0 {
			dst = appendU64(dst, TagRejectFirstSeen, uint64(r.FirstSeen))
		}
		if r.HasLocation {
			var loc [18]byte
			binary.BigEndian.PutUint16(loc[0:2], r.Shard)
			binary.BigEndian.PutUint64(loc[2:10], r.Seq)
			binary.BigEndian.PutUint64(loc[10:18], r.Index)
			dst = appendField(dst, TagRejectLocation, loc[:])
		}
	}
	return dst
}

// AppendProducer appends the producer field (TagProducer) of an
// idempotent producer's record: the producer id, then seq as a uvarint —
// 19 to 28 bytes in all, 20 or 21 for the first two million records of a
// producer.
func AppendProducer(dst []byte, p ProducerID, seq uint64) []byte {
	dst = append(dst, byte(TagProducer), byte(len(p)+uvarintLen(seq)))
	dst = append(dst, p[:]...)
	return binary.AppendUvarint(dst, seq)
}

// ProducerFieldSize is the size of AppendProducer's field for seq.
func ProducerFieldSize(seq uint64) int { return 2 + len(ProducerID{}) + uvarintLen(seq) }

func appendField(dst []byte, t Tag, v []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(t))
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	return append(dst, v...)
}

func appendString(dst []byte, t Tag, v string) []byte {
	dst = binary.AppendUvarint(dst, uint64(t))
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	return append(dst, v...)
}

func appendU64(dst []byte, t Tag, v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return appendField(dst, t, b[:])
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// Legacy says how to read a version-1 Meta, whose layout depends on where
// the segment lives (see the package documentation).
type Legacy int

const (
	// LegacyOrigin: a segment of the write-ahead buffer.
	LegacyOrigin Legacy = iota
	// LegacyDeadLetter: a file of the dead-letter lane.
	LegacyDeadLetter
)

// Decode decodes an encoded Meta. Key, header values and the id alias b
// only where noted: Key and Header.Value are sub-slices of b, so a caller
// that keeps them past b's lifetime must copy b first. An empty b decodes
// to the zero Meta.
func Decode(b []byte, legacy Legacy) (Meta, error) {
	var m Meta
	if len(b) == 0 {
		return m, nil
	}
	switch b[0] {
	case Version:
	case 1:
		if legacy == LegacyDeadLetter {
			return decodeV1DeadLetter(b)
		}
		return decodeV1Origin(b)
	default:
		return m, fmt.Errorf("%w: version %d", ErrBadMeta, b[0])
	}
	err := Fields(b, m.set)
	return m, err
}

// Fields calls fn with each field of b, an encoded Meta of version 2, in
// the order they are written: its tag and its value (a sub-slice of b,
// capped at its end). It stops at the first error fn returns and returns
// it as is. A tag or length that does not parse, or a length that runs
// past the end of b, is an error wrapping ErrBadMeta, as is a b that does
// not start with Version. Fields neither interprets the values nor checks
// which tags appear: that is the caller's business (Decode; the wire
// protocol's stricter check of what a producer may send). An empty b is
// an error too: the encoding has at least its version byte.
func Fields(b []byte, fn func(t Tag, v []byte) error) error {
	if len(b) == 0 || b[0] != Version {
		return fmt.Errorf("%w: not a version-%d encoding", ErrBadMeta, Version)
	}
	rest := b[1:]
	for len(rest) > 0 {
		tag, n := binary.Uvarint(rest)
		if n <= 0 {
			return fmt.Errorf("%w: bad tag", ErrBadMeta)
		}
		rest = rest[n:]
		l, n := binary.Uvarint(rest)
		if n <= 0 || l > uint64(len(rest)-n) {
			return fmt.Errorf("%w: tag %d: length runs past the end", ErrBadMeta, tag)
		}
		v := rest[n : n+int(l) : n+int(l)]
		rest = rest[n+int(l):]
		if err := fn(Tag(tag), v); err != nil {
			return err
		}
	}
	return nil
}

func (m *Meta) set(t Tag, v []byte) error {
	fixed := func(n int) error {
		if len(v) != n {
			return fmt.Errorf("%w: tag %d: %d bytes, want %d", ErrBadMeta, t, len(v), n)
		}
		return nil
	}
	rej := func() *Rejection {
		if m.Reject == nil {
			m.Reject = &Rejection{}
		}
		return m.Reject
	}
	switch t {
	case TagID:
		if err := fixed(16); err != nil {
			return err
		}
		copy(m.ID[:], v)
		m.HasID = true
	case TagSource:
		m.Source = string(v)
	case TagKey:
		m.Key = v
		if m.Key == nil {
			m.Key = []byte{}
		}
	case TagHeader:
		kl, n := binary.Uvarint(v)
		if n <= 0 || kl > uint64(len(v)-n) {
			return fmt.Errorf("%w: header: bad key length", ErrBadMeta)
		}
		m.Headers = append(m.Headers, sink.Header{Key: string(v[n : n+int(kl)]), Value: v[n+int(kl):]})
	case TagEventTime:
		if err := fixed(8); err != nil {
			return err
		}
		m.EventTime = int64(binary.BigEndian.Uint64(v))
	case TagProducerID:
		if err := fixed(16); err != nil {
			return err
		}
		copy(m.Producer[:], v)
		m.HasProducer = true
	case TagProducerSeq:
		if err := fixed(8); err != nil {
			return err
		}
		m.Seq = binary.BigEndian.Uint64(v)
	case TagOriginPos:
		m.OriginPos = string(v)
	case TagProducer:
		if len(v) <= len(m.Producer) {
			return fmt.Errorf("%w: producer: %d bytes", ErrBadMeta, len(v))
		}
		seq, n := binary.Uvarint(v[len(m.Producer):])
		if n != len(v)-len(m.Producer) {
			return fmt.Errorf("%w: producer: bad sequence number", ErrBadMeta)
		}
		copy(m.Producer[:], v)
		m.Seq, m.HasProducer = seq, true
	case TagRejectCode:
		if err := fixed(1); err != nil {
			return err
		}
		rej().Code = Code(v[0])
	case TagRejectStage:
		rej().Stage = Stage(v)
	case TagRejectComponent:
		rej().Component = string(v)
	case TagRejectError:
		rej().Error = string(v)
	case TagRejectRule:
		rej().Rule = string(v)
	case TagRejectAttempts:
		a, n := binary.Uvarint(v)
		if n != len(v) || a > 1<<31 {
			return fmt.Errorf("%w: attempts", ErrBadMeta)
		}
		rej().Attempts = int(a)
	case TagRejectFirstSeen:
		if err := fixed(8); err != nil {
			return err
		}
		rej().FirstSeen = int64(binary.BigEndian.Uint64(v))
	case TagRejectLocation:
		if err := fixed(18); err != nil {
			return err
		}
		r := rej()
		r.Shard = binary.BigEndian.Uint16(v[0:2])
		r.Seq = binary.BigEndian.Uint64(v[2:10])
		r.Index = binary.BigEndian.Uint64(v[10:18])
		r.HasLocation = true
	}
	return nil // unknown tags are skipped
}

func decodeV1Origin(b []byte) (Meta, error) {
	var m Meta
	if len(b) < 18 || int(b[17]) != len(b)-18 {
		return m, fmt.Errorf("%w: version-1 origin of %d bytes", ErrBadMeta, len(b))
	}
	copy(m.ID[:], b[1:17])
	m.HasID = true
	m.Source = string(b[18:])
	return m, nil
}

const v1DeadLetterFixed = 35

func decodeV1DeadLetter(b []byte) (Meta, error) {
	var m Meta
	if len(b) < v1DeadLetterFixed+1 {
		return m, fmt.Errorf("%w: version-1 dead letter of %d bytes", ErrBadMeta, len(b))
	}
	copy(m.ID[:], b[1:17])
	m.HasID = true
	r := &Rejection{
		Code:        CodeUnknown,
		Shard:       binary.BigEndian.Uint16(b[17:19]),
		Seq:         binary.BigEndian.Uint64(b[19:27]),
		Index:       binary.BigEndian.Uint64(b[27:35]),
		HasLocation: true,
	}
	n, k := binary.Uvarint(b[v1DeadLetterFixed:])
	if k <= 0 {
		return m, fmt.Errorf("%w: version-1 dead letter: bad reason length", ErrBadMeta)
	}
	rest := b[v1DeadLetterFixed+k:]
	if n != uint64(len(rest)) {
		return m, fmt.Errorf("%w: version-1 dead letter: reason length %d, %d bytes left", ErrBadMeta, n, len(rest))
	}
	r.Error = string(rest)
	m.Reject = r
	return m, nil
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
