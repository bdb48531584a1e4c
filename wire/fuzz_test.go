package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// fuzzMax is small so that the fuzzer reaches the size check easily.
const fuzzMax = 4096

// FuzzDecoder feeds arbitrary bytes to the Decoder and to ReadResponse. It
// checks that they never panic, that decoder errors are always io.EOF,
// io.ErrUnexpectedEOF or *ProtocolError, that the body buffer never grows
// beyond the frame cap, and that every frame the decoder accepts encodes
// back to a frame that decodes to the same push.
func FuzzDecoder(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder(bytes.NewReader(data), fuzzMax)
		for frames := 0; ; frames++ {
			p, err := d.Next()
			if cap(d.body) > fuzzMax {
				t.Fatalf("body buffer %d beyond the %d byte cap", cap(d.body), fuzzMax)
			}
			if cap(d.payloads) > fuzzMax/BatchRecordOverhead+1 {
				t.Fatalf("payload slice %d longer than the body can describe", cap(d.payloads))
			}
			if err != nil {
				if err == io.EOF || err == io.ErrUnexpectedEOF {
					break
				}
				var pe *ProtocolError
				if !errors.As(err, &pe) {
					t.Fatalf("frame %d: unexpected error type %T: %v", frames, err, err)
				}
				if pe.Code == 0 || pe.Code > CodeInternal {
					t.Fatalf("frame %d: code %d", frames, pe.Code)
				}
				if pe.Fatal {
					break
				}
				continue
			}
			if len(p.Payloads) == 0 || p.Durability == ReservedDurable || !p.Durability.Valid() {
				t.Fatalf("frame %d: accepted %+v", frames, p)
			}
			enc := AppendPush(nil, p)
			if PushBodySize(p.Payloads)+HeaderSize != len(enc) {
				t.Fatalf("frame %d: size mismatch", frames)
			}
			q, err := NewDecoder(bytes.NewReader(enc), len(enc)).Next()
			if err != nil {
				t.Fatalf("frame %d: re-decode: %v", frames, err)
			}
			if q.RequestID != p.RequestID || q.Durability != p.Durability || len(q.Payloads) != len(p.Payloads) {
				t.Fatalf("frame %d: re-decode %+v != %+v", frames, q, p)
			}
			for i := range p.Payloads {
				if !bytes.Equal(q.Payloads[i], p.Payloads[i]) {
					t.Fatalf("frame %d: payload %d differs", frames, i)
				}
			}
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

// fuzzSeeds are valid frames of every type and damaged variants of them.
// The same frames are committed under testdata/fuzz/FuzzDecoder.
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
	return [][]byte{
		push,
		buffered,
		batch,
		ack,
		nack,
		cat(push, batch, buffered),
		damaged(push, 0, 0x00),              // bad magic
		damaged(push, 2, 2),                 // bad version
		damaged(push, 4, 0x7f),              // length far over the cap
		damaged(push, 3, 0x03),              // unknown type
		damaged(push, HeaderSize+8, 0x02),   // reserved durability
		damaged(push, HeaderSize+8, 0x09),   // bad durability
		damaged(batch, HeaderSize+12, 0x00), // count 0
		damaged(batch, HeaderSize+12, 0x09), // count too large
		damaged(batch, HeaderSize+16, 0x20), // record length overruns
		push[:HeaderSize+3],                 // truncated body
		push[:5],                            // truncated header
		cat(damaged(batch, HeaderSize+8, 7), push), // non-fatal error, then a good frame
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
