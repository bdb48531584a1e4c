package dqaudit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weir-io/weir/internal/synclog"
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
	fs  vfs.FS
	dir string

	mu     sync.Mutex
	log    *synclog.Log
	buf    []byte
	lastNS int64 // of the last file name, so that names never repeat
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
	w := &DirWriter{fs: fsys, dir: dir}
	w.log = w.newLog(FileMaxBytes)
	return w, nil
}

// newLog is the writer's synclog, rolling files at fileMax bytes.
func (w *DirWriter) newLog(fileMax int64) *synclog.Log {
	return synclog.New(synclog.Options{FS: w.fs, Dir: w.dir, FileMaxBytes: fileMax, Name: w.nextName,
		Stopped: ErrStopped, Closed: ErrClosed})
}

// nextName is a-<unix nanos>.ndjson, later than any name before it.
func (w *DirWriter) nextName() string {
	w.lastNS = max(time.Now().UnixNano(), w.lastNS+1)
	return filePrefix + strconv.FormatInt(w.lastNS, 10) + fileSuffix
}

// Dir is the writer's directory.
func (w *DirWriter) Dir() string { return w.dir }

// Write appends entries, one line each, and returns once they are
// fdatasynced (internal/synclog: a failed write or fdatasync stops the
// writer, and the part of the batch that landed is cut off, so that no
// unacknowledged entry is read back: the Trail writes it again, with
// another writer).
func (w *DirWriter) Write(_ context.Context, entries []Entry) error {
	if len(entries) == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	buf := w.buf[:0]
	for i := range entries {
		b, err := json.Marshal(&entries[i])
		if err != nil {
			return fmt.Errorf("dqaudit: encode entry: %w", err)
		}
		buf = append(append(buf, b...), '\n')
	}
	w.buf = buf
	if err := w.log.Append(buf); err != nil {
		return fmt.Errorf("dqaudit: %w", err)
	}
	return nil
}

// Close closes the current file; later Writes fail.
func (w *DirWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log.Close()
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
