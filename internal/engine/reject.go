package engine

import (
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// quarantined builds the quarantine records of a sink's rejections of a
// batch of n records: each is tmpl with the record and its position (at),
// the reason and the code (an unset or unknown code is sink-refused); a
// contract check's refusal is recorded under stage check, with the
// contract as the component and its rule.
// Rejections whose index is outside the batch name no record; they are
// counted in bad and otherwise ignored.
func quarantined(rej []sink.Rejection, n int, at func(i int) (sink.Record, uint64), tmpl QuarantinedRecord) (out []QuarantinedRecord, bad int) {
	out = make([]QuarantinedRecord, 0, len(rej))
	for _, r := range rej {
		if r.Index < 0 || r.Index >= n {
			bad++
			continue
		}
		q := tmpl
		q.Record, q.Pos = at(r.Index)
		q.Reject.Code = r.Code.OrRefused()
		q.Reject.Error = r.Reason
		if r.Contract != "" {
			q.Reject.Stage, q.Reject.Component, q.Reject.Rule = record.StageCheck, r.Contract, r.Rule
		}
		out = append(out, q)
	}
	return out, bad
}

// countByCode calls f once for each code among qs, in code order, with its
// count.
func countByCode(qs []QuarantinedRecord, f func(code record.Code, n int)) {
	for _, c := range record.Codes() {
		n := 0
		for i := range qs {
			if qs[i].Reject.Code == c {
				n++
			}
		}
		if n > 0 {
			f(c, n)
		}
	}
}
