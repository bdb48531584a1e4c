package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// req2 builds a version-2 request frame around body.
func req2(t FrameType, body []byte) []byte {
	return frame(Magic, Version2, t, uint32(len(body)), body)
}

// push2Body builds a version-2 prefix: request id, durability, first seq,
// event time, then rest.
func push2Body(id uint64, d byte, seq uint64, et int64, rest ...byte) []byte {
	b := pushBody(id, d)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint64(b, uint64(et))
	return append(b, rest...)
}

// one2 builds a version-2 Push body with one record.
func one2(id uint64, meta []byte, payload string) []byte {
	b := push2Body(id, 0, 5, 6)
	b = binary.BigEndian.AppendUint16(b, uint16(len(meta)))
	b = append(b, meta...)
	return append(b, payload...)
}

// rec2 is one version-2 batch record with explicit lengths.
func rec2(plen uint32, mlen uint16, meta []byte, payload string) []byte {
	b := binary.BigEndian.AppendUint32(nil, plen)
	b = binary.BigEndian.AppendUint16(b, mlen)
	b = append(b, meta...)
	return append(b, payload...)
}

func batch2Body(id uint64, seq uint64, count uint32, records ...[]byte) []byte {
	b := push2Body(id, 0, seq, 0)
	b = binary.BigEndian.AppendUint32(b, count)
	return append(b, bytes.Join(records, nil)...)
}

