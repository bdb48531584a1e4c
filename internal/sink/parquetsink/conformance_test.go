package parquetsink

import (
	"bytes"
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/internal/vfs"
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
	m, fs, dir := testenv.SinkFS(t, mem, nil)
	opts.Dir = dir
	openOn := func(t *testing.T, fs vfs.FS) sink.Sink { o := opts; o.FS = fs; return open(t, o) }
	h := &sinktest.Harness{
		Sink:            openOn(t, fs),
		KeepsDuplicates: true,
		BinaryPayloads:  true,
		Metadata:        true,
		ReadBack:        readBack(fs, dir, check),
		Poison: func(kind int) (sink.Record, bool) {
			if kind > 0 {
				return sink.Record{}, false
			}
			return sink.Record{Payload: bytes.Repeat([]byte{'p'}, testMaxPayload+1)}, true
		},
		Reopen: func(t *testing.T) sink.Sink { return openOn(t, fs) },
	}
	testenv.SetMemCrash(h, m, openOn, func(fs vfs.FS) testenv.ReadBack { return readBack(fs, dir, check) })
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
		out[i] = sinktest.Stored{ID: r.ID, Payload: r.Payload, Source: r.Source, Durability: r.Durability, Received: r.Received,
			Key: r.Key, Headers: r.Headers, EventTime: r.EventTime}
	}
	return out
}
