package server

import (
	"encoding/binary"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/wire"
)

// session is what a connection's Hello established (wire version 2).
type session struct {
	flags uint8 // the Hello flags granted
	// tmpl is the head of the stored metadata of a record that brought
	// none of its own: version byte, event time, and the producer field up
	// to its sequence number (record.AppendProducer), in tag order;
	// appendStoredMeta patches the event time and the producer field's
	// length, and appends the sequence number.
	tmpl [metaTemplateSize]byte
}

// Layout of session.tmpl.
const (
	metaTemplateSize = 1 + fieldEventTime + producerHead
	fieldEventTime   = 2 + 8  // tag, length, i64
	producerHead     = 2 + 16 // tag, length, id; the uvarint sequence follows
	tmplEventTime    = 1 + 2  // offset of the event time value
	tmplProducer     = 1 + fieldEventTime
)

func newSession(flags uint8, producer record.ProducerID) *session {
	s := &session{flags: flags}
	t := append(make([]byte, 0, metaTemplateSize+1), record.Version, byte(record.TagEventTime), 8)
	t = append(t, make([]byte, 8)...)
	t = record.AppendProducer(t, producer, 0) // its sequence number is left out
	copy(s.tmpl[:], t)
	return s
}

func (s *session) idempotent() bool { return s.flags&wire.FlagIdempotent != 0 }

// hello answers a Hello: the first one opens the session, a second one is
// refused (the producer id of a connection cannot change).
func (c *conn) hello(h wire.Hello) {
	if c.sess != nil {
		c.answer(wire.Version2, 0, 0, wire.CodeBadFrame, "Hello already received on this connection")
		return
	}
	granted := h.Flags & wire.FlagIdempotent
	if h.Flags&wire.FlagReplay != 0 && c.replay {
		granted |= wire.FlagReplay
	}
	c.sess = newSession(granted, h.Producer)
	c.s.log.Debug("producer session opened", "producer", producerString(h.Producer), "flags", granted, "shard", c.shard)
	ack := &wire.HelloAck{
		Version:       min(h.MaxVersion, wire.MaxVersion),
		MaxVersion:    wire.MaxVersion,
		Flags:         granted,
		MaxFrameBytes: uint32(c.s.opts.MaxFrameBytes),
		MaxMetaBytes:  wire.MaxMetaBytes,
	}
	p := &pending{c: c, version: wire.Version2, helloAck: ack}
	p.done.Store(true)
	c.enqueue(p)
	c.wakeWriter()
}

func producerString(p record.ProducerID) string {
	const hex = "0123456789abcdef"
	var b [32]byte
	for i, v := range p {
		b[2*i], b[2*i+1] = hex[v>>4], hex[v&0xf]
	}
	return string(b[:])
}

// refuseV2 is the Nack a version-2 push gets before it is submitted, or
// 0: pushes need a session, and replay fields a session granted them.
func (c *conn) refuseV2(push *wire.Push) (wire.Code, string) {
	switch {
	case c.sess == nil:
		return wire.CodeNoHello, "a version-2 push needs a Hello first"
	case push.Replay && c.sess.flags&wire.FlagReplay == 0:
		return wire.CodeNotPermitted, "replay fields (id, source, origin position) are accepted only on the Unix socket, after a Hello asking for replay"
	}
	return 0, ""
}

// storedMetaSize is the size of record i's stored metadata (see
// appendStoredMeta); info is its block's summary.
func (s *session) storedMetaSize(push *wire.Push, i int, block []byte, info wire.MetaInfo) int {
	if info.HasID {
		return len(block)
	}
	n := len(block)
	if n == 0 {
		n = 1 // the version byte
	}
	if push.EventTime != 0 && !info.HasEventTime {
		n += fieldEventTime
	}
	if s.idempotent() {
		n += record.ProducerFieldSize(push.FirstSeq + uint64(i))
	}
	if n == 1 && len(block) == 0 {
		return 0 // stored without metadata, as a version-1 record
	}
	return n
}

// storedMetasSize is the size of the stored metadata of all of push's
// records when none brought a block: the same for each but for the
// length of its sequence number.
func (s *session) storedMetasSize(push *wire.Push) int {
	n := len(push.Payloads)
	each := s.storedMetaSize(push, 0, nil, wire.MetaInfo{})
	if each == 0 || !s.idempotent() {
		return n * each
	}
	first := push.FirstSeq
	each -= record.ProducerFieldSize(first)
	return n*each + producerFieldsSize(first, uint64(n))
}

// producerFieldsSize is the sum of record.ProducerFieldSize over the n
// sequence numbers from first, without a pass over them: their uvarints
// grow by one byte at each multiple of 2^7, 2^14, ... (first+n-1 does not
// wrap: the decoder checked it).
func producerFieldsSize(first, n uint64) int {
	total := n * uint64(record.ProducerFieldSize(0)) // every uvarint has a byte
	last := first + n - 1
	for shift := uint(7); shift < 64; shift += 7 {
		bound := uint64(1) << shift
		if last < bound {
			break
		}
		total += last - max(first, bound) + 1 // the numbers from bound on have one more
	}
	return int(total)
}

// appendStoredMeta appends record i's stored metadata to dst: its block as
// sent, plus the frame's event time when the block has none, plus the
// producer field (record.AppendProducer) of an idempotent session. A block
// that carries an id (a replayed record) is stored as sent: its id and
// origin are the record's own.
func (s *session) appendStoredMeta(dst []byte, push *wire.Push, i int, block []byte, info wire.MetaInfo) []byte {
	seq := push.FirstSeq + uint64(i)
	if len(block) == 0 {
		switch {
		case push.EventTime != 0 && s.idempotent():
			return s.appendProducerMeta(dst, push.EventTime, seq)
		case push.EventTime == 0 && !s.idempotent():
			return dst
		}
		dst = append(dst, record.Version)
	} else {
		dst = append(dst, block...)
		if info.HasID {
			return dst
		}
	}
	if push.EventTime != 0 && !info.HasEventTime {
		dst = append(dst, byte(record.TagEventTime), 8)
		dst = binary.BigEndian.AppendUint64(dst, uint64(push.EventTime))
	}
	if s.idempotent() {
		start := len(dst)
		dst = append(dst, s.tmpl[tmplProducer:]...)
		dst = appendSeq(dst, start, seq)
	}
	return dst
}

// appendProducerMeta appends the stored metadata of an idempotent
// session's record that brought no block of its own but has the frame's
// event time: the template, its event time and sequence number filled in.
func (s *session) appendProducerMeta(dst []byte, eventTime int64, seq uint64) []byte {
	start := len(dst)
	dst = append(dst, s.tmpl[:]...)
	binary.BigEndian.PutUint64(dst[start+tmplEventTime:], uint64(eventTime))
	return appendSeq(dst, start+tmplProducer, seq)
}

// appendSeq completes the producer field copied from the template at
// dst[at:]: its length, and the sequence number.
func appendSeq(dst []byte, at int, seq uint64) []byte {
	dst = binary.AppendUvarint(dst, seq)
	dst[at+1] = byte(len(dst) - at - 2)
	return dst
}
