package filesink

import (
	"context"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/memfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

// TestConformance runs the shared sink suite, on memfs (which can lose
// power, for the Durability case) and on the real file system. The file
// sink keeps duplicates (readers deduplicate on the id), stores any bytes,
// and never rejects a record, so the poison and connection cases do not
// apply.
func TestConformance(t *testing.T) {
	for _, mem := range []bool{true, false} {
		t.Run(variant(mem), func(t *testing.T) {
			sinktest.Run(t, func(t *testing.T) *sinktest.Harness {
				return harness(t, Options{}, harnessFS{mem: mem})
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

// harnessFS says where a conformance harness puts the sink: on memfs (mem)
// or on the real file system, and, on memfs, what the sink sees of it
// (wrap, nil for memfs itself) — the Crash hook clones the memfs below.
type harnessFS struct {
	mem  bool
	wrap func(vfs.FS) vfs.FS
}

// harness opens a sink with opts on a fresh directory and gives the suite
// its hooks.
func harness(t *testing.T, opts Options, hf harnessFS) *sinktest.Harness {
	var m *memfs.FS
	if hf.mem {
		m = memfs.New()
		opts.FS, opts.Dir = m, "/sink"
		if hf.wrap != nil {
			opts.FS = hf.wrap(m)
		}
	} else {
		opts.FS, opts.Dir = vfs.OS, t.TempDir()
	}
	h := &sinktest.Harness{
		Sink:            open(t, opts),
		KeepsDuplicates: true,
		BinaryPayloads:  true,
		ReadBack:        readBack(opts.FS, opts.Dir),
		Reopen:          func(t *testing.T) sink.Sink { return open(t, opts) },
		NoCrash:         "the real file system cannot lose power in a test (the memfs variant does)",
	}
	if m != nil {
		h.Crash = func(*testing.T) sinktest.Crashed {
			after := opts
			after.FS = m.CrashClone(memfs.CrashOptions{Mode: memfs.CrashDropUnsynced})
			return sinktest.Crashed{
				ReadBack: readBack(after.FS, after.Dir),
				Reopen:   func(t *testing.T) sink.Sink { return open(t, after) },
			}
		}
	}
	return h
}

// readBack reads every line in dir, .open files included.
func readBack(fs vfs.FS, dir string) func(context.Context) ([]sinktest.Stored, error) {
	return func(context.Context) ([]sinktest.Stored, error) {
		lines, err := ReadDirFS(fs, dir, true)
		if err != nil {
			return nil, err
		}
		out := make([]sinktest.Stored, len(lines))
		for i, l := range lines {
			out[i] = sinktest.Stored{ID: l.ID, Payload: l.Payload, Source: l.Source, Durability: l.Durability, Received: l.Received}
		}
		return out, nil
	}
}
