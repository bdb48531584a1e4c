package parquetsink

import (
	"bytes"
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testMaxPayload keeps the oversize poison record small.
const testMaxPayload = 100 << 10

// TestConformance runs the shared sink suite. The Parquet sink keeps
// duplicates (readers deduplicate on the id) and stores any bytes; the only
// record it rejects is one whose payload exceeds max_payload_bytes. It has
// no connection to break.
func TestConformance(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) *sinktest.Harness {
		dir := t.TempDir()
		open := func(t *testing.T) sink.Sink {
			s, err := New(context.Background(), Options{Dir: dir, MaxPayloadBytes: testMaxPayload})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		return &sinktest.Harness{
			Sink:            open(t),
			KeepsDuplicates: true,
			BinaryPayloads:  true,
			Metadata:        true,
			ReadBack: func(ctx context.Context) ([]sinktest.Stored, error) {
				recs, err := ReadDir(vfs.OS, dir)
				if err != nil {
					return nil, err
				}
				return stored(recs), nil
			},
			Poison: func(kind int) (sink.Record, bool) {
				if kind > 0 {
					return sink.Record{}, false
				}
				return sink.Record{Payload: bytes.Repeat([]byte{'p'}, testMaxPayload+1)}, true
			},
			Reopen: open,
		}
	})
}

func stored(recs []Record) []sinktest.Stored {
	out := make([]sinktest.Stored, len(recs))
	for i, r := range recs {
		out[i] = sinktest.Stored{ID: r.ID, Payload: r.Payload, Source: r.Source, Durability: r.Durability, Received: r.Received,
			Key: r.Key, Headers: r.Headers, EventTime: r.EventTime}
	}
	return out
}
