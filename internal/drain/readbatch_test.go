package drain

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/wab"
)

// readBatch returns copies of every record, independent of the reader and
// of each other (each capped at its length), with empty metas and
// payloads as nil, and takes far fewer allocations than records.
func TestReadBatch(t *testing.T) {
	var want []wab.Record
	for i := range 3000 {
		rec := wab.Record{Received: int64(i + 1), Payload: fmt.Appendf(nil, "payload %d", i)}
		switch i % 3 {
		case 1:
			rec.Meta = []byte{2, 3, 1, byte(i)}
		case 2:
			rec.Payload = nil
		}
		want = append(want, rec)
	}
	want[7].Payload = bytes.Repeat([]byte("x"), batchChunkBytes+10) // larger than a chunk
	path := filepath.Join(t.TempDir(), "s.wab.sealed")
	if err := wab.WriteSealed(vfs.OS, path, wab.Header{Shard: 1, Seq: 1}, want); err != nil {
		t.Fatal(err)
	}
	r, err := wab.OpenSegment(vfs.OS, path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []wab.Record
	sr := &segReader{r: r}
	for {
		b, err := readBatch(context.Background(), sr, 1000, &admission{})
		got = append(got, b.recs...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Received != w.Received || !bytes.Equal(g.Payload, w.Payload) || !bytes.Equal(g.Meta, w.Meta) ||
			(len(w.Payload) == 0) != (g.Payload == nil) || (len(w.Meta) == 0) != (g.Meta == nil) ||
			cap(g.Payload) != len(g.Payload) || cap(g.Meta) != len(g.Meta) {
			t.Fatalf("record %d: got %+v, want %+v", i, g, w)
		}
	}
	// Appending to one record's bytes does not touch its neighbour's.
	_ = append(got[0].Payload, '!')
	_ = append(got[1].Meta, '!')
	if !bytes.Equal(got[1].Meta, want[1].Meta) || !bytes.Equal(got[1].Payload, want[1].Payload) {
		t.Fatal("a record's bytes run into the next one's")
	}

	r2, err := wab.OpenSegment(vfs.OS, path)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	allocs := testing.AllocsPerRun(1, func() {
		if _, err := readBatch(context.Background(), &segReader{r: r2}, 1000, &admission{}); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 20 {
		t.Errorf("readBatch of 1000 records: %.0f allocations", allocs)
	}
}
