package dedup

import (
	"context"
	"encoding/binary"
	"runtime"
	"testing"
)

// TestMemoryBytesPerKey measures the heap a full, churning Memory store
// takes per held key and holds MemoryEntryBytes to it. Each store is
// bounded to a number of keys, claimed with twice as many distinct keys (so
// half are evicted, as in steady state), and the live heap is read before
// and after. 2^19+1 keys is the worst case (the index just grew, load 1/4),
// 2^20 the best (load 1/2).
func TestMemoryBytesPerKey(t *testing.T) {
	if testing.Short() {
		t.Skip("claims 3M keys; skipped with -short")
	}
	for _, keys := range []int64{1<<19 + 1, 1 << 20} {
		heap := heapOf(t, keys)
		per := float64(heap) / float64(keys)
		t.Logf("%d keys: measured %.2f heap bytes per key (MemoryEntryBytes = %d)", keys, per, MemoryEntryBytes)
		// The store's fixed part is not per key.
		if heap > keys*MemoryEntryBytes+fixedBytes {
			t.Errorf("%d keys: measured %.2f bytes per key > MemoryEntryBytes %d: raise the constant",
				keys, per, MemoryEntryBytes)
		}
		if per < MemoryEntryBytes*3/4 {
			t.Errorf("%d keys: measured %.1f bytes per key < 3/4 of MemoryEntryBytes %d: lower the constant",
				keys, per, MemoryEntryBytes)
		}
	}
}

// fixedBytes bounds the heap a Memory takes whatever it holds: its struct
// and the page rounding of its two large arrays.
const fixedBytes = 16 << 10

func heapOf(t *testing.T, keys int64) int64 {
	t.Helper()
	claims := make([]Claim, 256)
	out := make([]Answer, len(claims))
	before := liveHeap()
	m := NewMemory(MemoryOptions{MaxBytes: keys * MemoryEntryBytes})
	var n uint64
	for n < uint64(2*keys) {
		for i := range claims {
			n++
			binary.LittleEndian.PutUint64(claims[i].Key[:], n*0x9e3779b97f4a7c15)
			binary.LittleEndian.PutUint64(claims[i].ID[:], n)
		}
		if err := m.Claim(context.Background(), claims, out); err != nil {
			t.Fatal(err)
		}
	}
	after := liveHeap()
	held, bytes := m.Held()
	runtime.KeepAlive(m)
	if held != keys || bytes != keys*MemoryEntryBytes {
		t.Fatalf("Held() = %d keys, %d bytes; want %d, %d", held, bytes, keys, keys*MemoryEntryBytes)
	}
	return int64(after) - int64(before)
}

func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
