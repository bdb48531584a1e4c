package drain

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
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

// A sub-batch's reservation covers every byte the drain allocates for it
// — the copies of its records (a large record's room, rounded up to the
// runtime's 8 KiB pages; the chunks small ones are carved from) and the
// sub-batch's slice — whatever the records' sizes, once the estimator has
// learnt them. Records of 33 KiB used to be reserved at about their size
// while their copies took 40 KiB each, and a chunk of small records at
// their sizes while it held a quarter more.
func TestSubBatchReservesItsCopies(t *testing.T) {
	for _, size := range []int{200, 5 << 10, 17 << 10, 31 << 10, 33 << 10, 40 << 10, 63 << 10, 70 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			const n = 64
			recs := make([]wab.Record, n)
			for i := range recs {
				recs[i] = wab.Record{Received: int64(i + 1), Payload: bytes.Repeat([]byte{'a' + byte(i%26)}, size)}
			}
			h := wab.Header{Shard: 1, Seq: 1}
			path := filepath.Join(t.TempDir(), "s.wab.sealed")
			if err := wab.WriteSealed(vfs.OS, path, h, recs); err != nil {
				t.Fatal(err)
			}
			adm := newAdmission(newBudget(t, 1<<30, 1), nil, func(bool) {})
			// The estimator learns the records as the drain does.
			srecs := make([]sink.Record, n)
			for i := range recs {
				srecs[i], _ = SinkRecord(h, uint64(i), recs[i])
			}
			for range flow.DefaultMinSamples {
				adm.observe(recs, srecs)
			}
			r, err := wab.OpenSegment(vfs.OS, path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			sr := &segReader{r: r}
			if _, err := sr.next(); err != nil { // the reader's own buffer, grown outside the count
				t.Fatal(err)
			}
			sr.unread()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b, err := readBatch(context.Background(), sr, n, &adm)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			defer adm.release(&b.rv)
			if len(b.recs) != n {
				t.Fatalf("sub-batch of %d records, want %d", len(b.recs), n)
			}
			if got := int64(after.TotalAlloc - before.TotalAlloc); got > b.rv.held {
				t.Errorf("reading %d records of %d bytes allocated %d bytes; the sub-batch reserved %d", n, size, got, b.rv.held)
			}
		})
	}
}
