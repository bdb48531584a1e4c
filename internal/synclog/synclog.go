// Package synclog appends lines durably to files in one directory: the
// NDJSON files of the quarantine lanes (internal/quarantine) and of the
// dq-audit trail (internal/dqaudit) share it. A Log writes to one file at
// a time, rolls to a new one past FileMaxBytes, and returns from Append
// only once the bytes are fdatasynced; a new file's directory entry is
// synced when it is created. A failed write or fdatasync stops the Log
// for good — the sync is never retried, and what part of the failed
// append landed is cut off (best effort) so that no unacknowledged line
// is read back whole. A Log is not safe for concurrent use: its owner
// holds its own lock.
package synclog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/weir-io/weir/internal/vfs"
)

// Options configure New.
type Options struct {
	FS  vfs.FS
	Dir string
	// FileMaxBytes rolls to a new file once the current one holds this
	// many bytes (an append is never split).
	FileMaxBytes int64
	// Name is the base name of the next file; a name taken already (by
	// another writer in the directory) is asked for again.
	Name func() string
	// Stopped is what the error that stops the Log wraps, beside the
	// failure; Closed is returned by Append after Close.
	Stopped, Closed error
}

// Log is the directory's current file and what stopped it, if anything.
type Log struct {
	o      Options
	f      vfs.File
	size   int64 // bytes in f
	failed error
}

// New makes a Log; Dir must exist. Its first file is created at the first
// Append.
func New(o Options) *Log { return &Log{o: o} }

// Append writes buf (whole lines) to the current file, or to a new one
// when buf would take it past FileMaxBytes, and returns once it is
// fdatasynced — or the error that stopped the Log.
func (l *Log) Append(buf []byte) error {
	if l.failed != nil {
		return l.failed
	}
	n := int64(len(buf))
	if l.f == nil || l.size > 0 && l.size+n > l.o.FileMaxBytes {
		if err := l.roll(); err != nil {
			return err
		}
	}
	if _, err := l.f.Write(buf); err != nil {
		if l.f.Truncate(l.size) == nil {
			_ = l.f.Sync()
		}
		return l.stop(fmt.Errorf("write %s: %w", l.f.Name(), err))
	}
	if err := l.f.Sync(); err != nil {
		_ = l.f.Truncate(l.size) // not synced: an fdatasync is never retried
		return l.stop(fmt.Errorf("fdatasync %s: %w", l.f.Name(), err))
	}
	l.size += n
	return nil
}

// roll closes the current file (its bytes are synced) and creates the
// next one durably.
func (l *Log) roll() error {
	if l.f != nil {
		if err := l.f.Close(); err != nil {
			return l.stop(fmt.Errorf("close %s: %w", l.f.Name(), err))
		}
		l.f, l.size = nil, 0
	}
	var f vfs.File
	var err error
	for range 100 { // another writer may have taken the name
		f, err = l.o.FS.Create(filepath.Join(l.o.Dir, l.o.Name()), 0o600)
		if !errors.Is(err, os.ErrExist) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("create a file in %s: %w", l.o.Dir, err)
	}
	if err := l.o.FS.SyncDir(l.o.Dir); err != nil {
		f.Close()
		return l.stop(fmt.Errorf("sync directory %s: %w", l.o.Dir, err))
	}
	l.f = f
	return nil
}

func (l *Log) stop(err error) error {
	l.failed = fmt.Errorf("%w: %w", l.o.Stopped, err)
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
	return l.failed
}

// Close closes the current file; later Appends return Closed (or what
// stopped the Log before).
func (l *Log) Close() error {
	if l.failed == nil {
		l.failed = l.o.Closed
	}
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