// rawMeta builds a metadata block from raw fields (tag, value).
func rawMeta(fields ...any) []byte {
	b := []byte{record.Version}
	for i := 0; i < len(fields); i += 2 {
		v := fields[i+1].([]byte)
		b = binary.AppendUvarint(b, uint64(fields[i].(record.Tag)))
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

func helloBody(maxVersion, flags byte, producer byte) []byte {
	b := []byte{maxVersion, flags}
	p := make([]byte, 16)
	p[15] = producer
	return append(b, p...)
}

var (
	okMeta     = record.Encode(&record.Meta{Key: []byte("k"), Headers: []sink.Header{{Key: "h", Value: []byte("v")}, {Key: "h", Value: nil}}, EventTime: 3})
	replayMeta = record.Encode(&record.Meta{ID: sink.RecordID{9}, HasID: true, Source: "kafka:orders", OriginPos: "orders/3@1234"})
)

func TestDecoderValidationV2(t *testing.T) {
	const max = 256
	tests := []decodeCase{
		// 3 version: 2 is accepted, 3 is not.
		{name: "version 3 push", in: frame(Magic, 3, TypePush, 27, one2(1, nil, "")), step: 3, code: CodeBadVersion, fatal: true},
		// 4 length
		{name: "v2 length over cap", in: frame(Magic, Version2, TypePush, max+1, nil), step: 4, code: CodeFrameTooLarge, fatal: true},
		// 5 type
		{name: "v2 unknown type", in: req2(0x04, []byte("junk")), step: 5, code: CodeBadFrame},
		{name: "v2 HelloAck as request", in: req2(TypeHelloAck, make([]byte, HelloAckBodySize)), step: 5, code: CodeBadFrame},
		// Hello
		{name: "hello", in: req2(TypeHello, helloBody(2, FlagIdempotent, 1)), step: 6, ok: true},
		{name: "hello from a later version", in: req2(TypeHello, helloBody(7, FlagIdempotent|FlagReplay|0x80, 1)), step: 6, ok: true},
		{name: "hello with trailing bytes", in: req2(TypeHello, append(helloBody(2, 0, 0), 1, 2, 3)), step: 6, ok: true},
		{name: "hello without idempotence, zero id", in: req2(TypeHello, helloBody(2, 0, 0)), step: 6, ok: true},
		{name: "hello short", in: req2(TypeHello, helloBody(2, 0, 1)[:17]), step: 6, code: CodeBadFrame},
		{name: "hello max version 1", in: req2(TypeHello, helloBody(1, 0, 1)), step: 6, code: CodeBadFrame},
		{name: "hello idempotent zero producer", in: req2(TypeHello, helloBody(2, FlagIdempotent, 0)), step: 6, code: CodeBadFrame},
		// 7, 8 as in version 1
		{name: "v2 empty push", in: req2(TypePush, nil), step: 7, code: CodeBadFrame},
		{name: "v2 bad durability", in: req2(TypePush, push2Body(3, 9, 0, 0, 0, 0)), step: 8, code: CodeBadDurability, id: 3},
		// 9 prefix and records
		{name: "v2 no sequence number", in: req2(TypePush, pushBody(4, 0, 1, 2, 3)), step: 9, code: CodeBadFrame, id: 4},
		{name: "v2 no event time", in: req2(TypePushBatch, pushBody(4, 0, make([]byte, 12)...)), step: 9, code: CodeBadFrame, id: 4},
		{name: "v2 push no metadata length", in: req2(TypePush, push2Body(5, 0, 0, 0, 1)), step: 9, code: CodeBadFrame, id: 5},
		{name: "v2 push metadata length past body", in: req2(TypePush, push2Body(6, 0, 0, 0, 0, 9, 2, 3)), step: 9, code: CodeBadFrame, id: 6},
		{name: "v2 push empty", in: req2(TypePush, one2(7, nil, "")), step: 9, ok: true, id: 7},
		{name: "v2 batch no count", in: req2(TypePushBatch, push2Body(8, 0, 0, 0, 0, 0)), step: 9, code: CodeBadFrame, id: 8},
		{name: "v2 batch zero count", in: req2(TypePushBatch, batch2Body(9, 0, 0)), step: 9, code: CodeBadFrame, id: 9},
		{name: "v2 batch count beyond body", in: req2(TypePushBatch, batch2Body(10, 0, 2, rec2(1, 0, nil, "a"))), step: 9, code: CodeBadFrame, id: 10},
		{name: "v2 batch record lengths missing", in: req2(TypePushBatch, batch2Body(11, 0, 2, rec2(6, 0, nil, "abcdef"), []byte{0, 0, 0})), step: 9, code: CodeBadFrame, id: 11},
		{name: "v2 batch payload past body", in: req2(TypePushBatch, batch2Body(12, 0, 1, rec2(5, 0, nil, "ab"))), step: 9, code: CodeBadFrame, id: 12},
		{name: "v2 batch metadata past body", in: req2(TypePushBatch, batch2Body(13, 0, 1, rec2(1, 40, okMeta, "a"))), step: 9, code: CodeBadFrame, id: 13},
		{name: "v2 batch trailing bytes", in: req2(TypePushBatch, append(batch2Body(14, 0, 1, rec2(1, 0, nil, "a")), 0)), step: 9, code: CodeBadFrame, id: 14},
		{name: "v2 batch sequence wraps", in: req2(TypePushBatch, batch2Body(15, 1<<64-1, 2, rec2(0, 0, nil, ""), rec2(0, 0, nil, ""))), step: 9, code: CodeBadFrame, id: 15},
		{name: "v2 batch last sequence is max", in: req2(TypePushBatch, batch2Body(16, 1<<64-2, 2, rec2(0, 0, nil, ""), rec2(0, 0, nil, ""))), step: 9, ok: true, id: 16},
		// 10 metadata
		{name: "v2 metadata ok", in: req2(TypePush, one2(20, okMeta, "p")), step: 10, ok: true, id: 20},
		{name: "v2 replay metadata", in: req2(TypePush, one2(21, replayMeta, "p")), step: 10, ok: true, id: 21, replay: true},
		{name: "v2 batch replay in second record", in: req2(TypePushBatch, batch2Body(22, 0, 2, rec2(1, 0, nil, "a"), rec2(1, uint16(len(replayMeta)), replayMeta, "b"))), step: 10, ok: true, id: 22, replay: true},
		{name: "v2 metadata version 1", in: req2(TypePush, one2(23, []byte{1, 3, 0}, "p")), step: 10, code: CodeBadMeta, id: 23},
		{name: "v2 metadata producer id", in: req2(TypePush, one2(24, rawMeta(record.TagProducerID, make([]byte, 16)), "p")), step: 10, code: CodeBadMeta, id: 24},
		{name: "v2 metadata producer seq", in: req2(TypePush, one2(25, rawMeta(record.TagProducerSeq, make([]byte, 8)), "p")), step: 10, code: CodeBadMeta, id: 25},
		{name: "v2 metadata producer field", in: req2(TypePush, one2(25, rawMeta(record.TagProducer, make([]byte, 17)), "p")), step: 10, code: CodeBadMeta, id: 25},
		{name: "v2 metadata reject code", in: req2(TypePush, one2(26, rawMeta(record.TagRejectCode, []byte{1}), "p")), step: 10, code: CodeBadMeta, id: 26},
		{name: "v2 metadata unknown tag", in: req2(TypePush, one2(27, rawMeta(record.Tag(99), []byte("x")), "p")), step: 10, code: CodeBadMeta, id: 27},
		{name: "v2 metadata field past block", in: req2(TypePush, one2(28, []byte{2, 3, 5, 'a'}, "p")), step: 10, code: CodeBadMeta, id: 28},
		{name: "v2 metadata truncated tag", in: req2(TypePush, one2(29, []byte{2, 0x80}, "p")), step: 10, code: CodeBadMeta, id: 29},
		{name: "v2 header key length past field", in: req2(TypePush, one2(30, rawMeta(record.TagHeader, []byte{5, 'a'}), "p")), step: 10, code: CodeBadMeta, id: 30},
		{name: "v2 header name not UTF-8", in: req2(TypePush, one2(31, rawMeta(record.TagHeader, []byte{1, 0xff}), "p")), step: 10, code: CodeBadMeta, id: 31},
		{name: "v2 event time 7 bytes", in: req2(TypePush, one2(32, rawMeta(record.TagEventTime, make([]byte, 7)), "p")), step: 10, code: CodeBadMeta, id: 32},
		{name: "v2 id 15 bytes", in: req2(TypePush, one2(33, rawMeta(record.TagID, make([]byte, 15)), "p")), step: 10, code: CodeBadMeta, id: 33},
		{name: "v2 key twice", in: req2(TypePush, one2(34, rawMeta(record.TagKey, []byte("a"), record.TagKey, []byte("b")), "p")), step: 10, code: CodeBadMeta, id: 34},
		{name: "v2 source not UTF-8", in: req2(TypePush, one2(35, rawMeta(record.TagSource, []byte{0xc3}), "p")), step: 10, code: CodeBadMeta, id: 35},
		{name: "v2 metadata in second batch record", in: req2(TypePushBatch, batch2Body(36, 0, 2, rec2(1, 0, nil, "a"), rec2(1, 3, []byte{2, 99, 0}, "b"))), step: 10, code: CodeBadMeta, id: 36},
		{name: "v2 metadata of only a version byte", in: req2(TypePush, one2(37, []byte{2}, "p")), step: 10, ok: true, id: 37},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runDecodeCase(t, max, tt) })
	}
}

