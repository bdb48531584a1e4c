// Package jsonlsink is the example sink kind of docs/extending.md: small,
// but a real weir sink that keeps the sink package's retry protocol and
// passes the conformance suite (sink/sinktest).
//
// It appends each committed record as one JSON line to a file
// records-<number>.jsonl in a directory, and Commit returns only once the
// lines are fdatasynced (and a new file's directory entry fsynced). All of
// its file I/O goes through the vfs.FS it is given, so weir's fault
// injection and crash simulation reach it. After a failed write or sync
// it never syncs that file again: the file is closed, the error is
// reported transient, and the retried batch goes to a new file. A retry
// may therefore store a record twice; every copy carries the same id, and
// readers deduplicate on it (the sink is not idempotent).
//
// Its registration — name, keys, factory, capabilities — is component.go.
package jsonlsink

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// Defaults for zero Options fields.
const (
	DefaultMaxBytes     = 64 << 20
	DefaultMaxBatchSize = 1024
)

const (
	prefix = "records-"
	suffix = ".jsonl"
)

// ErrClosed is returned by Commit after Close.
var ErrClosed = errors.New("jsonlsink: sink is closed")

// Options configure a Sink.
type Options struct {
	FS           vfs.FS // nil: vfs.OS
	Dir          string // created (durably) if missing
	MaxBytes     int64  // a file is left for a new one past this size
	MaxBatchSize int    // what MaxBatchSize reports
	Logger       *slog.Logger
}

// Sink appends records to JSON-lines files.
type Sink struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	f      vfs.File // the file being appended to; nil until the next commit opens one
	size   int64
	next   int   // the next file's number
	failed error // the last commit's failure, for Health
	closed bool
}

var _ sink.Sink = (*Sink)(nil)

