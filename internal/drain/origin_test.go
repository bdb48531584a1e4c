package drain

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
	"github.com/weir-io/weir/wab"
)

// TestOriginIDs: records a source wrote carry their origin id and source
// name to the sink; records without one get the segment-derived id.
func TestOriginIDs(t *testing.T) {
	dir := t.TempDir()
	sd := filepath.Join(dir, "shard-000")
	if err := os.MkdirAll(sd, 0o700); err != nil {
		t.Fatal(err)
	}
	origin := source.Origin{ID: source.ID([]byte("cluster"), []byte("topic"), source.Uint64(7)), Source: "kafka:topic"}
	h := wab.Header{Shard: 0, Seq: 1, UID: 99, Instance: testInstance}
	recs := []wab.Record{
		{Payload: []byte("from-kafka"), Meta: source.EncodeOrigin(origin), Received: baseReceived},
		{Payload: []byte("from-socket"), Received: baseReceived},
	}
	if err := wab.WriteSealed(vfs.OS, filepath.Join(sd, "00000000000000000001.wab.sealed"), h, recs); err != nil {
		t.Fatal(err)
	}
	s := &scriptSink{max: 10}
	s.script = func(context.Context, int, sink.Batch) (sink.CommitResult, error) { return sink.CommitResult{}, nil }
	obs := &recObserver{}
	start(t, fastOptions(dir, newDirSource(dir), s, obs))
	waitFor(t, "segment delivered", func() bool { return len(obs.snapshot().delivered) == 1 })
	got := s.got()[0].Records
	if got[0].ID != origin.ID || got[0].Source != "kafka:topic" {
		t.Errorf("source record delivered as id %s source %q; want the origin's %s %q", got[0].ID, got[0].Source, origin.ID, origin.Source)
	}
	if want := sink.RecordID(wab.RecordID(h, 1, []byte("from-socket"))); got[1].ID != want || got[1].Source != RecordSource {
		t.Errorf("socket record delivered as %s %q; want %s %q", got[1].ID, got[1].Source, want, RecordSource)
	}
}
