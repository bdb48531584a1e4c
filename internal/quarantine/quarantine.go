// Package quarantine keeps the records a secondary sink refused, with the
// reason, in NDJSON files: one directory per secondary, readable with any
// JSON tool. It is a view for people, not a system of record — primary raw
// keeps every record, quarantined or not — so it is bounded: past MaxBytes
// it refuses (ErrFull) and the fan-out sheds, loudly counted, instead of
// filling the disk or holding back the clean path.
//
// One line per record:
//
//	{"sink":"pg","raw_position":12,"found_by":"live","reason":"...",
//	 "quarantined_at":"2026-12-02T22:10:00.123Z","record":{<the file sink's line>}}
//
// found_by is "live" or "recovery". Files are named
// q-<unix nanos>-<random>.ndjson, so an ingest node and a recovery node may
// quarantine into one directory without a lock. Every batch is written and
// fdatasynced before Quarantine returns; a file's directory entry is synced
// when it is created. A failed write or fdatasync stops the writer for good
// (the sync is never retried): later batches are refused and shed.
package quarantine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/vfs"
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
// safe for concurrent use and implements engine.Quarantine.
type Writer struct {
	opts Options

	mu     sync.Mutex
	f      vfs.File
	size   int64 // bytes in f
	total  int64 // bytes in every quarantine file of Dir
	failed error
	buf    []byte
}

var _ engine.Quarantine = (*Writer)(nil)

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

// Quarantine implements engine.Quarantine: it appends recs and returns once
// they are fdatasynced, or refuses them whole (ErrFull, or the error that
// stopped the writer).
func (w *Writer) Quarantine(_ context.Context, recs []engine.QuarantinedRecord) error {
	if len(recs) == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil {
		return w.failed
	}
	now := w.opts.Now().UTC()
	buf := w.buf[:0]
	for i := range recs {
		buf = appendLine(buf, &recs[i], now)
	}
	w.buf = buf
	n := int64(len(buf))
	if w.total+n > w.opts.MaxBytes {
		return fmt.Errorf("%w: %d bytes held, %d more would pass max_bytes %d", ErrFull, w.total, n, w.opts.MaxBytes)
	}
	if w.f == nil || w.size > 0 && w.size+n > w.opts.FileMaxBytes {
		if err := w.roll(now); err != nil {
			return err
		}
	}
	if _, err := w.f.Write(buf); err != nil {
		return w.stop(fmt.Errorf("write %s: %w", w.f.Name(), err))
	}
	if err := w.f.Sync(); err != nil {
		return w.stop(fmt.Errorf("fdatasync %s: %w", w.f.Name(), err))
	}
	w.size += n
	w.total += n
	return nil
}

// roll closes the current file (its bytes are already synced) and creates
// the next one durably.
func (w *Writer) roll(now time.Time) error {
	if w.f != nil {
		if err := w.f.Close(); err != nil {
			return w.stop(fmt.Errorf("close %s: %w", w.f.Name(), err))
		}
		w.f, w.size = nil, 0
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	name := filepath.Join(w.opts.Dir, filePrefix+strconv.FormatInt(now.UnixNano(), 10)+"-"+hex.EncodeToString(rnd[:])+fileSuffix)
	f, err := w.opts.FS.Create(name, 0o600)
	if err != nil {
		return fmt.Errorf("quarantine: create %s: %w", name, err)
	}
	if err := w.opts.FS.SyncDir(w.opts.Dir); err != nil {
		f.Close()
		return w.stop(fmt.Errorf("sync directory %s: %w", w.opts.Dir, err))
	}
	w.f = f
	return nil
}

func (w *Writer) stop(err error) error {
	w.failed = fmt.Errorf("%w: %w", ErrStopped, err)
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	return w.failed
}

// Close closes the current file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	if w.failed == nil {
		w.failed = errors.New("quarantine: writer closed")
	}
	return err
}

func appendLine(buf []byte, q *engine.QuarantinedRecord, now time.Time) []byte {
	buf = append(buf, `{"sink":`...)
	buf = appendJSONString(buf, q.Sink)
	buf = append(buf, `,"raw_position":`...)
	buf = strconv.AppendUint(buf, q.Pos, 10)
	if q.Recovery {
		buf = append(buf, `,"found_by":"recovery","reason":`...)
	} else {
		buf = append(buf, `,"found_by":"live","reason":`...)
	}
	buf = appendJSONString(buf, q.Reason)
	buf = append(buf, `,"quarantined_at":"`...)
	buf = now.AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","record":`...)
	buf = filesink.AppendNDJSON(buf, &q.Record)
	buf = buf[:len(buf)-1] // the record line's newline
	return append(buf, "}\n"...)
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
