package wire

import (
	"bytes"
	"testing"
)

// TestDecoderDropsLargeBody: after a 4 MiB frame, the next frame that
// fits in 1 MiB leaves the decoder's body buffer at most 1 MiB
// (docs/flow_control.md, "Buffers outside records"); before, the buffer
// kept the largest frame's size for the connection's life. Both frames
// decode intact.
func TestDecoderDropsLargeBody(t *testing.T) {
	big := bytes.Repeat([]byte{'b'}, 4<<20)
	var stream []byte
	stream = AppendPush(stream, Push{RequestID: 1, Durability: Durable, Payloads: [][]byte{big}})
	stream = AppendPush(stream, Push{RequestID: 2, Durability: Durable, Payloads: [][]byte{[]byte("small")}})
	d := NewDecoder(bytes.NewReader(stream), 8<<20)
	f, err := d.Next()
	if err != nil {
		t.Fatal(err)
	}
	if p := f.Push.Payloads; len(p) != 1 || !bytes.Equal(p[0], big) {
		t.Fatal("the 4 MiB frame did not decode intact")
	}
	f, err = d.Next()
	if err != nil {
		t.Fatal(err)
	}
	if p := f.Push.Payloads; len(p) != 1 || string(p[0]) != "small" {
		t.Fatalf("the small frame decoded as %q", p)
	}
	if c := cap(d.body); c > 1<<20 {
		t.Errorf("after a small frame the decoder keeps a body buffer of %d bytes (bound %d)", c, 1<<20)
	}
}
