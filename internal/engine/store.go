package engine

import (
	"context"

	"github.com/weir-io/weir/source"
)

// CoverageStore is the offset store as the fan-out uses it: every
// secondary's coverage, the raw end the writer acknowledged, and the
// cursors of store-managed sources. It must live with primary raw — a file
// in raw's directory (OffsetStore) or a table in raw's database — and
// never inside a sink it describes.
//
// The lag/lead rule binds every implementation: Cover is called only after
// the sink's durable ack; what is persisted may lag what was covered in
// memory, never lead it. Save returns only once the cursor is durable.
type CoverageStore interface {
	source.CursorStore
	// Coverage returns a copy of the sink's coverage.
	Coverage(sinkName string) SpanSet
	// Known reports whether the store has ever recorded the sink.
	Known(sinkName string) bool
	// Cover records [lo, hi) as durably received by the sink (lo == hi
	// registers the sink).
	Cover(sinkName string, lo, hi uint64)
	// Clamp drops coverage at or past end (raw lost a tail it had never
	// acknowledged); it reports whether anything was dropped.
	Clamp(sinkName string, end uint64) bool
	// NoteRawEnd records the raw end this process has acknowledged.
	NoteRawEnd(end uint64)
	// RawEnd is the raw end a writer recorded (a recovery-only reader's
	// read limit).
	RawEnd() uint64
	// Flush persists the coverage recorded so far.
	Flush(ctx context.Context) error
	// Reload merges what other writers persisted.
	Reload(ctx context.Context) error
	// Where names where the store is kept, for logs.
	Where() string
}

var _ CoverageStore = (*OffsetStore)(nil)
