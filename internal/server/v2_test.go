package server

import (
	"bufio"
	"bytes"
	"context"
	"math"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
	"github.com/weir-io/weir/wire"
)

// recordingBackend keeps a copy of every record submitted, then passes the
// request on.
type recordingBackend struct {
	Backend
	mu   sync.Mutex
	recs []storedRecord
}

type storedRecord struct {
	payload, meta []byte
}

func (b *recordingBackend) Submit(ctx context.Context, shard int, req *wab.Request, wait time.Duration) error {
	b.record(req)
	return b.Backend.Submit(ctx, shard, req, wait)
}

func (b *recordingBackend) SubmitInline(ctx context.Context, shard int, req *wab.Request, wait time.Duration) error {
	b.record(req)
	return b.Backend.SubmitInline(ctx, shard, req, wait)
}

func (b *recordingBackend) record(req *wab.Request) {
	b.mu.Lock()
	for i, p := range req.Payloads {
		r := storedRecord{payload: bytes.Clone(p)}
		if req.Metas != nil {
			r.meta = bytes.Clone(req.Metas[i])
		}
		b.recs = append(b.recs, r)
	}
	b.mu.Unlock()
}

func (b *recordingBackend) stored() []storedRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.recs)
}

func newRecordingEnv(t *testing.T) (*env, *recordingBackend) {
	rb := &recordingBackend{}
	e := newEnv(t, envConfig{wrap: func(l *wab.Log) Backend { rb.Backend = l; return rb }})
	return e, rb
}

var testProducer = wire.ProducerID{0xde, 0xad, 15: 0x01}

func (r *rawConn) hello(flags uint8, producer wire.ProducerID) wire.HelloAck {
	r.t.Helper()
	r.send(wire.AppendHello(nil, wire.Hello{MaxVersion: 2, Flags: flags, Producer: producer}))
	resp, err := r.read()
	if err != nil || resp.Type != wire.TypeHelloAck {
		r.t.Fatalf("want HelloAck, got %+v, %v", resp, err)
	}
	return resp.Hello
}

func push2(id, seq uint64, et int64, payloads []string, metas ...[]byte) []byte {
	p := wire.Push{Version: 2, RequestID: id, FirstSeq: seq, EventTime: et}
	for _, s := range payloads {
		p.Payloads = append(p.Payloads, []byte(s))
	}
	if len(metas) > 0 {
		p.Metas = metas
	}
	return wire.AppendPush(nil, p)
}

// expect reads one response of version v and type t for request id.
func (r *rawConn) expect(v uint8, t wire.FrameType, id uint64, code wire.Code) wire.Response {
	r.t.Helper()
	resp, err := r.read()
	if err != nil || resp.Version != v || resp.Type != t || resp.RequestID != id || resp.Code != code {
		r.t.Fatalf("want v%d %s id=%d code=%s, got %+v, %v", v, t, id, code, resp, err)
	}
	return resp
}

func decodeStored(t *testing.T, r storedRecord) record.Meta {
	t.Helper()
	m, err := record.Decode(r.meta, record.LegacyOrigin)
	if err != nil {
		t.Fatalf("stored meta %x: %v", r.meta, err)
	}
	return m
}

func TestHelloAndIdempotentPush(t *testing.T) {
	e, rb := newRecordingEnv(t)
	c := e.dial()
	ack := c.hello(wire.FlagIdempotent|wire.FlagReplay|0x80, testProducer)
	want := wire.HelloAck{Version: 2, MaxVersion: 2, Flags: wire.FlagIdempotent | wire.FlagReplay,
		MaxFrameBytes: wire.DefaultMaxFrameBytes, MaxMetaBytes: wire.MaxMetaBytes}
	if ack != want {
		t.Fatalf("HelloAck %+v, want %+v", ack, want)
	}
	c.send(push2(1, 100, 5000, []string{"a"}))
	c.expect(2, wire.TypeAck, 1, 0)
	c.send(push2(2, 101, 6000, []string{"b", "c"}))
	c.expect(2, wire.TypeAck, 2, 0)
	c.push(3, wire.Durable, []byte("v1 after hello")) // version 1 still works, answered in version 1
	c.expect(1, wire.TypeAck, 3, 0)

	// The same records resent on another connection of the same producer
	// get the same ids.
	c2 := e.dial()
	c2.hello(wire.FlagIdempotent, testProducer)
	c2.send(push2(1, 101, 6000, []string{"b", "c"}))
	c2.expect(2, wire.TypeAck, 1, 0)

	recs := rb.stored()
	if len(recs) != 6 {
		t.Fatalf("%d records stored, want 6", len(recs))
	}
	wantSeq := []uint64{100, 101, 102, 0, 101, 102}
	wantET := []int64{5000, 6000, 6000, 0, 6000, 6000}
	ids := make([]sink.RecordID, len(recs))
	for i, r := range recs {
		m := decodeStored(t, r)
		if i == 3 {
			if len(r.meta) != 0 {
				t.Fatalf("version-1 record stored with meta %x", r.meta)
			}
			continue
		}
		if !m.HasProducer || m.Producer != testProducer || m.Seq != wantSeq[i] || m.EventTime != wantET[i] || m.HasID {
			t.Fatalf("record %d: meta %+v", i, m)
		}
		ids[i] = m.RecordID(r.payload, record.Derivation{})
		if ids[i] != record.ProducerRecordID(testProducer, wantSeq[i], r.payload) {
			t.Fatalf("record %d: id %x", i, ids[i])
		}
	}
	if ids[1] != ids[4] || ids[2] != ids[5] || ids[1] == ids[2] {
		t.Fatalf("resent records got ids %x %x, first sent %x %x", ids[4], ids[5], ids[1], ids[2])
	}
}

