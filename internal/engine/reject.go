package engine

import (
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// quarantined builds the lane records of a sink's rejections of a batch of
// n records: each is tmpl with the record and its position (at) and the
// rejection record.FromSink maps (tmpl.Reject gives the stage and the
// component, and the attempts and first-seen time it keeps).
// Rejections whose index is outside the batch name no record; they are
// counted in bad and otherwise ignored.
func quarantined(rej []sink.Rejection, n int, at func(i int) (sink.Record, uint64), tmpl lane.Rejected) (out []lane.Rejected, bad int) {
	out = make([]lane.Rejected, 0, len(rej))
	for _, r := range rej {
		if r.Index < 0 || r.Index >= n {
			bad++
			continue
		}
		q := tmpl
		q.Record, q.Pos = at(r.Index)
		q.Reject = record.FromSink(r, tmpl.Reject.Stage, tmpl.Reject.Component)
		q.Reject.Attempts, q.Reject.FirstSeen = tmpl.Reject.Attempts, tmpl.Reject.FirstSeen
		out = append(out, q)
	}
	return out, bad
}
