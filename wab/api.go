package wab

// This file holds the package's shared types; the writer is in log.go and
// flusher.go, the reader in reader.go, recovery in recover.go and the
// sidecar and file helpers in files.go.

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/weir-io/weir/internal/vfs"
)

// Durability is the tier a record was written under. Values match
// sink.Durability and the wire protocol's durability byte.
type Durability uint8

const (
	Durable  Durability = 0
	Buffered Durability = 1
)

// DeadLetterShard is the shard number written in the header of dead-letter
// files, which use the segment format.
const DeadLetterShard = 0xFFFF

// Defaults for Options. Knobs in the daemon's configuration fall back to
// these.
const (
	DefaultSegmentMaxBytes  int64 = 256 << 20
	DefaultSegmentMaxAge          = time.Second
	DefaultPreallocateBytes int64 = 64 << 20
	DefaultBatchMaxRecords        = 4096
	DefaultBatchDeadline          = time.Duration(0)
	DefaultQueueCapacity          = 16384
	DefaultMaxRecordBytes         = 64 << 20
)

// DefaultQueueCapacityBytes is Options.QueueCapacityBytes' default.
const DefaultQueueCapacityBytes int64 = 64 << 20

// Record is one record as stored in a segment.
type Record struct {
	Durability Durability
	// Received is the daemon's receive time, Unix nanoseconds.
	Received int64
	// Meta is opaque to this package: the record's metadata as package
	// record encodes it (record.Decode; docs/wab_format.md, "Record
	// meta") — empty for a wire-v1 producer record.
	Meta    []byte
	Payload []byte
}

// Header is a segment's fixed header.
type Header struct {
	Version  uint16
	Shard    uint16
	Flags    uint32   // FlagSyncMarks, FlagTimeOrderedIDs
	Seq      uint64   // per-shard sequence number, also in the file name
	UID      uint64   // random at creation; part of every record id
	Created  int64    // Unix nanoseconds
	Instance [16]byte // the WAB directory's instance id
}

// Footer closes a sealed segment.
type Footer struct {
	Records       uint64
	FirstReceived int64
	LastReceived  int64
}

// CorruptionError names a file and the byte offset where its content stops
// being valid.
type CorruptionError struct {
	Path   string
	Offset int64
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("wab: corrupt segment %s at offset %d: %s", e.Path, e.Offset, e.Reason)
}

// Errors returned by Shard.Submit (through Request.Done or directly). They
// are classified for the wire protocol's Nack codes.
var (
	// ErrShardFailed: an earlier write or fdatasync on this shard failed.
	// The shard accepts nothing until the daemon restarts. Wrapped with the
	// original cause.
	ErrShardFailed = errors.New("wab: shard failed")
	// ErrDiskFull: the write could not be made for lack of space (ENOSPC,
	// EDQUOT). If nothing had been written the shard keeps serving and later
	// requests may succeed; if a write was torn the shard has failed too.
	ErrDiskFull = errors.New("wab: disk full")
	// ErrQueueTimeout: the shard's queue stayed full (of requests, or of
	// bytes) for the whole wait.
	ErrQueueTimeout = errors.New("wab: queue full")
	// ErrClosed: the log is shutting down.
	ErrClosed = errors.New("wab: closed")
	// ErrRecordTooLarge: a payload is larger than Options.MaxRecordBytes
	// (returned by Submit; nothing of the request is written).
	ErrRecordTooLarge = errors.New("wab: record too large")
)

// Request is one producer frame: one or more records of one tier. Done is
// called exactly once, from the shard's flusher (or, for a request
// SubmitInline wrote itself, from SubmitInline before it returns): with
// nil once the tier's
// promise holds (after the write for Buffered, after fdatasync — and the
// directory fsync of a new segment — for Durable), or with an error, in which
// case none of the records may be considered acknowledged. Done is the last
// use of Payloads and Metas: the flusher has copied them by then, so the
// submitter may reuse their bytes as soon as Done is called.
type Request struct {
	Durability Durability
	Payloads   [][]byte
	// Metas, when not nil, holds one Meta per payload (same length as
	// Payloads; each at most MaxMetaBytes): the record's metadata
	// (record.Append) — a source record's id, key, headers and event time,
	// a version-2 producer's id, sequence number and event time; version-1
	// producer records have none.
	Metas    [][]byte
	Received int64
	Done     func(err error)

	// batch, set only on the carrier SubmitBatch queues, holds the
	// requests handed to the flusher together.
	batch []*Request
	// queued is the payload and meta bytes the request (or carrier) holds
	// of its shard's queue (QueueCapacityBytes) until the flusher takes it
	// — at least one byte (see Log.queue).
	queued int64
}

// Observer receives the flusher's measurements. Every method must be cheap
// and non-blocking. A nil Observer is allowed.
type Observer interface {
	// Batch is called after each write (and sync, if synced): the number of
	// records and bytes, and the fdatasync duration (zero when not synced).
	Batch(shard int, records, bytes int, sync time.Duration)
	// Sealed is called after a segment is sealed durably.
	Sealed(ref SegmentRef, records uint64, bytes int64)
	// QueueDepth reports a shard's queue length after each batch.
	QueueDepth(shard int, n int)
}

// Options configure Open. A zero field takes the Default* constant of the
// same name.
type Options struct {
	FS     vfs.FS // default vfs.OS
	Dir    string // the WAB directory; required
	Shards int    // number of shards (>= 1)
	// SegmentMaxBytes: a segment is sealed once a batch brings it to this
	// size; batches are cut so that only a single oversized request can
	// make a segment larger.
	SegmentMaxBytes int64
	// SegmentMaxAge: a segment holding at least one record is sealed this
	// long after its first record was written, with or without traffic.
	// Negative disables age-based sealing.
	SegmentMaxAge time.Duration
	// PreallocateBytes: segments are reserved on disk ahead of the write
	// offset in chunks of this size. Negative disables preallocation.
	PreallocateBytes int64
	// BatchMaxRecords caps the records written (and synced) together.
	BatchMaxRecords int
	// BatchDeadline: how long a flusher waits for more requests once it has
	// one; 0 writes whatever is queued at once.
	BatchDeadline time.Duration
	QueueCapacity int // per shard
	// QueueCapacityBytes bounds the payload and meta bytes a shard's queue
	// holds (requests submitted, not yet taken by the flusher); a Submit
	// waits for room as for QueueCapacity. A request larger than the bound
	// is queued only when the queue is empty of bytes.
	QueueCapacityBytes int64
	// MaxRecordBytes caps one payload; at most RecordLimit.
	MaxRecordBytes int
	Logger         *slog.Logger // default slog.Default()
	Observer       Observer
}

// SegmentRef names a sealed segment.
type SegmentRef struct {
	Shard int
	Seq   uint64
	Path  string
}
