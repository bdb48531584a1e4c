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
