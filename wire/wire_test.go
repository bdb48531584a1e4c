package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

// frame builds a raw frame with an arbitrary header.
func frame(magic uint16, version uint8, t FrameType, length uint32, body []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, magic)
	b = append(b, version, byte(t))
	b = binary.BigEndian.AppendUint32(b, length)
	return append(b, body...)
}

// req builds a request frame with a correct header around body.
func req(t FrameType, body []byte) []byte {
	return frame(Magic, Version, t, uint32(len(body)), body)
}

// pushBody builds request_id, durability, then raw rest.
func pushBody(id uint64, d byte, rest ...byte) []byte {
	b := binary.BigEndian.AppendUint64(nil, id)
	b = append(b, d)
	return append(b, rest...)
}

// batchBody builds a PushBatch body with the given count and records
// (lengths taken from the records unless lens is given).
func batchBody(id uint64, d byte, count uint32, records ...[]byte) []byte {
	b := pushBody(id, d)
	b = binary.BigEndian.AppendUint32(b, count)
	for _, r := range records {
		b = binary.BigEndian.AppendUint32(b, uint32(len(r)))
		b = append(b, r...)
	}
	return b
}

func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

var errBoom = errors.New("boom")

func TestDecoderValidation(t *testing.T) {
	const max = 64
	tests := []decodeCase{
		// 1 header
		{name: "clean EOF", in: nil, step: 1, want: io.EOF},
		{name: "partial header", in: []byte{0x57, 0x52, 1}, step: 1, want: io.ErrUnexpectedEOF},
		// 2 magic
		{name: "bad magic", in: frame(0x5753, Version, TypePush, 9, pushBody(1, 0)), step: 2, code: CodeBadFrame, fatal: true},
		{name: "zero magic", in: make([]byte, 8), step: 2, code: CodeBadFrame, fatal: true},
		// 3 version
		{name: "version 0", in: frame(Magic, 0, TypePush, 9, pushBody(1, 0)), step: 3, code: CodeBadVersion, fatal: true},
		{name: "version 3", in: frame(Magic, 3, TypePush, 9, pushBody(1, 0)), step: 3, code: CodeBadVersion, fatal: true},
		{name: "bad version before bad length", in: frame(Magic, 3, TypePush, 1<<31, nil), step: 3, code: CodeBadVersion, fatal: true},
		// 4 length
		{name: "length over cap", in: frame(Magic, Version, TypePush, max+1, nil), step: 4, code: CodeFrameTooLarge, fatal: true},
		{name: "length max uint32", in: frame(Magic, Version, TypePushBatch, 0xFFFFFFFF, nil), step: 4, code: CodeFrameTooLarge, fatal: true},
		{name: "length over cap with unknown type", in: frame(Magic, Version, 0x7F, max+1, nil), step: 4, code: CodeFrameTooLarge, fatal: true},
		{name: "length at cap", in: req(TypePush, pushBody(5, 1, make([]byte, max-PushPrefixSize)...)), step: 4, ok: true, id: 5},
		// 5 type
		{name: "unknown type", in: req(0x04, []byte("junk")), step: 5, code: CodeBadFrame},
		{name: "Hello is not a version-1 type", in: req(TypeHello, make([]byte, HelloBodySize)), step: 5, code: CodeBadFrame},
		{name: "response type as request", in: req(TypeAck, make([]byte, 12)), step: 5, code: CodeBadFrame},
		{name: "unknown type empty body", in: req(0x00, nil), step: 5, code: CodeBadFrame},
		{name: "unknown type truncated body", in: frame(Magic, Version, 0x03, 10, []byte("abc")), step: 5, want: io.ErrUnexpectedEOF},
		// 6 body
		{name: "truncated body", in: frame(Magic, Version, TypePush, 20, pushBody(1, 0, 'x')), step: 6, want: io.ErrUnexpectedEOF},
		{name: "header only", in: frame(Magic, Version, TypePush, 20, nil), step: 6, want: io.ErrUnexpectedEOF},
		// 7 request id
		{name: "empty push body", in: req(TypePush, nil), step: 7, code: CodeBadFrame},
		{name: "short request id", in: req(TypePushBatch, []byte{0, 0, 0, 1}), step: 7, code: CodeBadFrame},
		// 8 durability
		{name: "missing durability", in: req(TypePush, binary.BigEndian.AppendUint64(nil, 7)), step: 8, code: CodeBadFrame, id: 7},
		{name: "durability 0x03", in: req(TypePush, pushBody(8, 3, 'x')), step: 8, code: CodeBadDurability, id: 8},
		{name: "durability 0xff batch", in: req(TypePushBatch, batchBody(9, 0xff, 1, []byte("x"))), step: 8, code: CodeBadDurability, id: 9},
		{name: "bad durability before bad batch", in: req(TypePushBatch, pushBody(10, 4)), step: 8, code: CodeBadDurability, id: 10},
		{name: "reserved durability accepted", in: req(TypePush, pushBody(11, 2, 'x')), step: 8, ok: true, id: 11},
		// 9 batch structure
		{name: "batch missing count", in: req(TypePushBatch, pushBody(12, 0, 0, 0)), step: 9, code: CodeBadFrame, id: 12},
		{name: "batch zero count", in: req(TypePushBatch, batchBody(13, 0, 0)), step: 9, code: CodeBadFrame, id: 13},
		{name: "batch count beyond body", in: req(TypePushBatch, batchBody(14, 0, 3, []byte("a"))), step: 9, code: CodeBadFrame, id: 14},
		{name: "batch huge count", in: req(TypePushBatch, batchBody(15, 0, 0xFFFFFFFF, []byte("a"))), step: 9, code: CodeBadFrame, id: 15},
		{name: "batch record overruns body", in: req(TypePushBatch, append(pushBody(16, 0, u32(1)...), append(u32(10), 'a', 'b')...)), step: 9, code: CodeBadFrame, id: 16},
		{name: "batch trailing bytes", in: req(TypePushBatch, append(batchBody(17, 0, 1, []byte("ab")), 'z')), step: 9, code: CodeBadFrame, id: 17},
		{name: "batch fewer records than count", in: req(TypePushBatch, append(batchBody(18, 0, 2, []byte("abcdef")), 0, 0)), step: 9, code: CodeBadFrame, id: 18},
		{name: "batch of one", in: req(TypePushBatch, batchBody(19, 1, 1, []byte("abc"))), step: 9, ok: true, id: 19},
		{name: "batch with empty records", in: req(TypePushBatch, batchBody(20, 0, 2, nil, nil)), step: 9, ok: true, id: 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runDecodeCase(t, max, tt) })
	}
}

