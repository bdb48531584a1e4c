package sink

import "unsafe"

// recordStructSize and headerStructSize are what a Record and a Header
// occupy before the bytes they point to.
const (
	recordStructSize = int64(unsafe.Sizeof(Record{}))
	headerStructSize = int64(unsafe.Sizeof(Header{}))
	positionSize     = int64(unsafe.Sizeof(Positioned{}.Pos))
)

// MemSize is the number of bytes r keeps alive in memory: the struct, its
// payload, key and source, and its headers. Bytes that alias one another
// (a key and a payload cut from one buffer) are counted once each, so it
// never undercounts what r alone holds. It is what flow control reserves
// for a record held between two stages (docs/flow_control.md).
func (r *Record) MemSize() int64 {
	n := recordStructSize + int64(len(r.Payload)+len(r.Key)+len(r.Source))
	for i := range r.Headers {
		n += headerStructSize + int64(len(r.Headers[i].Key)+len(r.Headers[i].Value))
	}
	return n
}

// MemSize is what p keeps alive in memory: its record's MemSize and its
// position. It is what a recovery window reserves per record, and what
// RawReader.ReadFrom's maxBytes counts.
func (p *Positioned) MemSize() int64 { return positionSize + p.Record.MemSize() }
