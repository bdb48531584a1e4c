package dqaudit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weir-io/weir/internal/vfs"
)

// FileMaxBytes is the size past which a DirWriter starts a new file.
const FileMaxBytes = 16 << 20

const (
	filePrefix = "a-"
	fileSuffix = ".ndjson"
)

// ErrStopped wraps the failure that stopped a DirWriter.
var ErrStopped = errors.New("dqaudit: writer stopped after a failed write or fdatasync")

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("dqaudit: writer closed")

// DirWriter appends entries to the NDJSON files of one directory (see the
// package doc). It is safe for concurrent use.
type DirWriter struct {
	fs      vfs.FS
	dir     string
	maxSize int64

	mu     sync.Mutex
	f      vfs.File
	size   int64
	failed error
	buf    []byte
}

var _ Writer = (*DirWriter)(nil)

// OpenDir creates dir if needed; files are created as entries come.
func OpenDir(fsys vfs.FS, dir string) (*DirWriter, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	if dir == "" {
		return nil, errors.New("dqaudit: no directory")
	}
	if err := fsys.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("dqaudit: create %s: %w", dir, err)
	}
	return &DirWriter{fs: fsys, dir: dir, maxSize: FileMaxBytes}, nil
}

// Dir is the writer's directory.
func (w *DirWriter) Dir() string { return w.dir }

// Write appends entries, one line each, and returns once they are
// fdatasynced.
func (w *DirWriter) Write(_ context.Context, entries []Entry) error {
	if len(entries) == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil {
		return w.failed
	}
	buf := w.buf[:0]
	for i := range entries {
		b, err := json.Marshal(&entries[i])
		if err != nil {
			return fmt.Errorf("dqaudit: encode entry: %w", err)
		}
		buf = append(append(buf, b...), '\n')
	}
	w.buf = buf
	n := int64(len(buf))
	if w.f == nil || w.size > 0 && w.size+n > w.maxSize {
		if err := w.roll(); err != nil {
			return err
		}
	}
	// On failure, cut what part of the batch landed, so that no
	// unacknowledged entry is read back (the Trail writes it again, with
	// another writer); after a failed fdatasync the cut is not synced
	// (an fdatasync is never retried).
	if _, err := w.f.Write(buf); err != nil {
		if w.f.Truncate(w.size) == nil {
			_ = w.f.Sync()
		}
		return w.stop(fmt.Errorf("write %s: %w", w.f.Name(), err))
	}
	if err := w.f.Sync(); err != nil {
		_ = w.f.Truncate(w.size)
		return w.stop(fmt.Errorf("fdatasync %s: %w", w.f.Name(), err))
	}
	w.size += n
	return nil
}

// roll closes the current file (its bytes are synced) and creates the next
// one durably.
func (w *DirWriter) roll() error {
	if w.f != nil {
		if err := w.f.Close(); err != nil {
			return w.stop(fmt.Errorf("close %s: %w", w.f.Name(), err))
		}
		w.f, w.size = nil, 0
	}
	ns := time.Now().UnixNano()
	var f vfs.File
	var err error
	for range 100 { // another writer may have taken the name
		f, err = w.fs.Create(filepath.Join(w.dir, filePrefix+strconv.FormatInt(ns, 10)+fileSuffix), 0o600)
		if !errors.Is(err, os.ErrExist) {
			break
		}
		ns++
	}
	if err != nil {
		return fmt.Errorf("dqaudit: create a file in %s: %w", w.dir, err)
	}
	if err := w.fs.SyncDir(w.dir); err != nil {
		f.Close()
		return w.stop(fmt.Errorf("sync directory %s: %w", w.dir, err))
	}
	w.f = f
	return nil
}

func (w *DirWriter) stop(err error) error {
	w.failed = fmt.Errorf("%w: %w", ErrStopped, err)
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	return w.failed
}

// Close closes the current file; later Writes fail.
func (w *DirWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed == nil {
		w.failed = ErrClosed
	}
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}

// ReadDir reads every entry of the trail files in dir, oldest file first.
// A torn last line of a file (a write cut by a crash, never acknowledged)
// is skipped; a bad line with more after it is an error.
func ReadDir(fsys vfs.FS, dir string) ([]Entry, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("dqaudit: list %s: %w", dir, err)
	}
	var out []Entry
	for _, n := range names {
		if !strings.HasPrefix(n, filePrefix) || !strings.HasSuffix(n, fileSuffix) {
			continue
		}
		if out, err = readFile(fsys, filepath.Join(dir, n), out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func readFile(fsys vfs.FS, name string, out []Entry) ([]Entry, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, fmt.Errorf("dqaudit: %w", err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("dqaudit: read %s: %w", name, err)
	}
	// What follows the last newline is a torn write: never acknowledged.
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	for line := 1; len(data) > 0; line++ {
		i := bytes.IndexByte(data, '\n')
		b := data[:i]
		data = data[i+1:]
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(b, &e); err != nil {
			if len(bytes.TrimSpace(data)) == 0 {
				break // the last line: torn
			}
			return nil, fmt.Errorf("dqaudit: %s line %d: %w", name, line, err)
		}
		out = append(out, e)
	}
	return out, nil
}