func TestV2RecordMetadataStored(t *testing.T) {
	e, rb := newRecordingEnv(t)
	c := e.dial()
	c.hello(wire.FlagIdempotent|wire.FlagReplay, testProducer)
	own := record.Encode(&record.Meta{Key: []byte("k1"), Headers: []sink.Header{{Key: "h", Value: []byte("v")}, {Key: "h", Value: []byte("w")}}, EventTime: 42})
	keyOnly := record.Encode(&record.Meta{Key: []byte{}})
	replay := record.Encode(&record.Meta{ID: sink.RecordID{7}, HasID: true, Source: "kafka:orders", OriginPos: "orders/1@9", EventTime: 3})
	c.send(push2(1, 10, 1000, []string{"own", "key", "bare", "replayed"}, own, keyOnly, nil, replay))
	c.expect(2, wire.TypeAck, 1, 0)

	recs := rb.stored()
	if len(recs) != 4 {
		t.Fatalf("%d records", len(recs))
	}
	m := decodeStored(t, recs[0])
	if string(m.Key) != "k1" || len(m.Headers) != 2 || m.Headers[1].Key != "h" || string(m.Headers[1].Value) != "w" ||
		m.EventTime != 42 || !m.HasProducer || m.Seq != 10 {
		t.Fatalf("record with its own metadata: %+v", m)
	}
	m = decodeStored(t, recs[1])
	if m.Key == nil || len(m.Key) != 0 || m.EventTime != 1000 || m.Seq != 11 {
		t.Fatalf("record with an empty key: %+v", m)
	}
	m = decodeStored(t, recs[2])
	if m.Key != nil || m.EventTime != 1000 || m.Seq != 12 || m.Producer != testProducer {
		t.Fatalf("record without metadata: %+v", m)
	}
	if !bytes.Equal(recs[3].meta, replay) {
		t.Fatalf("replayed record stored as %x, want its metadata as sent %x", recs[3].meta, replay)
	}
	m = decodeStored(t, recs[3])
	if m.RecordID(recs[3].payload, record.Derivation{}) != (sink.RecordID{7}) || m.Source != "kafka:orders" || m.HasProducer {
		t.Fatalf("replayed record: %+v", m)
	}
}

func TestV2SessionWithoutIdempotence(t *testing.T) {
	e, rb := newRecordingEnv(t)
	c := e.dial()
	if ack := c.hello(0, wire.ProducerID{}); ack.Flags != 0 {
		t.Fatalf("granted %x", ack.Flags)
	}
	c.send(push2(1, 10, 0, []string{"plain"}))
	c.send(push2(2, 10, 77, []string{"timed"}))
	c.expect(2, wire.TypeAck, 1, 0)
	c.expect(2, wire.TypeAck, 2, 0)
	recs := rb.stored()
	if len(recs[0].meta) != 0 {
		t.Fatalf("record with nothing to store kept meta %x", recs[0].meta)
	}
	if m := decodeStored(t, recs[1]); m.HasProducer || m.EventTime != 77 {
		t.Fatalf("meta %+v", m)
	}
}

// TestV2Refusals: each refusal of a version-2 frame has its documented
// Nack, keeps the connection open, and stores nothing.
func TestV2Refusals(t *testing.T) {
	e, rb := newRecordingEnv(t)
	c := e.dial()
	c.send(push2(1, 0, 0, []string{"before hello"}))
	c.expect(2, wire.TypeNack, 1, wire.CodeNoHello)
	c.hello(wire.FlagIdempotent, testProducer) // replay not asked for
	c.send(wire.AppendHello(nil, wire.Hello{MaxVersion: 2, Flags: wire.FlagIdempotent, Producer: wire.ProducerID{9}}))
	c.expect(2, wire.TypeNack, 0, wire.CodeBadFrame)
	replay := record.Encode(&record.Meta{ID: sink.RecordID{1}, HasID: true})
	c.send(push2(2, 0, 0, []string{"replay"}, replay))
	c.expect(2, wire.TypeNack, 2, wire.CodeNotPermitted)

	badHeader := []byte{record.Version, byte(record.TagHeader), 2, 9, 'a'} // key length 9 in a 2-byte field
	c.send(push2(3, 0, 0, []string{"x"}, badHeader))
	c.expect(2, wire.TypeNack, 3, wire.CodeBadMeta)
	c.send(push2(4, 0, 0, []string{"x"}, record.Encode(&record.Meta{HasProducer: true, Producer: wire.ProducerID{2}})))
	c.expect(2, wire.TypeNack, 4, wire.CodeBadMeta)
	f := push2(5, 0, 0, []string{"x"}, []byte{2})
	f[wire.HeaderSize+wire.Push2PrefixSize-1] = 200 // metadata length past the body
	c.send(f)
	c.expect(2, wire.TypeNack, 5, wire.CodeBadFrame)
	c.send(push2(6, 0, 0, []string{"ok"}))
	c.expect(2, wire.TypeAck, 6, 0)
	if n := len(rb.stored()); n != 1 {
		t.Fatalf("%d records stored, want only the last one", n)
	}
}