// TestPush2Bytes pins the version-2 layout byte by byte (the example in
// docs/wire_protocol.md).
func TestPush2Bytes(t *testing.T) {
	meta := record.Encode(&record.Meta{Key: []byte("k")})
	got := AppendPush(nil, Push{Version: 2, RequestID: 7, Durability: Durable, FirstSeq: 5, EventTime: 0x10,
		Payloads: [][]byte{[]byte("z")}, Metas: [][]byte{meta}})
	want := []byte{
		0x57, 0x52, 2, 0x01, 0, 0, 0, 32, // header: version 2, Push, 32 body bytes
		0, 0, 0, 0, 0, 0, 0, 7, // request id
		0,                      // durability
		0, 0, 0, 0, 0, 0, 0, 5, // first seq
		0, 0, 0, 0, 0, 0, 0, 0x10, // event time
		0, 4, // metadata length
		2, 3, 1, 'k', // metadata: version 2, tag 3 (key), length 1, "k"
		'z', // payload
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("push bytes\n got %x\nwant %x", got, want)
	}
	got = AppendPush(nil, Push{Version: 2, RequestID: 8, Durability: Buffered, FirstSeq: 9,
		Payloads: [][]byte{[]byte("a"), []byte("bc")}, Metas: [][]byte{nil, meta}})
	want = []byte{
		0x57, 0x52, 2, 0x02, 0, 0, 0, 48,
		0, 0, 0, 0, 0, 0, 0, 8, 1,
		0, 0, 0, 0, 0, 0, 0, 9,
		0, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 2, // count
		0, 0, 0, 1, 0, 0, 'a', // payload length 1, metadata length 0
		0, 0, 0, 2, 0, 4, 2, 3, 1, 'k', 'b', 'c',
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("batch bytes\n got %x\nwant %x", got, want)
	}
	hello := AppendHello(nil, Hello{MaxVersion: 2, Flags: FlagIdempotent | FlagReplay, Producer: ProducerID{0xaa, 15: 0xbb}})
	wantHello := append([]byte{0x57, 0x52, 2, 0x03, 0, 0, 0, 18, 2, 3, 0xaa}, append(make([]byte, 14), 0xbb)...)
	if !bytes.Equal(hello, wantHello) {
		t.Fatalf("hello bytes\n got %x\nwant %x", hello, wantHello)
	}
	ack := AppendHelloAck(nil, HelloAck{Version: 2, MaxVersion: 2, Flags: 1, MaxFrameBytes: 4 << 20, MaxMetaBytes: MaxMetaBytes})
	wantAck := []byte{0x57, 0x52, 2, 0x83, 0, 0, 0, 12, 2, 2, 1, 0, 0, 0x40, 0, 0, 0, 0, 0xf0, 0}
	if !bytes.Equal(ack, wantAck) {
		t.Fatalf("hello ack bytes\n got %x\nwant %x", ack, wantAck)
	}
}

