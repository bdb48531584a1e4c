package parquetsink

import (
	"bytes"
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/memfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testMaxPayload keeps the oversize poison record small.
const testMaxPayload = 100 << 10

// TestConformance runs the shared sink suite, on memfs (which can lose
// power, for the Durability case) and on the real file system. The Parquet
// sink keeps duplicates (readers deduplicate on the id) and stores any
// bytes; the only record it rejects is one whose payload exceeds
// max_payload_bytes. It has no connection to break.
func TestConformance(t *testing.T) {
	for _, mem := range []bool{true, false} {
		t.Run(variant(mem), func(t *testing.T) {
			sinktest.Run(t, func(t *testing.T) *sinktest.Harness {
				return harness(t, Options{MaxPayloadBytes: testMaxPayload}, mem, nil)
			})
		})
	}
}

func variant(mem bool) string {
	if mem {
		return "memfs"
	}
	return "os"
}

// harness opens a sink with opts on a fresh directory, on memfs (mem) or on
// the real file system, and gives the suite its hooks; check, when set,
// vets what ReadBack reads.
func harness(t *testing.T, opts Options, mem bool, check func([]Record) error) *sinktest.Harness {
	var m *memfs.FS
	if mem {
		m = memfs.New()
		opts.FS, opts.Dir = m, "/sink"
	} else {
		opts.FS, opts.Dir = vfs.OS, t.TempDir()
	}
	h := &sinktest.Harness{
		Sink:            open(t, opts),
		KeepsDuplicates: true,
		BinaryPayloads:  true,
		ReadBack:        readBack(opts.FS, opts.Dir, check),
		Poison: func(kind int) (sink.Record, bool) {
			if kind > 0 {
				return sink.Record{}, false
			}
			return sink.Record{Payload: bytes.Repeat([]byte{'p'}, testMaxPayload+1)}, true
		},
		Reopen:  func(t *testing.T) sink.Sink { return open(t, opts) },
		NoCrash: "the real file system cannot lose power in a test (the memfs variant does)",
	}
	if m != nil {
		h.Crash = func(*testing.T) sinktest.Crashed {
			after := opts
			after.FS = m.CrashClone(memfs.CrashOptions{Mode: memfs.CrashDropUnsynced})
			return sinktest.Crashed{
				ReadBack: readBack(after.FS, after.Dir, check),
				Reopen:   func(t *testing.T) sink.Sink { return open(t, after) },
			}
		}
	}
	return h
}

func readBack(fs vfs.FS, dir string, check func([]Record) error) func(context.Context) ([]sinktest.Stored, error) {
	return func(context.Context) ([]sinktest.Stored, error) {
		recs, err := ReadDir(fs, dir)
		if err == nil && check != nil {
			err = check(recs)
		}
		if err != nil {
			return nil, err
		}
		return stored(recs), nil
	}
}

func stored(recs []Record) []sinktest.Stored {
	out := make([]sinktest.Stored, len(recs))
	for i, r := range recs {
		out[i] = sinktest.Stored{ID: r.ID, Payload: r.Payload, Source: r.Source, Durability: r.Durability, Received: r.Received}
	}
	return out
}
