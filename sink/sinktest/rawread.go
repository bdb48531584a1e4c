package sinktest

import (
	"context"
	"testing"

	"github.com/weir-io/weir/sink"
)

// ReadBound checks the byte bound of r's ReadFrom (sink.RawReader): the
// read stops before the record that would take what it returns — counted
// as sink.Positioned.MemSize — past maxBytes, returns the first record
// whatever its size, and a read that starts where a bounded one stopped
// goes on with the record it refused. Positions from on must hold at least
// three records and at most 10,000; give them different sizes, and one
// larger than the others together, to test the most.
func ReadBound(t *testing.T, r sink.RawReader, from uint64) {
	t.Helper()
	ctx := context.Background()
	all, err := r.ReadFrom(ctx, from, 10000, 0)
	if err != nil {
		t.Fatalf("ReadFrom(%d) unbounded: %v", from, err)
	}
	if len(all) < 3 {
		t.Fatalf("ReadFrom(%d) unbounded: %d records; the check needs three", from, len(all))
	}
	size := func(recs []sink.Positioned) int64 {
		var n int64
		for i := range recs {
			n += recs[i].MemSize()
		}
		return n
	}
	read := func(maxBytes int64, want int) {
		t.Helper()
		got, err := r.ReadFrom(ctx, from, len(all), maxBytes)
		if err != nil {
			t.Fatalf("ReadFrom(%d, max bytes %d): %v", from, maxBytes, err)
		}
		if len(got) != want {
			t.Fatalf("ReadFrom(%d, max bytes %d): %d records holding %d bytes, want %d holding %d",
				from, maxBytes, len(got), size(got), want, size(all[:want]))
		}
		same(t, all[:want], got)
	}
	two := size(all[:2])
	read(two+all[2].MemSize()-1, 2) // the third would pass the bound
	read(two, 2)                    // the bound met exactly
	read(1, 1)                      // the first record, larger than the bound
	read(-1, len(all))              // no byte bound
	read(size(all), len(all))

	// Paging with a bound below the largest record: each read returns
	// what fits, or the one record larger than the bound, and the next
	// read goes on with the record the previous one refused.
	var largest int64
	for i := range all {
		largest = max(largest, all[i].MemSize())
	}
	bound := largest - 1
	var paged []sink.Positioned
	for p := from; len(paged) < len(all); {
		got, err := r.ReadFrom(ctx, p, len(all), bound)
		if err != nil {
			t.Fatalf("ReadFrom(%d, max bytes %d): %v", p, bound, err)
		}
		if len(got) == 0 {
			t.Fatalf("ReadFrom(%d, max bytes %d) returned nothing, %d records short", p, bound, len(all)-len(paged))
		}
		if n := size(got); n > bound && len(got) > 1 {
			t.Fatalf("ReadFrom(%d, max bytes %d): %d records holding %d bytes", p, bound, len(got), n)
		}
		paged = append(paged, got...)
		p = got[len(got)-1].Pos + 1
	}
	same(t, all, paged[:len(all)])
}

// same fails t unless got holds want's positions and records.
func same(t *testing.T, want, got []sink.Positioned) {
	t.Helper()
	for i := range want {
		if got[i].Pos != want[i].Pos || got[i].Record.ID != want[i].Record.ID || got[i].Record.MemSize() != want[i].Record.MemSize() {
			t.Fatalf("record %d: position %d, id %x, %d bytes; want position %d, id %x, %d bytes", i,
				got[i].Pos, got[i].Record.ID, got[i].Record.MemSize(), want[i].Pos, want[i].Record.ID, want[i].Record.MemSize())
		}
	}
}