func TestRoundTripPush2(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789"), 20000)
	cases := []Push{
		{Version: 2, RequestID: 1, Payloads: [][]byte{[]byte("hello")}},
		{Version: 2, RequestID: 2, Durability: Buffered, FirstSeq: 1 << 60, EventTime: -5, Payloads: [][]byte{{}}, Metas: [][]byte{okMeta}},
		{Version: 2, RequestID: 3, FirstSeq: 7, Payloads: [][]byte{[]byte("a"), {}, big}, Metas: [][]byte{okMeta, nil, replayMeta}, Replay: true},
		{Version: 2, RequestID: 4, Payloads: [][]byte{[]byte("a"), []byte("b")}},
		{Version: 1, RequestID: 5, Payloads: [][]byte{[]byte("v1 in between")}},
	}
	var stream []byte
	for _, c := range cases {
		before := len(stream)
		stream = AppendPush(stream, c)
		if got := len(stream) - before - HeaderSize; got != BodySize(c) {
			t.Fatalf("BodySize %d, encoded %d", BodySize(c), got)
		}
	}
	d := NewDecoder(bytes.NewReader(stream), 1<<20)
	for i, c := range cases {
		f, err := d.Next()
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		p := f.Push
		if p.Version != c.Version || p.RequestID != c.RequestID || p.Durability != c.Durability || p.FirstSeq != c.FirstSeq ||
			p.EventTime != c.EventTime || p.Replay != c.Replay || len(p.Payloads) != len(c.Payloads) || (p.Metas == nil) != (c.Metas == nil) {
			t.Fatalf("case %d: got %+v", i, p)
		}
		for j := range c.Payloads {
			if !bytes.Equal(p.Payloads[j], c.Payloads[j]) || cap(p.Payloads[j]) != len(p.Payloads[j]) {
				t.Fatalf("case %d payload %d differs or leaks capacity", i, j)
			}
			if c.Metas != nil && (!bytes.Equal(p.Metas[j], c.Metas[j]) || cap(p.Metas[j]) != len(p.Metas[j])) {
				t.Fatalf("case %d metadata %d differs or leaks capacity", i, j)
			}
			if c.Metas != nil {
				var want MetaInfo
				if len(c.Metas[j]) > 0 {
					want, _ = InspectMeta(c.Metas[j])
				}
				if p.MetaInfos[j] != want {
					t.Fatalf("case %d metadata %d: info %+v, want %+v", i, j, p.MetaInfos[j], want)
				}
			}
		}
		if c.Metas == nil && p.MetaInfos != nil {
			t.Fatalf("case %d: infos %+v without metadata", i, p.MetaInfos)
		}
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatalf("got %v, want io.EOF", err)
	}
}

func TestDecoderMaxVersion1(t *testing.T) {
	in := append(AppendHello(nil, Hello{MaxVersion: 2, Flags: FlagIdempotent, Producer: ProducerID{1}}),
		AppendPush(nil, Push{RequestID: 1, Payloads: [][]byte{[]byte("x")}})...)
	d := NewDecoder(bytes.NewReader(in), 0)
	d.SetMaxVersion(1)
	_, err := d.Next()
	var pe *ProtocolError
	if !errors.As(err, &pe) || pe.Code != CodeBadVersion || !pe.Fatal || pe.Version != 0 {
		t.Fatalf("got %v, want a fatal BadVersion as from a version-1 daemon", err)
	}
	if cap(d.body) != 0 {
		t.Fatal("body read before the version was refused")
	}
}

