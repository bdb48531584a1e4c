// Package sink is weir's delivery seam: the contract between the drain, which
// reads durable records out of the write-ahead buffer, and a destination that
// keeps them (a file, a database, a lake).
//
// # Retry protocol
//
// The drain calls Commit with batches of at most MaxBatchSize records. What
// happens next depends only on what Commit returns:
//
//   - err == nil: every record of the batch is accounted for. Records listed in
//     CommitResult.Rejected were refused permanently (a poison record: bad
//     encoding, too large, violating a constraint) and go to the dead-letter
//     lane with the sink's reason and reason code (Rejection.Code: CodeDecode
//     for bytes the destination cannot take as its format, CodeOversize for a
//     record too large for it, CodeSinkRefused — also what an unset code
//     means — for any other refusal); every other record is durably
//     committed, in the sink's own sense of durable (fsync for a file, a
//     transaction commit for a database). Partial success is a normal
//     result, not an error.
//   - err classified transient (IsTransient): nothing of the batch may be
//     assumed committed. The drain retries the same batch, unchanged, with
//     capped exponential backoff.
//   - any other error is permanent: the whole batch is dead-lettered with the
//     error as its reason, under CodeSinkRefused.
//
// Commit must not return before the committed records are durable: the drain
// deletes a segment from the write-ahead buffer once every batch of it has
// been committed or dead-lettered, and nothing else keeps the data.
//
// Delivery is at least once. A batch can be delivered again — after a
// transient error that hid a partial success, after a crash between Commit
// and the drain's progress record, after a replay — so a sink must be
// idempotent on Record.ID (ON CONFLICT DO NOTHING, INSERT IGNORE) or document
// that it keeps duplicates (the file sink does; readers dedup by id).
//
// Commit is never called concurrently on one Sink by the drain; Health may be
// called concurrently with Commit.
package sink

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Durability is the tier a record was acknowledged under.
type Durability uint8

const (
	// Durable records were fdatasynced before their producer's ack.
	Durable Durability = 0
	// Buffered records were acked after the write, before fdatasync: they
	// survive a process crash but not a power loss.
	Buffered Durability = 1
)

func (d Durability) String() string {
	switch d {
	case Durable:
		return "durable"
	case Buffered:
		return "buffered"
	default:
		return fmt.Sprintf("durability(%d)", uint8(d))
	}
}

// RecordID is a record's deterministic identity: a 128-bit hash of where the
// record came from and what it holds, stable across every replay of the same
// record. Sinks write it as weir_record_id and deduplicate on it.
type RecordID [16]byte

// String is the id as 32 lowercase hex digits.
func (id RecordID) String() string { return hex.EncodeToString(id[:]) }

// ParseRecordID parses the 32-hex-digit form produced by String.
func ParseRecordID(s string) (RecordID, error) {
	var id RecordID
	if len(s) != 32 {
		return id, fmt.Errorf("record id %q: want 32 hex digits", s)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("record id %q: %w", s, err)
	}
	return id, nil
}

// Header is one record header: a name and a value. A record's headers are
// ordered and a name may repeat (as in Kafka).
type Header struct {
	Key   string
	Value []byte
}

// Record is one record handed to a sink.
type Record struct {
	ID         RecordID
	Payload    []byte
	Durability Durability
	// Received is when the daemon accepted the record.
	Received time.Time
	// Source names where the record came from ("socket" for producers).
	Source string
	// Key is the record's key (a Kafka key, a producer's key); nil when it
	// has none.
	Key []byte
	// Headers are the record's headers in order; nil when it has none.
	Headers []Header
	// EventTime is the record's own time (a broker timestamp, a producer's
	// stamp); the zero Time when it has none.
	EventTime time.Time
}

// DedupToken is a content-derived idempotency handle for a whole batch:
// SHA-256 over the batch's record ids in order. The same records in the same
// order give the same token on every replay, so a sink whose destination can
// deduplicate whole writes (a transactional producer, an object name) can use
// it.
type DedupToken [32]byte

// String is the token in hex.
func (t DedupToken) String() string { return hex.EncodeToString(t[:]) }

// Batch is what Commit receives.
type Batch struct {
	Records []Record
	Token   DedupToken
}

// NewBatch builds a batch and computes its token.
func NewBatch(records []Record) Batch {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(records)))
	h.Write(n[:])
	for i := range records {
		h.Write(records[i].ID[:])
	}
	var b Batch
	b.Records = records
	copy(b.Token[:], h.Sum(nil))
	return b
}

// Rejection is one record a sink refused permanently.
type Rejection struct {
	// Index is the record's position in Batch.Records.
	Index int
	// Reason says why, for the dead-letter lane and the operator.
	Reason string
	// Code classifies the refusal (CodeDecode, CodeOversize, ...). Zero
	// (CodeUnknown) means the sink did not say: the record is kept as
	// CodeSinkRefused.
	Code Code
	// Contract, when set, says a data contract's check refused the record
	// rather than the destination: it names the contract ("orders@3"),
	// and Rule the part of it that failed — "decode", "schema" (Reason
	// then names the failing keyword's path) or a quality rule's name.
	// The rejection lanes record such a refusal under stage "check".
	Contract string
	Rule     string
}

// CommitResult is the outcome of a Commit that returned no error.
type CommitResult struct {
	// Rejected lists the records refused permanently; every record of the
	// batch not listed here was committed durably.
	Rejected []Rejection
}

// Committed is how many records of a batch of n were committed.
func (r CommitResult) Committed(n int) int { return n - len(r.Rejected) }

// HealthState is a sink's coarse health.
type HealthState int

const (
	Healthy HealthState = iota
	Degraded
	Down
)

func (s HealthState) String() string {
	switch s {
	case Healthy:
		return "healthy"
	case Degraded:
		return "degraded"
	case Down:
		return "down"
	default:
		return fmt.Sprintf("health(%d)", int(s))
	}
}

// Health is a sink's state and, unless healthy, why.
type Health struct {
	State  HealthState
	Reason string
}

// Sink is a destination for durable records. See the package documentation
// for the retry protocol every implementation must honour.
type Sink interface {
	// Name identifies the sink in logs and metrics.
	Name() string
	// MaxBatchSize is the largest number of records Commit accepts at once.
	MaxBatchSize() int
	// Commit delivers a batch; see the retry protocol.
	Commit(ctx context.Context, b Batch) (CommitResult, error)
	// Health reports the sink's current state without blocking on I/O for
	// long.
	Health(ctx context.Context) Health
	// Close releases the sink's resources. Committed data is already durable.
	Close() error
}

// Class says how the drain must treat an error.
type Class int

const (
	// ClassPermanent errors are not retried: the batch is dead-lettered.
	ClassPermanent Class = iota
	// ClassTransient errors are retried with backoff.
	ClassTransient
)

type classified struct {
	class Class
	err   error
}

func (e *classified) Error() string { return e.err.Error() }
func (e *classified) Unwrap() error { return e.err }

// Transient marks err as transient: retry the same batch later.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &classified{ClassTransient, err}
}

// Permanent marks err as permanent: retrying cannot help.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &classified{ClassPermanent, err}
}

// IsTransient reports whether err (or an error it wraps) was marked
// Transient, or is a context deadline (a slow destination). Unmarked errors
// are permanent.
func IsTransient(err error) bool {
	var c *classified
	if errors.As(err, &c) {
		return c.class == ClassTransient
	}
	return errors.Is(err, context.DeadlineExceeded)
}
