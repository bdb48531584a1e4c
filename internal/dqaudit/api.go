package dqaudit

import (
	"context"
	"time"

	"github.com/weir-io/weir/sink"
)

// Outcome names what a check did with a record.
type Outcome string

const (
	Passed    Outcome = "pass"      // no rule failed
	Warned    Outcome = "warn"      // only warn rules failed: passed on
	Rejected  Outcome = "reject"    // quarantined (code decode, contract or dq)
	Duplicate Outcome = "duplicate" // dropped by content dedup
)

// Obs is one record's outcome.
type Obs struct {
	Outcome Outcome
	Code    string   // Rejected: decode, contract or dq
	Rule    string   // Rejected: decode, schema or the rule's name
	Warned  []string // rules with severity warn the record failed
	ID      sink.RecordID
}

// Entry is one line of the trail.
type Entry struct {
	// Kind is "outcomes" (counts of one stream into one sink over one
	// window) or "recovery" (a window of raw recovered into a sink).
	Kind     string `json:"kind"`
	Stream   string `json:"stream,omitempty"`
	Sink     string `json:"sink"`
	Contract string `json:"contract,omitempty"` // "<stream>@<version>"
	// From and To bound the window (outcomes: wall-clock time of judging).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Outcomes counts records by Outcome; Codes rejected records by code;
	// Rules rejections and warnings by rule.
	Outcomes map[Outcome]int64 `json:"outcomes,omitempty"`
	Codes    map[string]int64  `json:"codes,omitempty"`
	Rules    map[string]int64  `json:"rules,omitempty"`
	// Sample holds up to Options.Sample ids of rejected records.
	Sample []string `json:"sample_rejected_ids,omitempty"`
	// Records names every record the entry counts, grouped by verdict:
	// what lets a reader count each record once after a batch was judged
	// again (see the package doc). Entries of older versions have none.
	Records []IDGroup `json:"records,omitempty"`
	// Recovery: raw positions [Lo, Hi) recovered into Sink, and Mode
	// ("rehydrate" or "skip-quarantine": the sink's quarantine view does
	// not hold this window's rejects).
	Lo   uint64 `json:"lo,omitempty"`
	Hi   uint64 `json:"hi,omitempty"`
	Mode string `json:"mode,omitempty"`
}

// IDGroup is the records of an entry that got one verdict: an outcome,
// and for a reject its code and rule, for a warning the warn rules.
type IDGroup struct {
	Outcome Outcome  `json:"outcome"`
	Code    string   `json:"code,omitempty"`
	Rule    string   `json:"rule,omitempty"`
	Warned  []string `json:"warned,omitempty"`
	// IDs are the records' ids, 16 bytes each, concatenated and base64
	// encoded (standard alphabet, padded).
	IDs string `json:"ids"`
}

// Batch is one judged batch's outcomes of one stream on their way to a
// sink, as Trail.Append takes them.
type Batch struct {
	Stream, Sink, Contract string
	Obs                    []Obs
}

// Writer stores entries durably: Write returns once they are.
type Writer interface {
	Write(ctx context.Context, entries []Entry) error
	Close() error
}
