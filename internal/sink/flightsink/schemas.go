package flightsink

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sync"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// schemas are the Arrow schemas the sink has seen, by fingerprint. A row
// of an Arrow source carries its schema's fingerprint (the header
// arrowrec.HeaderSchema); only the first row of each source batch carries
// the schema itself (arrowrec.HeaderSchemaIPC). So that a later row can be
// sent typed after a restart — its batch's first row delivered before it
// — every schema is kept on disk, fdatasynced, before the first commit
// that sends rows of it returns: <dir>/<fingerprint>.arrows, the schema as
// an IPC stream with no batches. Without a directory (dir "") they are
// kept in memory only.
type schemas struct {
	fs  vfs.FS
	dir string

	mu sync.Mutex
	m  map[string]*group // by fingerprint: the group's send and typed schemas, no rows
}

func newSchemas(fsys vfs.FS, dir string) *schemas {
	return &schemas{fs: fsys, dir: dir, m: map[string]*group{}}
}

// errUnknownSchema is a row whose schema the sink never saw.
var errUnknownSchema = errors.New("its Arrow schema is unknown to the sink: the row that carries the schema (the first of its source batch) was never delivered to it")

// lookup returns the group template of rec's schema, learning it from
// rec's HeaderSchemaIPC header when it has one. nil, nil: rec has no
// Arrow schema (it is sent generic).
func (s *schemas) lookup(rec *sink.Record) (*group, error) {
	var fp string
	var ipc []byte
	for _, h := range rec.Headers {
		switch h.Key {
		case arrowrec.HeaderSchema:
			fp = string(h.Value)
		case arrowrec.HeaderSchemaIPC:
			ipc = h.Value
		}
	}
	if fp == "" {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.m[fp]; ok {
		return g, nil
	}
	if ipc == nil && s.dir != "" {
		data, err := s.read(fp)
		if err != nil {
			return nil, err
		}
		ipc = data
	}
	if ipc == nil {
		return nil, errUnknownSchema
	}
	sch, err := arrowrec.SchemaFromIPC(ipc)
	if err != nil {
		return nil, err
	}
	if sch.Fingerprint != fp {
		return nil, fmt.Errorf("the schema it carries has fingerprint %s, its %s header says %s", sch.Fingerprint, arrowrec.HeaderSchema, fp)
	}
	if err := arrowrec.CheckSchema(sch.Arrow); err != nil {
		return nil, err
	}
	send, err := typedSchema(sch.Arrow)
	if err != nil {
		return nil, err
	}
	if err := s.write(fp, sch.IPC); err != nil {
		return nil, sink.Transient(err)
	}
	g := &group{send: send, typed: &sch}
	s.m[fp] = g
	return g, nil
}

func (s *schemas) file(fp string) string { return path.Join(s.dir, fp+".arrows") }

// read returns the kept schema of fingerprint fp, or errUnknownSchema.
func (s *schemas) read(fp string) ([]byte, error) {
	f, err := s.fs.Open(s.file(fp))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errUnknownSchema
	}
	if err != nil {
		return nil, sink.Transient(fmt.Errorf("flightsink: read a kept schema: %w", err))
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, sink.Transient(fmt.Errorf("flightsink: read a kept schema: %w", err))
	}
	return data, nil
}

// write keeps a schema: a temporary file, fdatasynced, renamed, and the
// directory synced. Without a directory it does nothing.
func (s *schemas) write(fp string, ipc []byte) error {
	if s.dir == "" {
		return nil
	}
	if err := s.fs.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("flightsink: schema directory: %w", err)
	}
	name := s.file(fp)
	tmp := name + ".tmp"
	_ = s.fs.Remove(tmp) // left by a crash: never reused
	f, err := s.fs.Create(tmp, 0o644)
	if err != nil {
		return fmt.Errorf("flightsink: keep a schema: %w", err)
	}
	_, err = f.Write(ipc)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.Rename(tmp, name)
	}
	if err == nil {
		err = s.fs.SyncDir(s.dir)
	}
	if err != nil {
		_ = s.fs.Remove(tmp)
		return fmt.Errorf("flightsink: keep a schema: %w", err)
	}
	return nil
}
