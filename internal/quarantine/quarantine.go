// Package quarantine keeps the records a secondary sink refused, with the
// rejection, in NDJSON files: one directory per secondary, readable with
// any JSON tool. It is a view for people, not a system of record — primary
// raw keeps every record, quarantined or not — so it is bounded: past
// MaxBytes it refuses (ErrFull) and the fan-out sheds, loudly counted,
// instead of filling the disk or holding back the clean path. The raw
// gate's quarantine (gate = raw) uses the same writer and format.
//
// One line per record:
//
//	{"sink":"pg","raw_position":12,"found_by":"live","reason":"...",
//	 "quarantined_at":"2026-12-02T22:10:00.123Z",
//	 "reason_code":"decode","stage":"secondary","component":"pg","error":"...",
//	 "attempts":1,"first_seen":"2026-12-02T22:10:00.120Z",
//	 "key":"k1","key_encoding":"utf8",
//	 "headers":[{"key":"trace","value":"YWJj","value_encoding":"base64"}],
//	 "event_time":"2026-12-02T22:09:59Z",
//	 "record":{<the file sink's line>}}
//
// found_by is "live" or "recovery". reason is the error text, as error;
// it is kept for readers written before the other rejection fields.
// reason_code is a record.Code's name (decode, contract, dq,
// retry-exhausted, sink-refused, oversize), stage a record.Stage, component
// the sink that refused (for stage check: the contract, and rule the
// part of it that failed — decode, schema or a quality rule's name; the
// field is left out otherwise), attempts the commits made, first_seen when the
// record was refused. key, headers and event_time are present only when
// the record has them; key and header values are UTF-8 text, or base64
// when not valid UTF-8 (the *_encoding field says which). The record's
// origin is record.source with raw_position (0 at the gate: a record the
// gate refused never reached raw) and, when the source said where it read
// the record, origin_pos ("topic/partition@offset"; the buffer gate's
// lane has it). Files are named
// q-<unix nanos>-<random>.ndjson, so an ingest node and a recovery node may
// quarantine into one directory without a lock. Every batch is written and
// fdatasynced before Quarantine returns; a file's directory entry is synced
// when it is created. A failed write or fdatasync stops the writer for good
// (the sync is never retried): later batches are refused and shed. The
// files themselves are written by internal/synclog, as the dq-audit
// trail's are.
package quarantine

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/synclog"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// Defaults of Options.
const (
	DefaultMaxBytes     = 256 << 20
	DefaultFileMaxBytes = 16 << 20
)

const (
	filePrefix = "q-"
	fileSuffix = ".ndjson"
)

// ErrFull is returned by Quarantine when the batch would take the
// directory past MaxBytes; nothing of the batch is written.
var ErrFull = errors.New("quarantine: full")

// ErrStopped wraps the failure that stopped a writer.
var ErrStopped = errors.New("quarantine: writer stopped after a failed write or fdatasync")

// errClosed refuses a batch after Close.
var errClosed = errors.New("quarantine: writer closed")

// Options configure Open. Zero fields take their defaults.
type Options struct {
	FS  vfs.FS
	Dir string
	// MaxBytes bounds the directory's quarantine files in total.
	MaxBytes int64
	// FileMaxBytes rolls to a new file once a file holds this many bytes.
	FileMaxBytes int64
	// Now is the clock for quarantined_at and file names.
	Now func() time.Time
}

// Writer appends quarantined records to the files of one directory. It is
// safe for concurrent use and implements lane.Lane.
type Writer struct {
	opts Options

	mu    sync.Mutex
	log   *synclog.Log
	total int64 // bytes in every quarantine file of Dir
	buf   []byte
}

var _ lane.Lane = (*Writer)(nil)

// Open creates Dir if needed and sizes what it already holds.
func Open(opts Options) (*Writer, error) {
	if opts.FS == nil {
		opts.FS = vfs.OS
	}
	if opts.Dir == "" {
		return nil, errors.New("quarantine: no directory")
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.FileMaxBytes <= 0 {
		opts.FileMaxBytes = DefaultFileMaxBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := opts.FS.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("quarantine: create %s: %w", opts.Dir, err)
	}
	names, err := files(opts.FS, opts.Dir)
	if err != nil {
		return nil, err
	}
	w := &Writer{opts: opts}
	w.log = synclog.New(synclog.Options{FS: opts.FS, Dir: opts.Dir, FileMaxBytes: opts.FileMaxBytes, Name: w.nextName,
		Stopped: ErrStopped, Closed: errClosed})
	for _, n := range names {
		fi, err := opts.FS.Stat(filepath.Join(opts.Dir, n))
		if err != nil {
			return nil, fmt.Errorf("quarantine: %w", err)
		}
		w.total += fi.Size()
	}
	return w, nil
}

// Dir is the writer's directory.
func (w *Writer) Dir() string { return w.opts.Dir }

// Bytes is what the directory's quarantine files hold.
func (w *Writer) Bytes() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total
}

// Reject implements lane.Lane: it appends recs and returns once
// they are fdatasynced, or refuses them whole (ErrFull, or the error that
// stopped the writer).
func (w *Writer) Reject(_ context.Context, recs []lane.Rejected) error {
	if len(recs) == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.opts.Now().UTC()
	buf := w.buf[:0]
	for i := range recs {
		buf = appendLine(buf, &recs[i], now)
	}
	w.buf = buf
	defer w.releaseBuf()
	n := int64(len(buf))
	if w.total+n > w.opts.MaxBytes {
		return fmt.Errorf("%w: %d bytes held, %d more would pass max_bytes %d", ErrFull, w.total, n, w.opts.MaxBytes)
	}
	if err := w.log.Append(buf); err != nil {
		return fmt.Errorf("quarantine: %w", err)
	}
	w.total += n
	return nil
}