// New opens a sink on opts.Dir. It never appends to a file an earlier run
// left: it starts after the highest number in the directory.
func New(_ context.Context, opts Options) (*Sink, error) {
	if opts.Dir == "" {
		return nil, errors.New("jsonlsink: Dir is required")
	}
	if opts.FS == nil {
		opts.FS = vfs.OS
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxBatchSize <= 0 {
		opts.MaxBatchSize = DefaultMaxBatchSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := opts.FS.MkdirAll(opts.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("jsonlsink: %w", err)
	}
	files, err := list(opts.FS, opts.Dir)
	if err != nil {
		return nil, err
	}
	s := &Sink{opts: opts, log: opts.Logger, next: 1}
	if len(files) > 0 {
		s.next = files[len(files)-1].n + 1
	}
	return s, nil
}

// Name implements sink.Sink.
func (s *Sink) Name() string { return "jsonl" }

// MaxBatchSize implements sink.Sink.
func (s *Sink) MaxBatchSize() int { return s.opts.MaxBatchSize }

// line is one record as stored.
type line struct {
	ID         string        `json:"weir_record_id"`
	Durability string        `json:"durability"`
	Received   time.Time     `json:"received_at"`
	Source     string        `json:"source"`
	Payload    []byte        `json:"payload"` // base64: any bytes
	Key        []byte        `json:"key,omitempty"`
	Headers    []sink.Header `json:"headers,omitempty"`
	EventTime  *time.Time    `json:"event_time,omitempty"`
}

// Commit implements sink.Sink: it returns once the batch is on stable
// storage, or with a transient error after which nothing may be assumed.
func (s *Sink) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return sink.CommitResult{}, sink.Permanent(ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return sink.CommitResult{}, sink.Transient(err)
	}
	if len(b.Records) == 0 {
		return sink.CommitResult{}, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, r := range b.Records {
		l := line{ID: r.ID.String(), Durability: r.Durability.String(), Received: r.Received.UTC(), Source: r.Source,
			Payload: r.Payload, Key: r.Key, Headers: r.Headers}
		if !r.EventTime.IsZero() {
			t := r.EventTime.UTC()
			l.EventTime = &t
		}
		if err := enc.Encode(&l); err != nil {
			return sink.CommitResult{}, sink.Permanent(fmt.Errorf("jsonlsink: encode: %w", err))
		}
	}
	if err := s.append(buf.Bytes()); err != nil {
		s.failed = err
		return sink.CommitResult{}, sink.Transient(err)
	}
	s.failed = nil
	return sink.CommitResult{}, nil
}

// append writes p to the current file (opening a new one when there is
// none or it is full) and syncs it. On any error the file is dropped: it
// is never written or synced again.
func (s *Sink) append(p []byte) error {
	if s.f != nil && s.size+int64(len(p)) > s.opts.MaxBytes && s.size > 0 {
		s.drop()
	}
	if s.f == nil {
		name := filepath.Join(s.opts.Dir, fmt.Sprintf("%s%06d%s", prefix, s.next, suffix))
		f, err := s.opts.FS.Create(name, 0o640)
		if err != nil {
			return fmt.Errorf("jsonlsink: %w", err)
		}
		s.next++
		// The new entry must be durable before anything in it is acked.
		if err := s.opts.FS.SyncDir(s.opts.Dir); err != nil {
			_ = f.Close()
			return fmt.Errorf("jsonlsink: sync %s: %w", s.opts.Dir, err)
		}
		s.f, s.size = f, 0
	}
	if _, err := s.f.Write(p); err != nil {
		s.drop()
		return fmt.Errorf("jsonlsink: write: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		s.drop() // never retry fsync on this file
		return fmt.Errorf("jsonlsink: sync: %w", err)
	}
	s.size += int64(len(p))
	return nil
}

func (s *Sink) drop() {
	if err := s.f.Close(); err != nil {
		s.log.Warn("jsonlsink: closing a file", "file", s.f.Name(), "err", err)
	}
	s.f = nil
}

// Health implements sink.Sink.
func (s *Sink) Health(context.Context) sink.Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return sink.Health{State: sink.Down, Reason: "closed"}
	case s.failed != nil:
		return sink.Health{State: sink.Degraded, Reason: s.failed.Error()}
	}
	return sink.Health{State: sink.Healthy}
}

// Close implements sink.Sink; what was committed is already durable.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// Record is one stored record, as Read returns it.
type Record struct {
	ID         sink.RecordID
	Durability sink.Durability
	Received   time.Time
	Source     string
	Payload    []byte
	Key        []byte
	Headers    []sink.Header
	EventTime  time.Time
}

// Read returns every record stored in dir, in file and line order,
// duplicates included. A last line without its newline is a write a crash
// cut short, never acknowledged: it is skipped.
func Read(fsys vfs.FS, dir string) ([]Record, error) {
	files, err := list(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, f := range files {
		recs, err := readFile(fsys, filepath.Join(dir, f.name))
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	return out, nil
}

func readFile(fsys vfs.FS, path string) ([]Record, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, fmt.Errorf("jsonlsink: %w", err)
	}
	defer f.Close()
	var out []Record
	r := bufio.NewReader(f)
	for {
		raw, err := r.ReadBytes('\n')
		if err == io.EOF {
			return out, nil // a torn last line, if any, is dropped
		}
		if err != nil {
			return nil, fmt.Errorf("jsonlsink: read %s: %w", path, err)
		}
		var l line
		if err := json.Unmarshal(raw, &l); err != nil {
			return nil, fmt.Errorf("jsonlsink: %s: %w", path, err)
		}
		id, err := sink.ParseRecordID(l.ID)
		if err != nil {
			return nil, fmt.Errorf("jsonlsink: %s: %w", path, err)
		}
		rec := Record{ID: id, Received: l.Received, Source: l.Source, Payload: l.Payload, Key: l.Key, Headers: l.Headers}
		if l.Durability == sink.Buffered.String() {
			rec.Durability = sink.Buffered
		}
		if l.EventTime != nil {
			rec.EventTime = *l.EventTime
		}
		out = append(out, rec)
	}
}

type fileRef struct {
	name string
	n    int
}

// list returns the sink's files in dir by number.
func list(fsys vfs.FS, dir string) ([]fileRef, error) {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("jsonlsink: %w", err)
	}
	var out []fileRef
	for _, name := range names {
		num, ok := strings.CutPrefix(name, prefix)
		if num, ok2 := strings.CutSuffix(num, suffix); ok && ok2 {
			if n, err := strconv.Atoi(num); err == nil {
				out = append(out, fileRef{name, n})
			}
		}
	}
	slices.SortFunc(out, func(a, b fileRef) int { return a.n - b.n })
	return out, nil
}
