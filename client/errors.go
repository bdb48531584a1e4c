package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/weir-io/weir/wire"
)

// Sentinels, one per Nack code. A *NackError matches the sentinel of its
// code with errors.Is, e.g. errors.Is(err, client.ErrQueueTimeout).
var (
	ErrFrameTooLarge = errors.New("weir: frame too large")
	ErrBadVersion    = errors.New("weir: bad protocol version")
	ErrBadDurability = errors.New("weir: bad durability")
	ErrBadFrame      = errors.New("weir: bad frame")
	ErrQueueTimeout  = errors.New("weir: queue timeout")
	ErrDiskFull      = errors.New("weir: disk full")
	ErrShardFailed   = errors.New("weir: shard failed")
	ErrShuttingDown  = errors.New("weir: daemon shutting down")
	ErrInternal      = errors.New("weir: internal daemon error")
	ErrNoHello       = errors.New("weir: version-2 push without a Hello")
	ErrBadMeta       = errors.New("weir: bad record metadata")
	ErrNotPermitted  = errors.New("weir: not permitted on this connection")
	ErrOverloaded    = errors.New("weir: daemon overloaded")
)

// ErrClosed is returned for requests made after Close, and delivered to
// requests still unacknowledged when Close gave up waiting for them.
var ErrClosed = errors.New("weir: client closed")

// ErrEmptyBatch is returned for a push of zero records.
var ErrEmptyBatch = errors.New("weir: empty batch")

// ErrOutcomeUnknown is matched (errors.Is) by every *OutcomeUnknownError:
// the client gave up on records the daemon may have stored.
var ErrOutcomeUnknown = errors.New("weir: outcome unknown: the records may be stored")

// OutcomeUnknownError is the client giving up on a request whose outcome
// it cannot know: the request was written to a connection and no
// definitive answer (an Ack, or a Nack other than Overloaded) came back
// for that copy, so the daemon may have stored its records, or not. It
// happens when the push's ctx ends (or Close gives up) while such a
// request waits for its answer or for another try after an Overloaded
// refusal.
//
// The records keep their identity only if they are pushed again under the
// same producer id and sequence numbers: Client.Repush does that (on a
// Client of the same Producer). Pushing the payloads again as new records
// stores them under new ids, so a copy stored the first time stays a
// second record.
//
// errors.Is matches it against ErrOutcomeUnknown and against its Cause,
// never against ErrOverloaded: an Overloaded refusal is never a cause
// (the client retries it while the ctx lives) and shows only in Last.
// Retryable reports false for it.
type OutcomeUnknownError struct {
	// Producer and FirstSeq name the records: sequence numbers FirstSeq to
	// FirstSeq+Records-1 of Producer (FirstSeq is 0 and meaningless with
	// wire version 1, which has neither).
	Producer wire.ProducerID
	FirstSeq uint64
	Records  int
	// Cause is why the client gave up: the push's ctx error, ErrClosed,
	// or a retryable Nack (QueueTimeout, ShuttingDown, ShardFailed,
	// DiskFull) to a resent copy, which says nothing of the earlier one.
	Cause error
	// Last is the last answer to the request, when it had one (an
	// Overloaded *NackError to a resent copy); nil otherwise.
	Last error

	frame   []byte // the request as encoded, for Repush
	version uint8
}

func (e *OutcomeUnknownError) Error() string {
	msg := fmt.Sprintf("weir: outcome of %d records (producer %x, sequence %d) unknown: they may be stored; a re-push keeps their ids only with the same producer and sequence (Client.Repush): %v",
		e.Records, e.Producer[:], e.FirstSeq, e.Cause)
	if e.Last != nil {
		msg += " (last answer: " + e.Last.Error() + ")"
	}
	return msg
}

// Unwrap returns ErrOutcomeUnknown and Cause.
func (e *OutcomeUnknownError) Unwrap() []error { return []error{ErrOutcomeUnknown, e.Cause} }

// NackError is a request the daemon refused; none of its records was
// stored by the answering connection. It is final: the client does not
// send the request again. (Overloaded is the exception: the client sends
// such a request again itself, after the pause the daemon asks for, and a
// caller sees an Overloaded NackError only with WithOverloadRetries
// limiting that, and only for a request no copy of which can have been
// stored; see the package documentation.)
type NackError struct {
	Code    wire.Code
	Message string
	// RetryAfter is the pause the daemon asked for before a retry (the
	// hint at the start of an Overloaded Nack's message; see
	// wire.ParseRetryAfter), 0 when the Nack carries none. Message is
	// the whole message, hint included.
	RetryAfter time.Duration
}

// newNackError is the error of a Nack with code and msg.
func newNackError(code wire.Code, msg string) *NackError {
	d, _, _ := wire.ParseRetryAfter(msg)
	return &NackError{Code: code, Message: msg, RetryAfter: d}
}

func (e *NackError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("weir: nack %s", e.Code)
	}
	return fmt.Sprintf("weir: nack %s: %s", e.Code, e.Message)
}

// Is reports whether target is the sentinel of e's code.
func (e *NackError) Is(target error) bool {
	s := sentinel(e.Code)
	return s != nil && target == s
}

func sentinel(c wire.Code) error {
	switch c {
	case wire.CodeFrameTooLarge:
		return ErrFrameTooLarge
	case wire.CodeBadVersion:
		return ErrBadVersion
	case wire.CodeBadDurability:
		return ErrBadDurability
	case wire.CodeBadFrame:
		return ErrBadFrame
	case wire.CodeQueueTimeout:
		return ErrQueueTimeout
	case wire.CodeDiskFull:
		return ErrDiskFull
	case wire.CodeShardFailed:
		return ErrShardFailed
	case wire.CodeShuttingDown:
		return ErrShuttingDown
	case wire.CodeInternal:
		return ErrInternal
	case wire.CodeNoHello:
		return ErrNoHello
	case wire.CodeBadMeta:
		return ErrBadMeta
	case wire.CodeNotPermitted:
		return ErrNotPermitted
	case wire.CodeOverloaded:
		return ErrOverloaded
	}
	return nil
}

// Retryable reports whether err is a refusal that may succeed if the same
// records are pushed again later or to another daemon: a Nack with code
// QueueTimeout, ShuttingDown, ShardFailed or Overloaded (after its
// RetryAfter), or DiskFull (which needs a longer pause). Nacks about the
// request itself (FrameTooLarge, BadVersion, BadDurability, BadFrame,
// NoHello, BadMeta, NotPermitted), Internal, ErrClosed, context errors,
// an *OutcomeUnknownError (see Client.Repush) and anything else are not
// retryable.
//
// Retrying is the caller's decision; the client never resends a Nacked
// request on its own, except an Overloaded one (see WithOverloadRetries).
// A retried record may be stored twice (see the package documentation on
// at-least-once delivery).
func Retryable(err error) bool {
	var ne *NackError
	return errors.As(err, &ne) && ne.Code.Retryable() && !errors.Is(err, ErrOutcomeUnknown)
}
