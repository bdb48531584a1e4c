package parquetsink

import (
	"bytes"
	"testing"
)

// TestStageBufferReleased: after a batch of large records (16 MiB, 64 KiB
// each) the staging buffer the sink keeps is at most 2 MiB
// (KeptBufBytes, docs/flow_control.md, "Buffers outside records"); before,
// it kept the largest batch's frame.
func TestStageBufferReleased(t *testing.T) {
	s := open(t, Options{Dir: t.TempDir()})
	recs := mkRecords("big", 256)
	for i := range recs {
		recs[i].Payload = bytes.Repeat([]byte{byte(i)}, 64<<10)
	}
	commit(t, s, recs)
	if c := cap(s.buf); c > 2<<20 {
		t.Errorf("after a 16 MiB batch the sink keeps a staging buffer of %d bytes (bound %d)", c, 2<<20)
	}
	commit(t, s, mkRecords("small", 10))
}
