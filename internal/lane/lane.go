// Package lane is weir's one rejection lane: the record type every lane
// stores (Rejected) and the interface every lane implements (Lane). The
// drain's dead letter (package drain, files in the buffer's format under
// <wab_dir>/dead_letter), a secondary's quarantine and the gates'
// quarantines (package quarantine: NDJSON directories; package
// pgquarantine: a Postgres table) are lanes.
//
// Why a record was refused is a record.Rejection; a sink's refusal
// (sink.Rejection) becomes one through record.FromSink and nothing else,
// so every lane names the same refusal with the same code, stage and
// component.
//
// The tools that read a lane back (`weir deadletter`, `weir quarantine`)
// read it as Rejected records too, and replay them under their original
// ids (Rejected.Record.ID): a record replayed twice is one record to every
// idempotent sink.
package lane

import (
	"context"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// Rejected is a record in a rejection lane with why it is there.
type Rejected struct {
	// Sink names the lane: the secondary's name, the gate's, or for the
	// drain's dead letter the sink the drain delivers to.
	Sink string
	// Pos is the record's raw position (0 when not in raw: at a gate, or
	// in the dead letter, which locates a record in the buffer instead —
	// Reject.Shard, Seq and Index).
	Pos uint64
	// OriginPos is where the source read the record
	// ("topic/partition@offset"), when known.
	OriginPos string
	// Record is the record as the refusing sink saw it: its id, source,
	// payload, key, headers, event time, receive time and durability.
	Record sink.Record
	// Reject is the rejection: code, stage, component, rule, error text,
	// attempts, first-seen time (and, in the dead letter, the buffer
	// location).
	Reject record.Rejection
	// Recovery: found by recovery rather than live delivery.
	Recovery bool
	// Meta, when not nil, is the record's own metadata as its gate stored
	// it (a record.Meta encoding: producer id and sequence among the rest).
	// A lane in the buffer's format (the dead letter) keeps it; the others
	// keep what Record holds.
	Meta []byte
	// IDUnknown: Record.ID is not the record's id (a dead letter whose
	// metadata did not decode, or that held none); such a record cannot
	// be replayed under its id. Every other id, all zeros included, is
	// the record's.
	IDUnknown bool
}

// Lane receives rejected records. Reject stores recs and returns nil only
// once they are durable in the lane, or refuses them whole (an error says
// nothing of them is certain to be kept; writing them again adds no
// duplicate a reader would count twice only where the lane says so).
//
// For a secondary a lane is a view for inspection, not the system of
// record (raw keeps every record): the fan-out calls it on its own
// goroutine and buffer, and sheds when it refuses. For a gate and for the
// drain it is where the refused records live, since the destination never
// got them.
type Lane interface {
	Reject(ctx context.Context, recs []Rejected) error
}

// Func adapts a function to Lane.
type Func func(ctx context.Context, recs []Rejected) error

// Reject implements Lane.
func (f Func) Reject(ctx context.Context, recs []Rejected) error { return f(ctx, recs) }

// CountByCode calls f once for each code among recs, in code order, with
// its count.
func CountByCode(recs []Rejected, f func(code record.Code, n int)) {
	var n [256]int
	for i := range recs {
		n[recs[i].Reject.Code]++
	}
	for _, c := range record.Codes() {
		if n[c] > 0 {
			f(c, n[c])
		}
	}
}
