package wab

// This file fixes the package's public surface so that the drain, the daemon
// and the ops tools can be written against it. Bodies marked
// "unimplemented" are filled in by the writer/reader implementation.

import (
	"context"
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

// Record is one record as stored in a segment.
type Record struct {
	Durability Durability
	// Received is the daemon's receive time, Unix nanoseconds.
	Received int64
	// Meta is opaque metadata; empty for producer records, the rejection
	// reason (and original identity) for dead-letter records.
	Meta    []byte
	Payload []byte
}

// Header is a segment's fixed header.
type Header struct {
	Version  uint16
	Shard    uint16
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
	// ErrQueueTimeout: the shard's queue stayed full for the whole wait.
	ErrQueueTimeout = errors.New("wab: queue full")
	// ErrClosed: the log is shutting down.
	ErrClosed = errors.New("wab: closed")
)

// Request is one producer frame: one or more records of one tier. Done is
// called exactly once, from the shard's flusher: with nil once the tier's
// promise holds (after the write for Buffered, after fdatasync — and the
// directory fsync of a new segment — for Durable), or with an error, in which
// case none of the records may be considered acknowledged.
type Request struct {
	Durability Durability
	Payloads   [][]byte
	Received   int64
	Done       func(err error)
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

// Options configure Open.
type Options struct {
	FS               vfs.FS // default vfs.OS
	Dir              string // the WAB directory; required
	Shards           int    // number of shards (>= 1)
	SegmentMaxBytes  int64
	SegmentMaxAge    time.Duration
	PreallocateBytes int64
	BatchMaxRecords  int
	BatchDeadline    time.Duration
	QueueCapacity    int // per shard
	MaxRecordBytes   int
	Logger           *slog.Logger
	Observer         Observer
}

// SegmentRef names a sealed segment.
type SegmentRef struct {
	Shard int
	Seq   uint64
	Path  string
}

// Log is an open write-ahead buffer directory: one flusher per shard.
type Log struct{ _ struct{} }

// Open locks the directory, recovers it (torn tails of open segments are
// truncated to the last valid record and the segments sealed; a corrupt
// sealed segment is a *CorruptionError and Open fails) and starts one
// flusher per shard.
func Open(ctx context.Context, opts Options) (*Log, error) { panic("unimplemented") }

// Shards is the number of shards.
func (l *Log) Shards() int { panic("unimplemented") }

// Instance is the directory's instance id (created once, kept in the
// directory).
func (l *Log) Instance() [16]byte { panic("unimplemented") }

// Submit queues a request on a shard, waiting at most wait for queue space
// (ErrQueueTimeout after that). A nil return means Done will be called.
func (l *Log) Submit(ctx context.Context, shard int, req *Request, wait time.Duration) error {
	panic("unimplemented")
}

// ShardErr is nil for a healthy shard, else the sticky error.
func (l *Log) ShardErr(shard int) error { panic("unimplemented") }

// Sealed lists the sealed segments on disk, by shard then sequence.
func (l *Log) Sealed() ([]SegmentRef, error) { panic("unimplemented") }

// Notify receives a value (coalesced) whenever a segment is sealed.
func (l *Log) Notify() <-chan struct{} { panic("unimplemented") }

// Close stops accepting requests, completes those queued, seals every open
// segment and releases the lock. Requests still queued when ctx ends get
// ErrClosed.
func (l *Log) Close(ctx context.Context) error { panic("unimplemented") }

// Reader reads one segment file sequentially, checking every record's
// length and CRC before using it. It never modifies the file.
type Reader struct{ _ struct{} }

// OpenSegment opens a segment (open or sealed) for reading and checks its
// header.
func OpenSegment(fs vfs.FS, path string) (*Reader, error) { panic("unimplemented") }

// Header is the segment's header.
func (r *Reader) Header() Header { panic("unimplemented") }

// Next returns the next record, io.EOF after the last one (for a sealed
// segment: after the footer, which Footer then returns), or a
// *CorruptionError. The returned slices are valid until the next call.
func (r *Reader) Next() (Record, error) { panic("unimplemented") }

// Footer is the footer, once Next has returned io.EOF on a sealed segment.
func (r *Reader) Footer() (Footer, bool) { panic("unimplemented") }

// Offset is the byte offset just past the last record returned.
func (r *Reader) Offset() int64 { panic("unimplemented") }

// Close closes the file.
func (r *Reader) Close() error { panic("unimplemented") }

// RecordID is the deterministic id of the index-th record (0-based) of a
// segment: 128 bits of SHA-256 over the instance, shard, segment uid,
// index and payload.
func RecordID(h Header, index uint64, payload []byte) [16]byte { panic("unimplemented") }

// ReadConfirmed returns how many leading records of the segment at path the
// drain has durably delivered (its .confirmed sidecar), 0 if none.
func ReadConfirmed(fs vfs.FS, segPath string) (uint64, error) { panic("unimplemented") }

// WriteConfirmed records durably (temp file, fdatasync, rename, directory
// fsync) that the first n records of the segment have been delivered.
func WriteConfirmed(fs vfs.FS, segPath string, n uint64) error { panic("unimplemented") }

// RemoveSegment deletes a delivered segment and its sidecar durably.
func RemoveSegment(fs vfs.FS, segPath string) error { panic("unimplemented") }

// WriteSealed writes a complete sealed segment holding recs at path durably
// (temporary name, footer, fdatasync, rename, directory fsync). It is how
// dead-letter files are made.
func WriteSealed(fs vfs.FS, path string, h Header, recs []Record) error { panic("unimplemented") }
