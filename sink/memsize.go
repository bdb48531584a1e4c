package sink

import "unsafe"

// recordStructSize and headerStructSize are what a Record and a Header
// occupy before the bytes they point to.
const (
	recordStructSize = int64(unsafe.Sizeof(Record{}))
	headerStructSize = int64(unsafe.Sizeof(Header{}))
	positionSize     = int64(unsafe.Sizeof(Positioned{}.Pos))
)

// The Go runtime allocates an object larger than largeObject as whole
// pages of runtimePage bytes (a "large object"): a 33 KiB payload copied
// into an allocation of its own occupies 40 KiB.
const (
	largeObject = 32 << 10
	runtimePage = 8 << 10
)

// payloadSize is what a payload of n bytes occupies as an allocation of
// its own: n, rounded up to whole pages when it is a large object.
func payloadSize(n int) int64 {
	if n <= largeObject {
		return int64(n)
	}
	return int64((n + runtimePage - 1) &^ (runtimePage - 1))
}

// MemSize is the number of bytes r keeps alive in memory: the struct, its
// payload, key and source, and its headers. Bytes that alias one another
// (a key and a payload cut from one buffer) are counted once each, and a
// payload larger than 32 KiB as the runtime allocates it on its own
// (rounded up to its 8 KiB pages: up to a fifth more), so it never
// undercounts what r alone holds. It is what flow control reserves for a
// record held between two stages (docs/flow_control.md).
func (r *Record) MemSize() int64 {
	n := recordStructSize + payloadSize(len(r.Payload)) + int64(len(r.Key)+len(r.Source))
	for i := range r.Headers {
		n += headerStructSize + int64(len(r.Headers[i].Key)+len(r.Headers[i].Value))
	}
	return n
}

// MemSize is what p keeps alive in memory: its record's MemSize and its
// position. It is what a recovery window reserves per record, and what
// RawReader.ReadFrom's maxBytes counts.
func (p *Positioned) MemSize() int64 { return positionSize + p.Record.MemSize() }