// TestReplayRefusedOffTheUnixSocket: a connection through any other
// listener is not granted replay.
func TestReplayRefusedOffTheUnixSocket(t *testing.T) {
	e, rb := newRecordingEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Serve(ln)
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
	if ack := c.hello(wire.FlagIdempotent|wire.FlagReplay, testProducer); ack.Flags != wire.FlagIdempotent {
		t.Fatalf("granted %x over TCP", ack.Flags)
	}
	c.send(push2(1, 0, 0, []string{"r"}, record.Encode(&record.Meta{Source: "kafka:x"})))
	c.expect(2, wire.TypeNack, 1, wire.CodeNotPermitted)
	c.send(push2(2, 0, 0, []string{"k"}, record.Encode(&record.Meta{Key: []byte("k")})))
	c.expect(2, wire.TypeAck, 2, 0)
	if n := len(rb.stored()); n != 1 {
		t.Fatalf("%d records stored", n)
	}
}

// TestStoredMetaSize: the size computed before the copy is the size
// written, for every combination of block, event time, session and
// sequence-number length, and what is written decodes to the record's
// producer and sequence number.
func TestStoredMetaSize(t *testing.T) {
	blocks := [][]byte{
		nil,
		{record.Version},
		record.Encode(&record.Meta{Key: []byte("k")}),
		record.Encode(&record.Meta{Key: []byte("k"), EventTime: 5}),
		record.Encode(&record.Meta{ID: sink.RecordID{1}, HasID: true, Source: "s"}),
	}
	for _, flags := range []uint8{0, wire.FlagIdempotent} {
		s := newSession(flags, testProducer)
		for _, first := range []uint64{3, 127, 1<<14 - 1, 1 << 35, math.MaxUint64 - 1} {
			for _, et := range []int64{0, 99} {
				for _, b := range blocks {
					push := &wire.Push{Version: 2, FirstSeq: first, EventTime: et, Payloads: [][]byte{{}, {}}, Metas: [][]byte{b, b}}
					var info wire.MetaInfo
					if len(b) > 0 {
						info, _ = wire.InspectMeta(b)
					}
					for i := range 2 {
						got := s.appendStoredMeta(nil, push, i, b, info)
						if n := s.storedMetaSize(push, i, b, info); n != len(got) {
							t.Fatalf("flags %x seq %d+%d et %d block %x: size %d, wrote %d", flags, first, i, et, b, n, len(got))
						}
						if len(got) == 0 {
							continue
						}
						m, err := record.Decode(got, record.LegacyOrigin)
						if err != nil {
							t.Fatalf("wrote %x: %v", got, err)
						}
						if want := flags != 0 && !info.HasID; m.HasProducer != want || want && (m.Producer != testProducer || m.Seq != first+uint64(i)) {
							t.Fatalf("wrote %x: producer %v %x seq %d, want seq %d", got, m.HasProducer, m.Producer, m.Seq, first+uint64(i))
						}
					}
				}
			}
		}
	}
}

// storedMetasSize, which sizes a batch without metadata blocks in one
// go, agrees with the sum over its records, across every point where the
// sequence numbers' uvarints grow.
func TestStoredMetasSize(t *testing.T) {
	for _, flags := range []uint8{0, wire.FlagIdempotent} {
		s := newSession(flags, testProducer)
		for _, first := range []uint64{0, 1, 100, 127, 128, 16380, 1<<21 - 3, 1<<56 - 1, math.MaxUint64 - 300} {
			for _, n := range []int{1, 2, 5, 200, 300} {
				if first > math.MaxUint64-uint64(n) {
					continue
				}
				for _, et := range []int64{0, 7} {
					push := &wire.Push{Version: 2, FirstSeq: first, EventTime: et, Payloads: make([][]byte, n)}
					want := 0
					for i := range n {
						want += s.storedMetaSize(push, i, nil, wire.MetaInfo{})
					}
					if got := s.storedMetasSize(push); got != want {
						t.Fatalf("flags %x first %d n %d et %d: %d, want %d", flags, first, n, et, got, want)
					}
				}
			}
		}
	}
}
