package filesink

import (
	"context"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

// TestConformance runs the shared sink suite. The file sink keeps
// duplicates (readers deduplicate on the id), stores any bytes, and never
// rejects a record, so the poison and connection cases do not apply.
func TestConformance(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) *sinktest.Harness {
		dir := t.TempDir()
		open := func(t *testing.T) sink.Sink {
			s, err := New(context.Background(), Options{Dir: dir})
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
				lines, err := ReadDirFS(vfs.OS, dir, true)
				if err != nil {
					return nil, err
				}
				out := make([]sinktest.Stored, len(lines))
				for i, l := range lines {
					out[i] = sinktest.Stored{ID: l.ID, Payload: l.Payload, Source: l.Source, Durability: l.Durability, Received: l.Received,
						Key: l.Key, Headers: l.Headers, EventTime: l.EventTime}
				}
				return out, nil
			},
			Reopen: open,
		}
	})
}
