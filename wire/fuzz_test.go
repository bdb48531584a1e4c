package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// fuzzMax is small so that the fuzzer reaches the size check easily.
const fuzzMax = 4096

// FuzzDecoder feeds arbitrary bytes to the Decoder and to ReadResponse. It
// checks that they never panic, that decoder errors are always io.EOF,
// io.ErrUnexpectedEOF or *ProtocolError, that the body buffer never grows
// beyond the frame cap, and that every frame the decoder accepts — a push
// of version 1 or 2, a Hello — encodes back to a frame that decodes to the
// same request.
func FuzzDecoder(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder(bytes.NewReader(data), fuzzMax)
		for frames := 0; ; frames++ {
			fr, err := d.Next()
			if cap(d.body) > fuzzMax {
				t.Fatalf("body buffer %d beyond the %d byte cap", cap(d.body), fuzzMax)
			}
			if cap(d.payloads) > fuzzMax/BatchRecordOverhead+1 || cap(d.metas) > fuzzMax/BatchRecordOverhead+1 {
				t.Fatalf("payload slices %d, %d longer than the body can describe", cap(d.payloads), cap(d.metas))
			}
			if err != nil {
				if err == io.EOF || err == io.ErrUnexpectedEOF {
					break
				}
				var pe *ProtocolError
				if !errors.As(err, &pe) {
					t.Fatalf("frame %d: unexpected error type %T: %v", frames, err, err)
				}
				if pe.Code == 0 || pe.Code > MaxCode || pe.Version > MaxVersion {
					t.Fatalf("frame %d: code %d version %d", frames, pe.Code, pe.Version)
				}
				if pe.Fatal {
					break
				}
				continue
			}
			if fr.Type == TypeHello {
				checkHelloRoundTrip(t, frames, fr.Hello)
				continue
			}
			checkPushRoundTrip(t, frames, fr.Push)
		}

		r := bytes.NewReader(data)
		for {
			_, err := ReadResponse(r)
			if err == nil {
				continue
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				break
			}
			var pe *ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("response: unexpected error type %T: %v", err, err)
			}
			if pe.Fatal {
				break
			}
		}
	})
}

func checkHelloRoundTrip(t *testing.T, frames int, h Hello) {
	t.Helper()
	q, err := NewDecoder(bytes.NewReader(AppendHello(nil, h)), 0).Next()
	if err != nil || q.Type != TypeHello || q.Hello != h {
		t.Fatalf("frame %d: Hello %+v re-decodes as %+v, %v", frames, h, q, err)
	}
}

func checkPushRoundTrip(t *testing.T, frames int, p Push) {
	t.Helper()
	if len(p.Payloads) == 0 || p.Durability == ReservedDurable || !p.Durability.Valid() {
		t.Fatalf("frame %d: accepted %+v", frames, p)
	}
	if p.Metas != nil && (len(p.Metas) != len(p.Payloads) || len(p.MetaInfos) != len(p.Metas)) {
		t.Fatalf("frame %d: %d metas and %d infos for %d payloads", frames, len(p.Metas), len(p.MetaInfos), len(p.Payloads))
	}
	for i := range p.Metas {
		if info, err := InspectMeta(p.Metas[i]); err != nil || info != p.MetaInfos[i] {
			t.Fatalf("frame %d: metadata %d: info %+v, InspectMeta says %+v, %v", frames, i, p.MetaInfos[i], info, err)
		}
	}
	if p.Version < Version2 && (p.Metas != nil || p.FirstSeq != 0 || p.EventTime != 0 || p.Replay) {
		t.Fatalf("frame %d: version-1 push with version-2 fields: %+v", frames, p)
	}
	enc := AppendPush(nil, p)
	if BodySize(p)+HeaderSize != len(enc) {
		t.Fatalf("frame %d: size mismatch", frames)
	}
	q, err := NewDecoder(bytes.NewReader(enc), len(enc)).Next()
	if err != nil {
		t.Fatalf("frame %d: re-decode: %v", frames, err)
	}
	if q.Version != p.Version || q.RequestID != p.RequestID || q.Durability != p.Durability ||
		q.FirstSeq != p.FirstSeq || q.EventTime != p.EventTime || q.Replay != p.Replay ||
		len(q.Payloads) != len(p.Payloads) || (q.Metas == nil) != (p.Metas == nil) {
		t.Fatalf("frame %d: re-decode %+v != %+v", frames, q.Push, p)
	}
	for i := range p.Payloads {
		if !bytes.Equal(q.Payloads[i], p.Payloads[i]) {
			t.Fatalf("frame %d: payload %d differs", frames, i)
		}
		if p.Metas != nil && !bytes.Equal(q.Metas[i], p.Metas[i]) {
			t.Fatalf("frame %d: metadata %d differs", frames, i)
		}
	}
}