// decodeCase is one row of a validation table: the bytes, the step of the
// validation order they exercise, and what must come of them — an I/O
// outcome (want), a *ProtocolError (code, fatal, id), or a frame (ok, id,
// replay).
type decodeCase struct {
	name   string
	in     []byte
	step   int
	want   error // io.EOF, io.ErrUnexpectedEOF, or nil with code set
	code   Code
	fatal  bool
	id     uint64
	ok     bool // a valid frame is expected instead of an error
	replay bool
}

// runDecodeCase decodes tt.in with a frame cap of max. After a non-fatal
// refusal or a valid frame, the valid version-1 frame appended after it
// must still decode.
func runDecodeCase(t *testing.T, max int, tt decodeCase) {
	t.Helper()
	valid := req(TypePush, pushBody(99, 0, 'o', 'k'))
	in := append(append([]byte(nil), tt.in...), valid...)
	if tt.want != nil || tt.fatal {
		in = tt.in
	}
	d := NewDecoder(bytes.NewReader(in), max)
	f, err := d.Next()
	switch {
	case tt.ok:
		if err != nil {
			t.Fatalf("step %d: got %v, want a frame", tt.step, err)
		}
		if f.Version != tt.in[2] || f.RequestID != tt.id || f.Durability.normalise() != f.Durability || f.Replay != tt.replay {
			t.Fatalf("got %+v", f)
		}
	case tt.want != nil:
		if err != tt.want {
			t.Fatalf("step %d: got %v, want %v", tt.step, err, tt.want)
		}
		return
	default:
		var pe *ProtocolError
		if !errors.As(err, &pe) {
			t.Fatalf("step %d: got %v (%T), want *ProtocolError", tt.step, err, err)
		}
		if pe.Code != tt.code || pe.Fatal != tt.fatal || pe.RequestID != tt.id {
			t.Fatalf("step %d: got code=%s fatal=%v id=%d (%s), want code=%s fatal=%v id=%d",
				tt.step, pe.Code, pe.Fatal, pe.RequestID, pe.Reason, tt.code, tt.fatal, tt.id)
		}
		// The version to answer in is known once the version was accepted.
		var wantV uint8
		if tt.step > 3 {
			wantV = tt.in[2]
		}
		if pe.Version != wantV {
			t.Fatalf("error version %d, want %d", pe.Version, wantV)
		}
		if pe.Fatal {
			if tt.step <= 4 && cap(d.body) != 0 {
				t.Fatalf("body buffer allocated (%d) before the header was validated", cap(d.body))
			}
			return
		}
	}
	f, err = d.Next()
	if err != nil || f.RequestID != 99 || string(f.Payloads[0]) != "ok" {
		t.Fatalf("frame after: got %+v, %v", f, err)
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatalf("end: got %v, want io.EOF", err)
	}
}

