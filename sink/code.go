package sink

import (
	"fmt"
	"strings"
)

// Code is a rejected record's reason code, the same in every rejection
// lane (the drain's dead letter, a secondary's quarantine, the raw gate's
// quarantine). Its String form is what metrics, files and commands show.
//
// The record package names it record.Code; it is defined here because the
// delivery seam needs it (Rejection.Code) and the record package already
// builds on this one.
type Code uint8

const (
	// CodeUnknown: a record rejected before reason codes existed (read from a
	// version-1 dead-letter file). In a Rejection it means the sink did not
	// say, which the lanes record as CodeSinkRefused.
	CodeUnknown Code = 0
	// CodeDecode: the record's bytes could not be decoded as the stream's
	// format (not JSON, bad encoding for the destination).
	CodeDecode Code = 1
	// CodeContract: the record broke the stream's declared contract (schema).
	CodeContract Code = 2
	// CodeDQ: the record failed a data-quality rule.
	CodeDQ Code = 3
	// CodeRetryExhausted: a transient failure outlasted the retry budget.
	CodeRetryExhausted Code = 4
	// CodeSinkRefused: a sink refused the record for good (a constraint, a
	// permanent error).
	CodeSinkRefused Code = 5
	// CodeOversize: the record is larger than what can be held or delivered.
	CodeOversize Code = 6
)

var codeNames = [...]string{
	CodeUnknown:        "unknown",
	CodeDecode:         "decode",
	CodeContract:       "contract",
	CodeDQ:             "dq",
	CodeRetryExhausted: "retry-exhausted",
	CodeSinkRefused:    "sink-refused",
	CodeOversize:       "oversize",
}

// Codes lists every code, Unknown first.
func Codes() []Code {
	out := make([]Code, len(codeNames))
	for i := range codeNames {
		out[i] = Code(i)
	}
	return out
}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// Valid reports whether c is one of the codes listed by Codes.
func (c Code) Valid() bool { return int(c) < len(codeNames) }

// ParseCode parses the String form of a code.
func ParseCode(s string) (Code, error) {
	for i, n := range codeNames {
		if strings.EqualFold(s, n) {
			return Code(i), nil
		}
	}
	return 0, fmt.Errorf("unknown reason code %q (want one of %s)", s, strings.Join(codeNames[:], ", "))
}

// OrRefused is the code a lane keeps for a Rejection carrying c: c itself,
// or CodeSinkRefused when the sink did not say (CodeUnknown) or said a code
// this build does not know.
func (c Code) OrRefused() Code {
	if c == CodeUnknown || !c.Valid() {
		return CodeSinkRefused
	}
	return c
}
