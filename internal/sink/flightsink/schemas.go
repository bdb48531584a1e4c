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
// the schema itself (arrowrec.HeaderSchemaIPC), which arrowrec.Schemas
// remembers. So that a later row can be sent typed after a restart — its
// batch's first row delivered before it — every schema is also kept on
// disk, fdatasynced, before the first commit that sends rows of it
// returns: <dir>/<fingerprint>.arrows, the schema as an IPC stream with no
// batches. Without a directory (dir "") they are kept in memory only.
type schemas struct {
	fs  vfs.FS
	dir string

	mu     sync.Mutex
	known  arrowrec.Schemas
	groups map[string]*group // by fingerprint: the send and typed schemas, no rows
}

func newSchemas(fsys vfs.FS, dir string) *schemas {
	return &schemas{fs: fsys, dir: dir, known: arrowrec.Schemas{}, groups: map[string]*group{}}
}

// errUnknownSchema is a row whose schema the sink never saw.
var errUnknownSchema = errors.New("its Arrow schema is unknown to the sink: the row that carries the schema (the first of its source batch) was never delivered to it")

// lookup returns the group template of rec's schema. nil, nil: rec has no
// Arrow schema (it is sent generic).
func (s *schemas) lookup(rec *sink.Record) (*group, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sch, ok := s.known.Of(rec.Headers)
	if !ok {
		fp := fingerprint(rec.Headers)
		if fp == "" {
			return nil, nil
		}
		kept, err := s.read(fp)
		if err != nil {
			return nil, err
		}
		s.known[fp] = kept
		sch = kept
	}
	if g, ok := s.groups[sch.Fingerprint]; ok {
		return g, nil
	}
	if err := arrowrec.CheckSchema(sch.Arrow); err != nil {
		return nil, err
	}
	send, err := typedSchema(sch.Arrow)
	if err != nil {
		return nil, err
	}
	if err := s.write(sch.Fingerprint, sch.IPC); err != nil {
		return nil, sink.Transient(err)
	}
	g := &group{send: send, typed: &sch}
	s.groups[sch.Fingerprint] = g
	return g, nil
}

// fingerprint is the row's schema fingerprint header, or "".
func fingerprint(hs []sink.Header) string {
	for _, h := range hs {
		if h.Key == arrowrec.HeaderSchema {
			return string(h.Value)
		}
	}
	return ""
}

func (s *schemas) file(fp string) string { return path.Join(s.dir, fp+".arrows") }

// read returns the kept schema of fingerprint fp, or errUnknownSchema
// (also without a directory).
func (s *schemas) read(fp string) (arrowrec.Schema, error) {
	if s.dir == "" {
		return arrowrec.Schema{}, errUnknownSchema
	}
	f, err := s.fs.Open(s.file(fp))
	if errors.Is(err, fs.ErrNotExist) {
		return arrowrec.Schema{}, errUnknownSchema
	}
	if err != nil {
		return arrowrec.Schema{}, sink.Transient(fmt.Errorf("flightsink: read a kept schema: %w", err))
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return arrowrec.Schema{}, sink.Transient(fmt.Errorf("flightsink: read a kept schema: %w", err))
	}
	sch, err := arrowrec.SchemaFromIPC(data)
	if err != nil {
		return arrowrec.Schema{}, fmt.Errorf("kept schema %s: %w", s.file(fp), err)
	}
	if sch.Fingerprint != fp {
		return arrowrec.Schema{}, fmt.Errorf("kept schema %s has fingerprint %s", s.file(fp), sch.Fingerprint)
	}
	return sch, nil
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