// fuzzSeeds are valid frames of every type and both versions, and damaged
// variants of them. The same frames are committed under
// testdata/fuzz/FuzzDecoder.
func fuzzSeeds() [][]byte {
	push := AppendPush(nil, Push{RequestID: 1, Durability: Durable, Payloads: [][]byte{[]byte("hello")}})
	buffered := AppendPush(nil, Push{RequestID: 2, Durability: Buffered, Payloads: [][]byte{{}}})
	batch := AppendPush(nil, Push{RequestID: 3, Durability: Durable, Payloads: [][]byte{[]byte("a"), {}, []byte("ccc")}})
	ack := AppendAck(nil, 4, 3)
	nack := AppendNack(nil, 5, CodeDiskFull, "disk full")

	damaged := func(b []byte, at int, v byte) []byte {
		c := bytes.Clone(b)
		c[at] = v
		return c
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	return append([][]byte{
		push,
		buffered,
		batch,
		ack,
		nack,
		cat(push, batch, buffered),
		damaged(push, 0, 0x00),              // bad magic
		damaged(push, 2, 3),                 // bad version
		damaged(push, 4, 0x7f),              // length far over the cap
		damaged(push, 3, 0x04),              // unknown type
		damaged(push, HeaderSize+8, 0x02),   // reserved durability
		damaged(push, HeaderSize+8, 0x09),   // bad durability
		damaged(batch, HeaderSize+12, 0x00), // count 0
		damaged(batch, HeaderSize+12, 0x09), // count too large
		damaged(batch, HeaderSize+16, 0x20), // record length overruns
		push[:HeaderSize+3],                 // truncated body
		push[:5],                            // truncated header
		cat(damaged(batch, HeaderSize+8, 7), push), // non-fatal error, then a good frame
	}, fuzzSeedsV2()...)
}

// fuzzSeedsV2 are the version-2 seeds (files named v2_* in the corpus).
func fuzzSeedsV2() [][]byte {
	meta := record.Encode(&record.Meta{Key: []byte("k"), Headers: []sink.Header{{Key: "h", Value: []byte("v")}}, EventTime: 7})
	replay := record.Encode(&record.Meta{ID: sink.RecordID{1}, HasID: true, Source: "kafka:t", OriginPos: "t/0@1"})
	hello := AppendHello(nil, Hello{MaxVersion: 2, Flags: FlagIdempotent, Producer: ProducerID{1, 2, 3}})
	helloAck := AppendHelloAck(nil, HelloAck{Version: 2, MaxVersion: 2, Flags: 1, MaxFrameBytes: 4096, MaxMetaBytes: MaxMetaBytes})
	push := AppendPush(nil, Push{Version: 2, RequestID: 1, FirstSeq: 10, EventTime: 99, Payloads: [][]byte{[]byte("hi")}, Metas: [][]byte{meta}})
	bare := AppendPush(nil, Push{Version: 2, RequestID: 2, Durability: Buffered, Payloads: [][]byte{[]byte("x")}})
	batch := AppendPush(nil, Push{Version: 2, RequestID: 3, FirstSeq: 1 << 40, Payloads: [][]byte{[]byte("a"), {}, []byte("ccc")},
		Metas: [][]byte{nil, meta, replay}})
	damaged := func(b []byte, at int, v byte) []byte {
		c := bytes.Clone(b)
		c[at] = v
		return c
	}
	metaAt := HeaderSize + Push2PrefixSize
	return [][]byte{
		hello,
		helloAck,
		push,
		bare,
		batch,
		bytes.Join([][]byte{hello, push, batch, bare}, nil),
		damaged(push, HeaderSize+Push2PrefixSize-1, 0xff),                                                    // metadata length overruns
		damaged(push, metaAt+1, byte(record.TagProducerID)),                                                  // a tag producers may not set
		damaged(push, metaAt, 1),                                                                             // metadata version 1
		damaged(push, metaAt+2, 0x7f),                                                                        // field length overruns the block
		damaged(batch, HeaderSize+Batch2PrefixSize+5, 0x40),                                                  // batch metadata length overruns
		AppendPush(nil, Push{Version: 2, RequestID: 4, FirstSeq: 1<<64 - 2, Payloads: [][]byte{{}, {}, {}}}), // sequence numbers wrap
		damaged(hello, HeaderSize, 1),                                                                        // Hello with highest version 1
		push[:HeaderSize+20],                                                                                 // no sequence number
	}
}

func BenchmarkDecodePush(b *testing.B) {
	benchDecode(b, Push{RequestID: 1, Payloads: [][]byte{make([]byte, 1024)}})
}

func BenchmarkDecodeBatch64(b *testing.B) {
	ps := make([][]byte, 64)
	for i := range ps {
		ps[i] = make([]byte, 256)
	}
	benchDecode(b, Push{RequestID: 1, Payloads: ps})
}

func BenchmarkDecodePush2(b *testing.B) {
	benchDecode(b, Push{Version: 2, RequestID: 1, FirstSeq: 1, EventTime: 1, Payloads: [][]byte{make([]byte, 1024)}})
}

func BenchmarkDecodeBatch64V2(b *testing.B) {
	ps := make([][]byte, 64)
	for i := range ps {
		ps[i] = make([]byte, 256)
	}
	benchDecode(b, Push{Version: 2, RequestID: 1, FirstSeq: 1, EventTime: 1, Payloads: ps})
}

func benchDecode(b *testing.B, p Push) {
	f := AppendPush(nil, p)
	var s []byte
	for len(s) < 1<<16 {
		s = append(s, f...)
	}
	d := NewDecoder(&loopReader{buf: s}, 0)
	b.SetBytes(int64(len(f)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendPush(b *testing.B) {
	benchEncode(b, Push{RequestID: 1, Payloads: [][]byte{make([]byte, 1024)}})
}

func BenchmarkAppendBatch64(b *testing.B) {
	ps := make([][]byte, 64)
	for i := range ps {
		ps[i] = make([]byte, 256)
	}
	benchEncode(b, Push{RequestID: 1, Payloads: ps})
}

func benchEncode(b *testing.B, p Push) {
	buf := make([]byte, 0, PushBodySize(p.Payloads)+HeaderSize)
	b.SetBytes(int64(cap(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendPush(buf[:0], p)
	}
}