func TestDecoderOversizedReadsNoBody(t *testing.T) {
	in := append(frame(Magic, Version, TypePush, 1<<20, nil), make([]byte, 1<<20)...)
	cr := &countingReader{r: bytes.NewReader(in)}
	d := NewDecoder(cr, 1024)
	_, err := d.Next()
	var pe *ProtocolError
	if !errors.As(err, &pe) || pe.Code != CodeFrameTooLarge || !pe.Fatal {
		t.Fatalf("got %v", err)
	}
	if cap(d.body) != 0 {
		t.Fatalf("allocated %d body bytes", cap(d.body))
	}
	if cr.n > readBufferSize {
		t.Fatalf("read %d bytes, more than one read-ahead buffer", cr.n)
	}
}

func TestDecoderIOErrors(t *testing.T) {
	d := NewDecoder(errReader{errBoom}, 0)
	if _, err := d.Next(); !errors.Is(err, errBoom) {
		t.Fatalf("header: got %v", err)
	}
	r := io.MultiReader(bytes.NewReader(req(TypePush, pushBody(1, 0, 1, 2, 3))[:12]), errReader{errBoom})
	d = NewDecoder(r, 0)
	if _, err := d.Next(); !errors.Is(err, errBoom) {
		t.Fatalf("body: got %v", err)
	}
	if d.MaxFrameBytes() != DefaultMaxFrameBytes {
		t.Fatalf("default cap %d", d.MaxFrameBytes())
	}
}

func TestRoundTripPush(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789"), 20000) // grows the body buffer in steps
	cases := []Push{
		{RequestID: 1, Durability: Durable, Payloads: [][]byte{[]byte("hello")}},
		{RequestID: 2, Durability: Buffered, Payloads: [][]byte{{}}},
		{RequestID: 1<<64 - 1, Durability: Durable, Payloads: [][]byte{[]byte("a"), {}, []byte("ccc")}},
		{RequestID: 4, Durability: Buffered, Payloads: [][]byte{big}},
		{RequestID: 5, Durability: Durable, Payloads: [][]byte{big[:100], big}},
		{RequestID: 6, Durability: Durable, Payloads: [][]byte{[]byte("small again")}},
	}
	var stream []byte
	for _, c := range cases {
		before := len(stream)
		stream = AppendPush(stream, c)
		if got := len(stream) - before - HeaderSize; got != PushBodySize(c.Payloads) {
			t.Fatalf("PushBodySize %d, encoded %d", PushBodySize(c.Payloads), got)
		}
	}
	d := NewDecoder(bytes.NewReader(stream), 1<<20)
	for i, c := range cases {
		p, err := d.Next()
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if p.RequestID != c.RequestID || p.Durability != c.Durability || len(p.Payloads) != len(c.Payloads) {
			t.Fatalf("case %d: got %+v", i, p)
		}
		for j := range c.Payloads {
			if !bytes.Equal(p.Payloads[j], c.Payloads[j]) {
				t.Fatalf("case %d payload %d differs", i, j)
			}
			if cap(p.Payloads[j]) != len(p.Payloads[j]) {
				t.Fatalf("case %d payload %d: capacity leaks into the shared buffer", i, j)
			}
		}
		if cap(d.body) > 1<<20 {
			t.Fatalf("body buffer %d beyond the cap", cap(d.body))
		}
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatalf("got %v, want io.EOF", err)
	}
}

