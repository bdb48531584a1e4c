package sink

import (
	"testing"
	"unsafe"
)

// MemSize counts the struct and every byte the record points to.
func TestMemSize(t *testing.T) {
	base := int64(unsafe.Sizeof(Record{}))
	hdr := int64(unsafe.Sizeof(Header{}))
	for _, tc := range []struct {
		name string
		r    Record
		want int64
	}{
		{"empty", Record{}, base},
		{"payload, key and source", Record{Payload: make([]byte, 100), Key: []byte("k1"), Source: "socket"}, base + 100 + 2 + 6},
		{"headers", Record{Headers: []Header{{Key: "a", Value: []byte("12")}, {Key: "bc"}}}, base + 2*hdr + 1 + 2 + 2},
		// A payload of more than 32 KiB occupies whole 8 KiB pages.
		{"32 KiB payload", Record{Payload: make([]byte, 32<<10)}, base + 32<<10},
		{"33 KiB payload", Record{Payload: make([]byte, 33<<10)}, base + 40<<10},
		{"40 KiB payload", Record{Payload: make([]byte, 40<<10)}, base + 40<<10},
		{"1 MiB + 1 payload", Record{Payload: make([]byte, 1<<20+1)}, base + 1<<20 + 8<<10},
	} {
		if got := tc.r.MemSize(); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
