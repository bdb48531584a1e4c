// Package enginetest is test support for sources and the engine: a real
// write-ahead buffer to write through and a way to read back what it holds
// (WAB), a drain from it into a file primary raw (DrainToFileRaw), a
// source run in a goroutine (Start), a gate that crashes after the durable
// write (CrashAfter), the position invariant Checker (checker.go), which
// fails a test the moment a committed source position leads what the gate
// made durable, the offset store's fencing checks for any persister
// (Fences, fences.go), and a log collector a test reads back (Logs).
//
// Only tests import it: it is never part of the daemon's build, which
// cmd/weir's TestDaemonBuildHasNoTestSupport checks.
package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
	"github.com/weir-io/weir/wab"
)

// WAB is a write-ahead buffer in a test's temporary directory.
type WAB struct {
	Dir string
	Log *wab.Log
}

// OpenWAB opens a buffer with the given number of shards in t.TempDir(),
// closed when the test ends (or by Close).
func OpenWAB(t testing.TB, shards int) *WAB {
	t.Helper()
	dir := t.TempDir()
	l, err := wab.Open(context.Background(), wab.Options{
		Dir: dir, Shards: shards, SegmentMaxBytes: 1 << 20, PreallocateBytes: -1,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("open wab: %v", err)
	}
	w := &WAB{Dir: dir, Log: l}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// Gate is a WABGate over the buffer.
func (w *WAB) Gate(t testing.TB) *engine.WABGate {
	t.Helper()
	return w.GateWith(t, engine.GateOptions{})
}

// GateWith is a WABGate over the buffer with opts.
func (w *WAB) GateWith(t testing.TB, opts engine.GateOptions) *engine.WABGate {
	t.Helper()
	g, err := engine.NewWABGate(w.Log, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Close closes the buffer (sealing its open segments).
func (w *WAB) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return w.Log.Close(ctx)
}

// Stored is one source record as the buffer holds it: its payload and
// what its meta (record.Meta) says.
type Stored struct {
	ID        sink.RecordID
	Source    string
	Payload   string
	Key       []byte        // nil: none
	Headers   []sink.Header // in order
	EventTime int64         // Unix nanoseconds; 0: none
	OriginPos string
}

// Records closes the buffer and returns every record in it, by shard then
// segment then position. A record whose meta does not decode, or carries
// no id, fails the test.
func (w *WAB) Records(t testing.TB) []Stored {
	t.Helper()
	if err := w.Close(); err != nil {
		t.Fatalf("close wab: %v", err)
	}
	refs, err := wab.ListSealed(nil, w.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []Stored
	for _, ref := range refs {
		r, err := wab.OpenSegment(nil, ref.Path)
		if err != nil {
			t.Fatal(err)
		}
		for {
			rec, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				r.Close()
				t.Fatalf("read %s: %v", ref.Path, err)
			}
			m, err := record.Decode(bytes.Clone(rec.Meta), record.LegacyOrigin)
			if err == nil && !m.HasID {
				err = errors.New("no id")
			}
			if err != nil {
				r.Close()
				t.Fatalf("%s: record without a source record's meta: %v", ref.Path, err)
			}
			out = append(out, Stored{
				ID: m.ID, Source: m.Source, Payload: string(rec.Payload),
				Key: m.Key, Headers: m.Headers, EventTime: m.EventTime, OriginPos: m.OriginPos,
			})
		}
		r.Close()
	}
	return out
}

// Summary checks the stored records for id consistency — every copy of a
// payload has the same id, and no two payloads share one — and returns the
// number of copies of each payload.
func Summary(t testing.TB, recs []Stored) map[string]int {
	t.Helper()
	copies := map[string]int{}
	idOf := map[string]sink.RecordID{}
	payloadOf := map[sink.RecordID]string{}
	for _, r := range recs {
		copies[r.Payload]++
		if id, ok := idOf[r.Payload]; ok && id != r.ID {
			t.Errorf("payload %q stored with ids %v and %v", r.Payload, id, r.ID)
		}
		idOf[r.Payload] = r.ID
		if p, ok := payloadOf[r.ID]; ok && p != r.Payload {
			t.Errorf("id %v shared by payloads %q and %q", r.ID, p, r.Payload)
		}
		payloadOf[r.ID] = r.Payload
	}
	return copies
}

// Records are n records of source src numbered from from: payloads
// "<src>-<number>" (unique per source), ids derived from source and number.
func Records(src string, from, n int) []source.Record {
	out := make([]source.Record, n)
	for i := range out {
		p := []byte(fmt.Sprintf("%s-%06d", src, from+i))
		out[i] = source.Record{ID: source.ID([]byte(src), source.Uint64(uint64(from+i)), p), Payload: p, Source: src}
	}
	return out
}

// CountGate is a gate that passes writes to Inner and counts the records
// of those that succeeded (N), and keeps each one's record count and data
// bytes (source.Record.Size). Safe for concurrent use.
type CountGate struct {
	Inner source.Gate
	N     atomic.Int64

	mu     sync.Mutex
	writes []Write
}

// Write is one successful write through a CountGate.
type Write struct {
	Records int
	Bytes   int64
}

// Write implements source.Gate.
func (g *CountGate) Write(ctx context.Context, recs []source.Record) error {
	if err := g.Inner.Write(ctx, recs); err != nil {
		return err
	}
	data, _ := source.Sizes(recs)
	g.mu.Lock()
	g.writes = append(g.writes, Write{Records: len(recs), Bytes: data})
	g.mu.Unlock()
	g.N.Add(int64(len(recs)))
	return nil
}

// Writes are the successful writes so far.
func (g *CountGate) Writes() []Write {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.writes)
}

// CrashAfter is a gate that passes writes to Inner and, on the write number
// N (counting from 1), lets it become durable and then reports failure
// and calls OnCrash — a process that died between the durable write and
// the position commit. Later writes fail too.
type CrashAfter struct {
	Inner   source.Gate
	N       int
	OnCrash func(recs []source.Record)

	n       int
	crashed bool
	Lost    []source.Record // the batch that became durable but was reported failed
}

// ErrCrashed is what CrashAfter returns.
var ErrCrashed = errors.New("enginetest: simulated crash after the durable write")

// Write implements source.Gate. It is not safe for concurrent use.
func (c *CrashAfter) Write(ctx context.Context, recs []source.Record) error {
	if c.crashed {
		return ErrCrashed
	}
	if err := c.Inner.Write(ctx, recs); err != nil {
		return err
	}
	c.n++
	if c.n == c.N {
		c.crashed = true
		c.Lost = append([]source.Record(nil), recs...)
		if c.OnCrash != nil {
			c.OnCrash(recs)
		}
		return ErrCrashed
	}
	return nil
}
