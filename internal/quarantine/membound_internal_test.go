package quarantine

import (
	"bytes"
	"context"
	"testing"

	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/sink"
)

// TestEncodeBufferReleased: after a batch of large records (16 MiB, 64 KiB
// each) the encode buffer a Writer keeps is at most 2 MiB (KeptBufBytes,
// docs/flow_control.md, "Buffers outside records"); before, it kept the
// largest batch's encoding.
func TestEncodeBufferReleased(t *testing.T) {
	w, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	recs := make([]lane.Rejected, 256)
	for i := range recs {
		recs[i] = lane.Rejected{Sink: "pg", Pos: uint64(i + 1),
			Record: sink.Record{Payload: bytes.Repeat([]byte{'a' + byte(i%26)}, 64<<10), Source: "socket"}}
	}
	if err := w.Reject(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	if c := cap(w.buf); c > 2<<20 {
		t.Errorf("after a 16 MiB batch the writer keeps an encode buffer of %d bytes (bound %d)", c, 2<<20)
	}
	if got := w.Bytes(); got < 16<<20 {
		t.Errorf("the quarantine files hold %d bytes, want the batch's 16 MiB and more", got)
	}
}
