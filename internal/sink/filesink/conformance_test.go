package filesink

import (
	"context"
	"testing"

	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/internal/vfs"
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
				return harness(t, Options{}, mem, nil)
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
// the real file system, and gives the suite its hooks; wrap, when set,
// breaks the memfs the sink sees.
func harness(t *testing.T, opts Options, mem bool, wrap func(vfs.FS) vfs.FS) *sinktest.Harness {
	m, fs, dir := testenv.SinkFS(t, mem, wrap)
	opts.Dir = dir
	openOn := func(t *testing.T, fs vfs.FS) sink.Sink { o := opts; o.FS = fs; return open(t, o) }
	h := &sinktest.Harness{
		Sink:            openOn(t, fs),
		KeepsDuplicates: true,
		BinaryPayloads:  true,
		Metadata:        true,
		ReadBack:        readBack(fs, dir),
		Reopen:          func(t *testing.T) sink.Sink { return openOn(t, fs) },
	}
	testenv.SetMemCrash(h, m, openOn, func(fs vfs.FS) testenv.ReadBack { return readBack(fs, dir) })
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
			out[i] = sinktest.Stored{ID: l.ID, Payload: l.Payload, Source: l.Source, Durability: l.Durability, Received: l.Received,
				Key: l.Key, Headers: l.Headers, EventTime: l.EventTime}
		}
		return out, nil
	}
}
