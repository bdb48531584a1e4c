package jsonlsink

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

// TestConformance runs the shared sink suite on memfs, which can lose
// power (the Durability case crashes it and reads back only what was
// synced), and on the real file system. The sink keeps duplicates (readers
// deduplicate on the id), stores any bytes and never rejects a record, so
// the poison and connection cases do not apply.
func TestConformance(t *testing.T) {
	for _, mem := range []bool{true, false} {
		name := "os"
		if mem {
			name = "memfs"
		}
		t.Run(name, func(t *testing.T) {
			sinktest.Run(t, func(t *testing.T) *sinktest.Harness {
				m, fs, dir := testenv.SinkFS(t, mem, nil)
				openOn := func(t *testing.T, fs vfs.FS) sink.Sink {
					s, err := New(context.Background(), Options{FS: fs, Dir: dir, MaxBytes: 64 << 10})
					if err != nil {
						t.Fatal(err)
					}
					return s
				}
				readBack := func(fs vfs.FS) testenv.ReadBack {
					return func(context.Context) ([]sinktest.Stored, error) {
						recs, err := Read(fs, dir)
						out := make([]sinktest.Stored, len(recs))
						for i, r := range recs {
							out[i] = sinktest.Stored{ID: r.ID, Payload: r.Payload, Source: r.Source, Durability: r.Durability, Received: r.Received}
						}
						return out, err
					}
				}
				h := &sinktest.Harness{
					Sink:            openOn(t, fs),
					KeepsDuplicates: true,
					BinaryPayloads:  true,
					ReadBack:        readBack(fs),
					Reopen:          func(t *testing.T) sink.Sink { return openOn(t, fs) },
				}
				testenv.SetMemCrash(h, m, openOn, readBack)
				return h
			})
		})
	}
}

// TestSyncFailure: a failed fdatasync is reported transient and never
// retried on that file; the retried batch lands in a new file.
func TestSyncFailure(t *testing.T) {
	dir := t.TempDir()
	efs := errorfs.New(vfs.OS, errorfs.Rule{Op: errorfs.OpSync, Path: "*/records-000001.jsonl", After: 1})
	s, err := New(context.Background(), Options{FS: efs, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := func(i byte) sink.Record {
		return sink.Record{ID: sink.RecordID{i}, Payload: []byte{i}, Source: "t", Received: time.Unix(int64(i), 0).UTC(),
			Key: []byte("k"), Headers: []sink.Header{{Key: "h", Value: []byte{0}}}, EventTime: time.Unix(7, 0).UTC()}
	}
	ctx := context.Background()
	if _, err := s.Commit(ctx, sink.NewBatch([]sink.Record{rec(1)})); err != nil {
		t.Fatal(err)
	}
	b := sink.NewBatch([]sink.Record{rec(2), rec(3)})
	_, err = s.Commit(ctx, b)
	var inj *errorfs.InjectedError
	if !sink.IsTransient(err) || !errors.As(err, &inj) {
		t.Fatalf("commit over a failing sync: %v (transient %v)", err, sink.IsTransient(err))
	}
	if h := s.Health(ctx); h.State != sink.Degraded {
		t.Errorf("health after a failure: %v", h.State)
	}
	if _, err := s.Commit(ctx, b); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if n := efs.CallsOn(errorfs.OpSync, filepath.Join(dir, "records-000001.jsonl")); n != 2 {
		t.Errorf("%d syncs of the failed file, want 2 (one good, one failed, none retried)", n)
	}
	recs, err := Read(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[sink.RecordID]bool{}
	for _, r := range recs {
		seen[r.ID] = true
		if string(r.Key) != "k" || len(r.Headers) != 1 || !r.EventTime.Equal(time.Unix(7, 0)) {
			t.Errorf("record %s lost its key, headers or event time: %+v", r.ID, r)
		}
	}
	for i := byte(1); i <= 3; i++ {
		if !seen[sink.RecordID{i}] {
			t.Errorf("record %d missing", i)
		}
	}
	if h := s.Health(ctx); h.State != sink.Healthy {
		t.Errorf("health after a good commit: %v", h.State)
	}
}

// TestTornLastLine: a line a crash cut short was never acknowledged and is
// skipped; a new sink on the directory starts a new file.
func TestTornLastLine(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := New(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, sink.NewBatch([]sink.Record{{ID: sink.RecordID{1}, Payload: []byte("a")}})); err != nil {
		t.Fatal(err)
	}
	s.Close()
	f, err := os.OpenFile(filepath.Join(dir, "records-000001.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"weir_record_id":"02`)
	f.Close()
	s, err = New(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Commit(ctx, sink.NewBatch([]sink.Record{{ID: sink.RecordID{3}, Payload: []byte("c")}})); err != nil {
		t.Fatal(err)
	}
	recs, err := Read(vfs.OS, dir)
	if err != nil || len(recs) != 2 || recs[0].ID != (sink.RecordID{1}) || recs[1].ID != (sink.RecordID{3}) {
		t.Fatalf("read %+v, %v", recs, err)
	}
}
