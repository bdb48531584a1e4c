package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/weir-io/weir/record"
)

// MaxMetaBytes is the largest metadata block one record of a version-2
// push may carry. The daemon adds up to 38 bytes of its own (the event
// time, the producer id and sequence number) before the block is stored, and
// a stored block must fit the buffer's 65,535-byte meta slot.
const MaxMetaBytes = 60 << 10

// ErrBadMeta is returned (wrapped) by InspectMeta for a block a producer
// may not send.
var ErrBadMeta = errors.New("wire: bad record metadata")

// MetaInfo summarises a metadata block InspectMeta accepted.
type MetaInfo struct {
	// HasID: the block sets the record's id (a replay field).
	HasID bool
	// HasEventTime: the block sets the record's own event time.
	HasEventTime bool
	// Replay: the block sets a replay field (id, source or origin
	// position).
	Replay bool
}

// Tag bits for the at-most-once check.
const (
	seenKey = 1 << iota
	seenEventTime
	seenID
	seenSource
	seenOriginPos
)

// InspectMeta checks one record's metadata block as the daemon does: empty,
// or the record package's tagged encoding (version byte 2, then tag,
// length, value fields) of at most MaxMetaBytes bytes, setting only
//
//	key (3), header (4)            any producer
//	event time (5)                 any producer; 8 bytes
//	id (1), source (2), origin (8) replay fields: 16 bytes for the id,
//	                               UTF-8 for source and origin
//
// each at most once except header, whose name must be UTF-8 and whose key
// length must fit its value. Anything else — an unknown or reserved tag
// (the producer id and sequence are the daemon's to set), a length past
// the end, a wrong size — is an error wrapping ErrBadMeta. It does not
// allocate.
func InspectMeta(b []byte) (MetaInfo, error) {
	var info MetaInfo
	if len(b) == 0 {
		return info, nil
	}
	if len(b) > MaxMetaBytes {
		return info, fmt.Errorf("%w: %d bytes, limit %d", ErrBadMeta, len(b), MaxMetaBytes)
	}
	if b[0] != record.Version {
		return info, fmt.Errorf("%w: version %d, want %d", ErrBadMeta, b[0], record.Version)
	}
	seen := 0
	err := record.Fields(b, func(t record.Tag, v []byte) error {
		bit, err := checkField(t, v, &info)
		if err != nil {
			return err
		}
		if bit != 0 {
			if seen&bit != 0 {
				return fmt.Errorf("%w: tag %d given twice", ErrBadMeta, t)
			}
			seen |= bit
		}
		return nil
	})
	if errors.Is(err, record.ErrBadMeta) {
		err = fmt.Errorf("%w: %w", ErrBadMeta, err)
	}
	return info, err
}

// checkField checks one field and returns its at-most-once bit (0 for a
// repeatable tag).
func checkField(t record.Tag, v []byte, info *MetaInfo) (int, error) {
	size := func(n int) error {
		if len(v) != n {
			return fmt.Errorf("%w: tag %d: %d bytes, want %d", ErrBadMeta, t, len(v), n)
		}
		return nil
	}
	text := func() error {
		if !utf8.Valid(v) {
			return fmt.Errorf("%w: tag %d: not UTF-8", ErrBadMeta, t)
		}
		return nil
	}
	switch t {
	case record.TagKey:
		return seenKey, nil
	case record.TagHeader:
		kl, n := binary.Uvarint(v)
		if n <= 0 || kl > uint64(len(v)-n) {
			return 0, fmt.Errorf("%w: header: key length runs past the field", ErrBadMeta)
		}
		if !utf8.Valid(v[n : n+int(kl)]) {
			return 0, fmt.Errorf("%w: header: name not UTF-8", ErrBadMeta)
		}
		return 0, nil
	case record.TagEventTime:
		info.HasEventTime = true
		return seenEventTime, size(8)
	case record.TagID:
		info.HasID, info.Replay = true, true
		return seenID, size(16)
	case record.TagSource:
		info.Replay = true
		return seenSource, text()
	case record.TagOriginPos:
		info.Replay = true
		return seenOriginPos, text()
	default:
		return 0, fmt.Errorf("%w: tag %d may not be set by a producer", ErrBadMeta, t)
	}
}
