package arrowrec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/weir-io/weir/sink"
)

// The headers that keep a row's Arrow schema.
const (
	// HeaderSchema is on every row: the schema's fingerprint
	// (Schema.Fingerprint), 64 hex digits.
	HeaderSchema = "weir-arrow-schema"
	// HeaderSchemaIPC is on the first row of each batch: the schema itself
	// (Schema.IPC), which SchemaFromIPC reads back.
	HeaderSchemaIPC = "weir-arrow-schema-ipc"
)

// Schema is an Arrow schema as weir keeps it.
type Schema struct {
	Arrow *arrow.Schema
	// IPC is the schema as an Arrow IPC stream with no batches (what
	// Flight's FlightInfo.schema holds).
	IPC []byte
	// Fingerprint is the lowercase hex SHA-256 of IPC.
	Fingerprint string
}

// NewSchema serializes s and takes its fingerprint.
func NewSchema(s *arrow.Schema) Schema {
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(s), ipc.WithAllocator(memory.DefaultAllocator))
	_ = w.Close() // writes the schema and the end-of-stream marker to memory; cannot fail
	sum := sha256.Sum256(buf.Bytes())
	return Schema{Arrow: s, IPC: buf.Bytes(), Fingerprint: hex.EncodeToString(sum[:])}
}

// SchemaFromIPC reads back a schema HeaderSchemaIPC (or FlightInfo)
// carries.
func SchemaFromIPC(b []byte) (Schema, error) {
	r, err := ipc.NewReader(bytes.NewReader(b))
	if err != nil {
		return Schema{}, fmt.Errorf("arrowrec: schema: %w", err)
	}
	defer r.Release()
	return NewSchema(r.Schema()), nil
}

// Schemas remembers the schemas rows carry, by fingerprint, so that a
// columnar sink finds a row's schema from its fingerprint header alone:
// only the first row of each batch carries the schema itself. Not safe
// for concurrent use.
type Schemas map[string]Schema

// Of returns the schema of the row whose headers are hs: the one it
// carries (HeaderSchemaIPC, remembered), else the one remembered for its
// fingerprint (HeaderSchema). False when the row has no fingerprint, or
// one not seen with its schema yet (since a restart, say): a sink then
// writes the row by GenericSchema, or waits for its batch's first row.
func (s Schemas) Of(hs []sink.Header) (Schema, bool) {
	var fp string
	var ipcBytes []byte
	for _, h := range hs {
		switch h.Key {
		case HeaderSchema:
			fp = string(h.Value)
		case HeaderSchemaIPC:
			ipcBytes = h.Value
		}
	}
	if fp == "" {
		return Schema{}, false
	}
	if sc, ok := s[fp]; ok {
		return sc, true
	}
	if ipcBytes == nil {
		return Schema{}, false
	}
	sc, err := SchemaFromIPC(ipcBytes)
	if err != nil || sc.Fingerprint != fp {
		return Schema{}, false
	}
	s[fp] = sc
	return sc, true
}
