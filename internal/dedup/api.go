package dedup

import (
	"context"
	"fmt"

	"github.com/weir-io/weir/sink"
)

// Answer is what the seen-set says of one claim.
type Answer uint8

const (
	// Claimed: the key was not held (or its window had passed); it is
	// now claimed by the record. (Named so that New is the Deduper's
	// constructor.)
	Claimed Answer = iota
	// Redelivery: the key is held by this same record id — the record
	// itself again (a retry, a recovery replay), never a duplicate.
	Redelivery
	// Duplicate: the key is held by another record id.
	Duplicate
)

// String is the answer's name.
func (a Answer) String() string {
	switch a {
	case Claimed:
		return "claimed"
	case Redelivery:
		return "redelivery"
	case Duplicate:
		return "duplicate"
	default:
		return fmt.Sprintf("answer(%d)", uint8(a))
	}
}

// Key is a claim's key: SHA-256 of the stream's name and the record's key
// material (KeyOf).
type Key [32]byte

// Claim asks the seen-set about one record.
type Claim struct {
	Key Key
	ID  sink.RecordID
}

// Store is an exact seen-set with eviction: key → record id.
type Store interface {
	// Claim answers every claim, in order, and claims each unheld key for
	// its record id, for the store's window — one round trip for the
	// whole slice. Keys are distinct within one call. An error means no
	// answer: out is unspecified and the caller must pass every record.
	Claim(ctx context.Context, claims []Claim, out []Answer) error
	// Held reports the keys held and the bytes they take, as well as the
	// store can tell (-1 when it cannot).
	Held() (keys, bytes int64)
	Close() error
}