func TestInspectMeta(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want MetaInfo
		bad  string
	}{
		{name: "empty", in: nil},
		{name: "version only", in: []byte{2}},
		{name: "key headers event time", in: okMeta, want: MetaInfo{HasEventTime: true}},
		{name: "empty key and header", in: record.Encode(&record.Meta{Key: []byte{}, Headers: []sink.Header{{}}})},
		{name: "replay", in: replayMeta, want: MetaInfo{HasID: true, Replay: true}},
		{name: "origin alone", in: rawMeta(record.TagOriginPos, []byte("x")), want: MetaInfo{Replay: true}},
		{name: "too large", in: append([]byte{2}, make([]byte, MaxMetaBytes)...), bad: "limit"},
		{name: "version 1", in: []byte{1}, bad: "version 1"},
		{name: "tag overflow", in: []byte{2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, bad: "bad tag"},
		{name: "no length", in: []byte{2, 3}, bad: "length"},
		{name: "location tag", in: rawMeta(record.TagRejectLocation, make([]byte, 18)), bad: "may not"},
		{name: "event time twice", in: rawMeta(record.TagEventTime, make([]byte, 8), record.TagEventTime, make([]byte, 8)), bad: "twice"},
		{name: "id twice", in: rawMeta(record.TagID, make([]byte, 16), record.TagID, make([]byte, 16)), bad: "twice"},
		{name: "origin not UTF-8", in: rawMeta(record.TagOriginPos, []byte{0xff}), bad: "UTF-8"},
		{name: "header no key length", in: rawMeta(record.TagHeader, []byte{}), bad: "key length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := InspectMeta(tt.in)
			if tt.bad != "" {
				if !errors.Is(err, ErrBadMeta) || !strings.Contains(err.Error(), tt.bad) {
					t.Fatalf("got %v, want ErrBadMeta mentioning %q", err, tt.bad)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
			if len(tt.in) > 0 {
				if _, err := record.Decode(tt.in, record.LegacyOrigin); err != nil {
					t.Fatalf("accepted a block record.Decode refuses: %v", err)
				}
			}
		})
	}
}

func TestResponsesV2(t *testing.T) {
	ackV2 := AppendAckVersion(nil, Version2, 3, 4)
	nackV2 := AppendNackVersion(nil, Version2, 5, CodeNoHello, "send Hello first")
	helloAck := HelloAck{Version: 2, MaxVersion: 2, Flags: FlagIdempotent, MaxFrameBytes: 1 << 20, MaxMetaBytes: 100}
	longAck := frame(Magic, Version2, TypeHelloAck, HelloAckBodySize+3, append(AppendHelloAck(nil, helloAck)[HeaderSize:], 7, 7, 7))
	v1HelloAck := frame(Magic, Version, TypeHelloAck, HelloAckBodySize, AppendHelloAck(nil, helloAck)[HeaderSize:])
	r := bytes.NewReader(bytes.Join([][]byte{ackV2, nackV2, AppendHelloAck(nil, helloAck), longAck, v1HelloAck, AppendAck(nil, 1, 1)}, nil))
	want := []Response{
		{Type: TypeAck, Version: 2, RequestID: 3, Count: 4},
		{Type: TypeNack, Version: 2, RequestID: 5, Code: CodeNoHello, Message: "send Hello first"},
		{Type: TypeHelloAck, Version: 2, Hello: helloAck},
		{Type: TypeHelloAck, Version: 2, Hello: helloAck},
	}
	for i, w := range want {
		got, err := ReadResponse(r)
		if err != nil || got != w {
			t.Fatalf("response %d: got %+v, %v; want %+v", i, got, err, w)
		}
	}
	// A HelloAck is not a version-1 response: skipped, not fatal.
	var pe *ProtocolError
	if _, err := ReadResponse(r); !errors.As(err, &pe) || pe.Fatal {
		t.Fatalf("version-1 HelloAck: got %v", err)
	}
	if got, err := ReadResponse(r); err != nil || got.RequestID != 1 {
		t.Fatalf("after skip: %+v, %v", got, err)
	}
	short := frame(Magic, Version2, TypeHelloAck, 11, make([]byte, 11))
	if _, err := ReadResponse(bytes.NewReader(short)); !errors.As(err, &pe) || !pe.Fatal {
		t.Fatalf("short HelloAck: got %v", err)
	}
}
