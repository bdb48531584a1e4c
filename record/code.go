package record

import "github.com/weir-io/weir/sink"

// Code is a rejected record's reason code, the same in every rejection
// lane (the drain's dead letter, a secondary's quarantine, the raw gate's
// quarantine). Its String form is what metrics, files and commands show.
//
// It is sink.Code: the delivery seam names it too (sink.Rejection.Code), and
// this package builds on that one, so the type lives there.
type Code = sink.Code

// The codes; see sink.Code.
const (
	CodeUnknown        = sink.CodeUnknown
	CodeDecode         = sink.CodeDecode
	CodeContract       = sink.CodeContract
	CodeDQ             = sink.CodeDQ
	CodeRetryExhausted = sink.CodeRetryExhausted
	CodeSinkRefused    = sink.CodeSinkRefused
	CodeOversize       = sink.CodeOversize
)

// Codes lists every code, Unknown first.
func Codes() []Code { return sink.Codes() }

// ParseCode parses the String form of a code.
func ParseCode(s string) (Code, error) { return sink.ParseCode(s) }

// Stage is where in the pipeline a record was rejected.
type Stage string

const (
	// StageIngest: at the door (a socket frame, a source's decode).
	StageIngest Stage = "ingest"
	// StageGate: while writing to the gate (the raw gate's own commit, or
	// a record the write-ahead buffer cannot hold).
	StageGate Stage = "gate"
	// StageDrain: by the drain's delivery to the primary sink.
	StageDrain Stage = "drain"
	// StageSecondary: by a secondary sink's delivery or recovery.
	StageSecondary Stage = "secondary"
	// StageCheck: by a contract or data-quality check after raw.
	StageCheck Stage = "check"
)

// FromSink is the rejection a lane keeps for a sink's refusal r of a
// record on its way through stage (StageDrain, StageSecondary, StageGate)
// to component (the sink's name). It is the one place a refusal is mapped:
//
//   - the code is r.Code, or CodeSinkRefused when the sink did not say
//     (CodeUnknown) or said a code this build does not know;
//   - the error text is r.Reason, or "rejected by <component>" when empty
//     (the contract, for a contract's refusal);
//   - a contract's refusal (r.Contract set) is stage StageCheck with the
//     contract as the component and r.Rule as the rule, whatever stage the
//     record was in.
//
// Attempts, FirstSeen and the buffer location are the caller's to set.
func FromSink(r sink.Rejection, stage Stage, component string) Rejection {
	out := Rejection{Code: r.Code.OrRefused(), Stage: stage, Component: component, Error: r.Reason}
	if r.Contract != "" {
		out.Stage, out.Component, out.Rule = StageCheck, r.Contract, r.Rule
	}
	if out.Error == "" {
		out.Error = "rejected by " + out.Component
	}
	return out
}