// KeptBufBytes is the most encode buffer a Writer keeps between batches.
// A batch is appended whole (all of it or none), so while it is written
// the buffer is the batch's encoded size; a buffer grown beyond this is
// dropped afterwards instead of kept at the largest batch's size
// (docs/flow_control.md, "Buffers outside records").
const KeptBufBytes = 2 << 20

func (w *Writer) releaseBuf() {
	if cap(w.buf) > KeptBufBytes {
		w.buf = nil
	}
}

// nextName is q-<unix nanos>-<random>.ndjson: an ingest node and a
// recovery node may quarantine into one directory without a lock.
func (w *Writer) nextName() string {
	var rnd [4]byte
	rand.Read(rnd[:])
	return filePrefix + strconv.FormatInt(w.opts.Now().UnixNano(), 10) + "-" + hex.EncodeToString(rnd[:]) + fileSuffix
}

// Close closes the current file; later batches are refused.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log.Close()
}

func appendLine(buf []byte, q *lane.Rejected, now time.Time) []byte {
	buf = append(buf, `{"sink":`...)
	buf = appendJSONString(buf, q.Sink)
	buf = append(buf, `,"raw_position":`...)
	buf = strconv.AppendUint(buf, q.Pos, 10)
	if q.OriginPos != "" {
		buf = append(buf, `,"origin_pos":`...)
		buf = appendJSONString(buf, q.OriginPos)
	}
	if q.Recovery {
		buf = append(buf, `,"found_by":"recovery","reason":`...)
	} else {
		buf = append(buf, `,"found_by":"live","reason":`...)
	}
	buf = appendJSONString(buf, q.Reject.Error)
	buf = append(buf, `,"quarantined_at":"`...)
	buf = now.AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, '"')
	buf = appendRejection(buf, &q.Reject)
	buf = appendRecordMeta(buf, &q.Record)
	buf = append(buf, `,"record":`...)
	buf = filesink.AppendNDJSON(buf, &q.Record)
	buf = buf[:len(buf)-1] // the record line's newline
	return append(buf, "}\n"...)
}

// appendRejection appends the rejection's fields, each after a comma.
func appendRejection(buf []byte, r *record.Rejection) []byte {
	buf = append(buf, `,"reason_code":`...)
	buf = appendJSONString(buf, r.Code.String())
	buf = append(buf, `,"stage":`...)
	buf = appendJSONString(buf, string(r.Stage))
	buf = append(buf, `,"component":`...)
	buf = appendJSONString(buf, r.Component)
	if r.Rule != "" {
		buf = append(buf, `,"rule":`...)
		buf = appendJSONString(buf, r.Rule)
	}
	buf = append(buf, `,"error":`...)
	buf = appendJSONString(buf, r.Error)
	buf = append(buf, `,"attempts":`...)
	buf = strconv.AppendInt(buf, int64(r.Attempts), 10)
	if r.FirstSeen != 0 {
		buf = append(buf, `,"first_seen":"`...)
		buf = time.Unix(0, r.FirstSeen).UTC().AppendFormat(buf, time.RFC3339Nano)
		buf = append(buf, '"')
	}
	return buf
}

// appendRecordMeta appends the record's key, headers and event time, those
// it has, each after a comma.
func appendRecordMeta(buf []byte, r *sink.Record) []byte {
	if r.Key != nil {
		buf = appendBytes(buf, "key", r.Key)
	}
	if len(r.Headers) > 0 {
		buf = append(buf, `,"headers":[`...)
		for i, h := range r.Headers {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, `{"key":`...)
			buf = appendJSONString(buf, h.Key)
			buf = appendBytes(buf, "value", h.Value)
			buf = append(buf, '}')
		}
		buf = append(buf, ']')
	}
	if !r.EventTime.IsZero() {
		buf = append(buf, `,"event_time":"`...)
		buf = r.EventTime.UTC().AppendFormat(buf, time.RFC3339Nano)
		buf = append(buf, '"')
	}
	return buf
}

// appendBytes appends ,"name":<b>,"name_encoding":"utf8"|"base64".
func appendBytes(buf []byte, name string, b []byte) []byte {
	buf = append(buf, `,"`...)
	buf = append(buf, name...)
	buf = append(buf, `":`...)
	enc := "utf8"
	if utf8.Valid(b) {
		buf = appendJSONString(buf, string(b))
	} else {
		enc = "base64"
		buf = append(buf, '"')
		buf = base64.StdEncoding.AppendEncode(buf, b)
		buf = append(buf, '"')
	}
	buf = append(buf, `,"`...)
	buf = append(buf, name...)
	buf = append(buf, `_encoding":"`...)
	buf = append(buf, enc...)
	return append(buf, '"')
}

func appendJSONString(buf []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(buf, b...)
}

// files lists the quarantine files of dir in name (time) order.
func files(fsys vfs.FS, dir string) ([]string, error) {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("quarantine: list %s: %w", dir, err)
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, filePrefix) && strings.HasSuffix(n, fileSuffix) {
			out = append(out, n)
		}
	}
	return out, nil
}