func TestEncodeTypes(t *testing.T) {
	one := AppendPush(nil, Push{RequestID: 1, Payloads: [][]byte{[]byte("x")}})
	if FrameType(one[3]) != TypePush {
		t.Fatalf("one payload encoded as %s", FrameType(one[3]))
	}
	two := AppendPush(nil, Push{RequestID: 1, Payloads: [][]byte{[]byte("x"), []byte("y")}})
	if FrameType(two[3]) != TypePushBatch {
		t.Fatalf("two payloads encoded as %s", FrameType(two[3]))
	}
	res := AppendPush(nil, Push{RequestID: 1, Durability: ReservedDurable, Payloads: [][]byte{[]byte("x")}})
	if res[HeaderSize+8] != byte(Durable) {
		t.Fatalf("reserved durability encoded as 0x%02x", res[HeaderSize+8])
	}
	want := []byte{0x57, 0x52, 1, 0x01, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 7, 1, 'z'}
	if got := AppendPush(nil, Push{RequestID: 7, Durability: Buffered, Payloads: [][]byte{[]byte("z")}}); !bytes.Equal(got, want) {
		t.Fatalf("push bytes\n got %x\nwant %x", got, want)
	}
	wantAck := []byte{0x57, 0x52, 1, 0x81, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 3}
	if got := AppendAck(nil, 0x102, 3); !bytes.Equal(got, wantAck) {
		t.Fatalf("ack bytes\n got %x\nwant %x", got, wantAck)
	}
	wantNack := []byte{0x57, 0x52, 1, 0x82, 0, 0, 0, 14, 0, 0, 0, 0, 0, 0, 0, 9, 0, 6, 0, 2, 'n', 'o'}
	if got := AppendNack(nil, 9, CodeDiskFull, "no"); !bytes.Equal(got, wantNack) {
		t.Fatalf("nack bytes\n got %x\nwant %x", got, wantNack)
	}
}

func TestResponseRoundTrip(t *testing.T) {
	long := strings.Repeat("é", 600) // 1200 bytes: truncated at a character boundary
	var s []byte
	s = AppendAck(s, 1, 1)
	s = AppendNack(s, 2, CodeQueueTimeout, "queue full")
	s = AppendAck(s, 1<<63, 1000)
	s = AppendNack(s, 4, CodeInternal, long)
	s = AppendNack(s, 5, CodeShuttingDown, "")
	r := bytes.NewReader(s)
	want := []Response{
		{Type: TypeAck, Version: 1, RequestID: 1, Count: 1},
		{Type: TypeNack, Version: 1, RequestID: 2, Code: CodeQueueTimeout, Message: "queue full"},
		{Type: TypeAck, Version: 1, RequestID: 1 << 63, Count: 1000},
		{Type: TypeNack, Version: 1, RequestID: 4, Code: CodeInternal, Message: strings.Repeat("é", 512)},
		{Type: TypeNack, Version: 1, RequestID: 5, Code: CodeShuttingDown},
	}
	for i, w := range want {
		got, err := ReadResponse(r)
		if err != nil || got != w {
			t.Fatalf("response %d: got %+v, %v; want %+v", i, got, err, w)
		}
	}
	if _, err := ReadResponse(r); err != io.EOF {
		t.Fatalf("got %v, want io.EOF", err)
	}
}

func TestReadResponseErrors(t *testing.T) {
	nackBody := func(id uint64, code uint16, msgLen uint16, msg string) []byte {
		b := binary.BigEndian.AppendUint64(nil, id)
		b = binary.BigEndian.AppendUint16(b, code)
		b = binary.BigEndian.AppendUint16(b, msgLen)
		return append(b, msg...)
	}
	tests := []struct {
		name  string
		in    []byte
		want  error
		code  Code
		fatal bool
	}{
		{name: "partial header", in: []byte{0x57}, want: io.ErrUnexpectedEOF},
		{name: "bad magic", in: frame(1, Version, TypeAck, 12, make([]byte, 12)), code: CodeBadFrame, fatal: true},
		{name: "bad version", in: frame(Magic, 9, TypeAck, 12, make([]byte, 12)), code: CodeBadVersion, fatal: true},
		{name: "too large", in: frame(Magic, Version, TypeNack, 1<<20, nil), code: CodeFrameTooLarge, fatal: true},
		{name: "short ack", in: req(TypeAck, make([]byte, 11)), code: CodeBadFrame, fatal: true},
		{name: "long ack", in: req(TypeAck, make([]byte, 13)), code: CodeBadFrame, fatal: true},
		{name: "truncated ack", in: frame(Magic, Version, TypeAck, 12, make([]byte, 5)), want: io.ErrUnexpectedEOF},
		{name: "short nack", in: req(TypeNack, make([]byte, 11)), code: CodeBadFrame, fatal: true},
		{name: "nack msg_len too long", in: req(TypeNack, nackBody(1, 4, 5, "abc")), code: CodeBadFrame, fatal: true},
		{name: "nack msg_len too short", in: req(TypeNack, nackBody(1, 4, 1, "abc")), code: CodeBadFrame, fatal: true},
		{name: "truncated nack", in: frame(Magic, Version, TypeNack, 20, nackBody(1, 4, 8, "ab")), want: io.ErrUnexpectedEOF},
		{name: "request type", in: req(TypePush, pushBody(1, 0, 'x')), code: CodeBadFrame},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			if tt.want == nil {
				in = append(append([]byte(nil), tt.in...), AppendAck(nil, 42, 1)...)
			}
			r := bytes.NewReader(in)
			_, err := ReadResponse(r)
			if tt.want != nil {
				if err != tt.want {
					t.Fatalf("got %v, want %v", err, tt.want)
				}
				return
			}
			var pe *ProtocolError
			if !errors.As(err, &pe) || pe.Code != tt.code || pe.Fatal != tt.fatal {
				t.Fatalf("got %v, want code %s fatal %v", err, tt.code, tt.fatal)
			}
			if !pe.Fatal {
				if got, err := ReadResponse(r); err != nil || got.RequestID != 42 {
					t.Fatalf("after skip: %+v, %v", got, err)
				}
			}
		})
	}
	if _, err := ReadResponse(errReader{errBoom}); !errors.Is(err, errBoom) {
		t.Fatalf("io error: got %v", err)
	}
}

