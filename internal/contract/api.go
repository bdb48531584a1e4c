package contract

import (
	"github.com/weir-io/weir/record"
)

// Severity is what a failed quality rule does to the record.
type Severity uint8

const (
	// Fail quarantines the record with code dq.
	Fail Severity = iota
	// Warn counts the failure and passes the record on.
	Warn
)

// Rule is one quality rule: a CEL expression over the decoded record
// that must evaluate to true.
type Rule struct {
	Name     string
	Expr     string
	Severity Severity
}

// Spec is a stream's contract as configured.
type Spec struct {
	// Stream is the source's name, or "socket" for the producer ingress.
	Stream string
	// Header narrows a socket contract to the records carrying this
	// header with HeaderValue; empty: every record of the stream.
	Header, HeaderValue string
	// Version is the contract's version ("3"); it names the contract in
	// rejections and the dq-audit trail as "<stream>@<version>".
	Version string
	// Schema is a JSON Schema document (drafts 2019-09 and 2020-12);
	// nil: the payload must only be JSON. SchemaPath names it in errors.
	Schema     []byte
	SchemaPath string
	// NaturalKey lists JSON pointers whose values identify a record;
	// EventTime is a JSON pointer to the record's own time, optional.
	NaturalKey []string
	EventTime  string
	// Unique: the data promises one record per natural key (plus event
	// time, when declared). PayloadUnique: the payload itself is unique,
	// so the whole payload may key content dedup.
	Unique        bool
	PayloadUnique bool
	Rules         []Rule
}

// Result is one record's outcome.
type Result struct {
	// Code is CodeUnknown when the record passed (Warned may still list
	// rules), else CodeDecode, CodeContract or CodeDQ.
	Code record.Code
	// Rule is "decode", "schema" or the failing rule's name; Error says
	// why (for a schema violation, the failing keyword's path first).
	Rule  string
	Error string
	// Warned names the warn rules the record failed.
	Warned []string
	// Key is the content-dedup key material of a record that passed,
	// when the contract allows dedup (DedupKeyed): the natural key's
	// values, and the event time when declared, in a canonical encoding
	// — or the payload, when only PayloadUnique. nil when the record
	// lacks a declared field.
	Key []byte
}

// Passed reports whether the record goes on.
func (r *Result) Passed() bool { return r.Code == record.CodeUnknown }
