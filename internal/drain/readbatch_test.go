package drain

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
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

// The copier holds little more than the records it copies, whatever
// their size: large records get exactly their own room, and chunks of
// small ones are at most a quarter unused. Records of 33–64 KiB each used
// to take a fresh 64 KiB chunk, holding up to twice what the budget's
// estimate counted.
func TestCopierHoldsWhatItCopies(t *testing.T) {
	for _, size := range []int{200, 5 << 10, 17 << 10, 33 << 10, 40 << 10, 63 << 10, 70 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			const n = 64
			payload := bytes.Repeat([]byte("p"), size)
			var cp copier
			out := make([]wab.Record, 0, n)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range n {
				out = append(out, cp.copy(wab.Record{Payload: payload}))
			}
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(out)
			got, copied := after.TotalAlloc-before.TotalAlloc, uint64(n*size)
			if limit := copied*4/3 + batchChunkBytes; got > limit {
				t.Fatalf("copying %d records of %d bytes allocated %d bytes, more than %d", n, size, got, limit)
			}
		})
	}
}