func TestCodeNames(t *testing.T) {
	want := map[Code]string{
		CodeFrameTooLarge: "FrameTooLarge", CodeBadVersion: "BadVersion",
		CodeBadDurability: "BadDurability", CodeBadFrame: "BadFrame",
		CodeQueueTimeout: "QueueTimeout", CodeDiskFull: "DiskFull",
		CodeShardFailed: "ShardFailed", CodeShuttingDown: "ShuttingDown",
		CodeInternal: "Internal", CodeNoHello: "NoHello", CodeBadMeta: "BadMeta",
		CodeNotPermitted: "NotPermitted", CodeOverloaded: "Overloaded", 0: "Code(0)", 77: "Code(77)",
	}
	for c, name := range want {
		if c.String() != name {
			t.Errorf("Code(%d).String() = %q, want %q", uint16(c), c.String(), name)
		}
	}
	retry := map[Code]bool{CodeQueueTimeout: true, CodeDiskFull: true, CodeShardFailed: true, CodeShuttingDown: true, CodeOverloaded: true}
	for c := Code(0); c < 16; c++ {
		if c.Retryable() != retry[c] {
			t.Errorf("%s.Retryable() = %v", c, c.Retryable())
		}
	}
	pe := &ProtocolError{Code: CodeBadFrame, Reason: "bad magic"}
	if pe.Error() != "wire: BadFrame: bad magic" {
		t.Errorf("Error() = %q", pe.Error())
	}
	if TypePushBatch.String() != "PushBatch" || TypeHello.String() != "Hello" ||
		TypeHelloAck.String() != "HelloAck" || FrameType(0x7f).String() != "FrameType(0x7f)" {
		t.Error("FrameType names")
	}
	if Buffered.String() != "Buffered" || Durability(9).Valid() || !ReservedDurable.Valid() {
		t.Error("Durability")
	}
}

// loopReader serves buf over and over.
type loopReader struct {
	buf []byte
	off int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.buf[l.off:])
	l.off = (l.off + n) % len(l.buf)
	return n, nil
}

func TestDecoderNoSteadyStateAllocation(t *testing.T) {
	var v1, v2 []byte
	v1 = AppendPush(v1, Push{RequestID: 1, Payloads: [][]byte{make([]byte, 700)}})
	v1 = AppendPush(v1, Push{RequestID: 2, Payloads: [][]byte{make([]byte, 10), make([]byte, 20), make([]byte, 30)}})
	v2 = AppendPush(v2, Push{Version: 2, RequestID: 1, Payloads: [][]byte{make([]byte, 700)}, Metas: [][]byte{okMeta}})
	v2 = AppendPush(v2, Push{Version: 2, RequestID: 2, Payloads: [][]byte{make([]byte, 10), make([]byte, 20)}, Metas: [][]byte{okMeta, replayMeta}})
	v2 = AppendPush(v2, Push{Version: 2, RequestID: 3, Payloads: [][]byte{make([]byte, 10), make([]byte, 20), {}}})
	for _, s := range [][]byte{v1, v2} {
		d := NewDecoder(&loopReader{buf: s}, 0)
		for range 6 { // warm up the buffers
			if _, err := d.Next(); err != nil {
				t.Fatal(err)
			}
		}
		allocs := testing.AllocsPerRun(1000, func() {
			if _, err := d.Next(); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Fatalf("version %d: %.1f allocations per frame, want 0", s[2], allocs)
		}
	}
}
