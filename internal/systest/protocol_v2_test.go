package systest

import (
	"testing"
	"time"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/wire"
)

func push2Frame(id, seq uint64, payload string, meta []byte) []byte {
	p := wire.Push{Version: 2, RequestID: id, FirstSeq: seq, EventTime: 1, Payloads: [][]byte{[]byte(payload)}}
	if meta != nil {
		p.Metas = [][]byte{meta}
	}
	return wire.AppendPush(nil, p)
}

// TestProtocolV2Frames, through the real binary: version-1 frames are
// still accepted and answered in version 1; a version-2 push needs a
// Hello; version-2 frames with bad metadata or record lengths get their
// documented Nack, keep the connection open and store nothing.
func TestProtocolV2Frames(t *testing.T) {
	d := newDaemon(t)
	d.start()
	c := rawDial(t, d.socket)
	expect := func(v uint8, typ wire.FrameType, id uint64, code wire.Code) {
		t.Helper()
		r := readResponse(t, c)
		if r.Version != v || r.Type != typ || r.RequestID != id || r.Code != code {
			t.Fatalf("got %+v, want version %d %s id %d code %s", r, v, typ, id, code)
		}
	}
	c.Write(pushFrame(1, wire.Durable, "v1-before-hello"))
	expect(1, wire.TypeAck, 1, 0)
	c.Write(push2Frame(2, 0, "v2-before-hello", nil))
	expect(2, wire.TypeNack, 2, wire.CodeNoHello)

	c.Write(wire.AppendHello(nil, wire.Hello{MaxVersion: 2, Flags: wire.FlagIdempotent | wire.FlagReplay, Producer: wire.ProducerID{7}}))
	r := readResponse(t, c)
	if r.Type != wire.TypeHelloAck || r.Hello.Version != 2 || r.Hello.Flags != wire.FlagIdempotent|wire.FlagReplay {
		t.Fatalf("Hello on the Unix socket answered %+v", r)
	}

	// Metadata length past the end of the body.
	f := push2Frame(3, 1, "meta-overrun", []byte{record.Version})
	f[wire.HeaderSize+wire.Push2PrefixSize-1] = 0xff
	c.Write(f)
	expect(2, wire.TypeNack, 3, wire.CodeBadFrame)
	// A header whose key length runs past its field.
	c.Write(push2Frame(4, 2, "bad-header", []byte{record.Version, byte(record.TagHeader), 2, 9, 'k'}))
	expect(2, wire.TypeNack, 4, wire.CodeBadMeta)
	// A field only the daemon may set.
	c.Write(push2Frame(5, 3, "own-seq", record.Encode(&record.Meta{HasProducer: true, Producer: wire.ProducerID{1}, Seq: 9})))
	expect(2, wire.TypeNack, 5, wire.CodeBadMeta)
	// A batch record whose payload and metadata lengths exceed the body.
	b := wire.AppendPush(nil, wire.Push{Version: 2, RequestID: 6, Payloads: [][]byte{[]byte("batch-a"), []byte("batch-b")}})
	b[wire.HeaderSize+wire.Batch2PrefixSize+3] = 0x7f
	c.Write(b)
	expect(2, wire.TypeNack, 6, wire.CodeBadFrame)

	c.Write(push2Frame(7, 4, "v2-good", record.Encode(&record.Meta{Key: []byte("k")})))
	expect(2, wire.TypeAck, 7, 0)
	c.Write(pushFrame(8, wire.Buffered, "v1-after-hello"))
	expect(1, wire.TypeAck, 8, 0)

	got := waitDelivered(t, d, map[string]bool{"v1-before-hello": true, "v2-good": true, "v1-after-hello": true}, 30*time.Second)
	for _, p := range []string{"v2-before-hello", "meta-overrun", "bad-header", "own-seq", "batch-a", "batch-b"} {
		if got[p] != 0 {
			t.Errorf("refused record %q reached the sink", p)
		}
	}
}
