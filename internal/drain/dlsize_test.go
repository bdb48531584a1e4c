package drain

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

// TestDeadLetterOfLargeMeta: a record whose metadata the buffer holds —
// a version-2 producer's record with a metadata block as large as the
// wire protocol allows (60 KiB, plus the event time and producer field
// the daemon adds), or a source record with as much metadata as a gate
// admits — is dead-lettered when the sink refuses it, even with a long
// reason: the rejection fields must fit the buffer's meta slot (the
// error text is cut to fit), or the record would be neither delivered
// nor dead-lettered and its segment retried for ever.
func TestDeadLetterOfLargeMeta(t *testing.T) {
	const wireMaxMeta = 60 << 10 // wire.MaxMetaBytes
	// A producer's block: version byte, key tag, 3-byte length, key.
	producer := record.Meta{Key: make([]byte, wireMaxMeta-5), EventTime: 1, Producer: record.ProducerID{1}, Seq: 1 << 20, HasProducer: true}
	if n := len(record.Encode(&record.Meta{Key: producer.Key})); n != wireMaxMeta {
		t.Fatalf("producer block of %d bytes, want %d", n, wireMaxMeta)
	}
	src := record.Meta{ID: sink.RecordID{7}, HasID: true, Source: "kafka:orders", OriginPos: "orders/0@1"}
	src.Headers = []sink.Header{{Key: "big", Value: make([]byte, wab.MaxMetaBytes-record.RejectionRoom-len(record.Encode(&src))-8)}}
	if n := len(record.Encode(&src)); n != wab.MaxMetaBytes-record.RejectionRoom {
		t.Fatalf("source meta of %d bytes, want %d", n, wab.MaxMetaBytes-record.RejectionRoom)
	}
	for _, tc := range []struct {
		name string
		meta record.Meta
	}{{"producer", producer}, {"source", src}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sd := filepath.Join(dir, "shard-000")
			if err := os.MkdirAll(sd, 0o700); err != nil {
				t.Fatal(err)
			}
			seg := filepath.Join(sd, "00000000000000000001.wab.sealed")
			h := wab.Header{Shard: 0, Seq: 1, UID: 5, Instance: testInstance, Flags: wab.FlagSyncMarks | wab.FlagTimeOrderedIDs}
			recs := []wab.Record{{Payload: []byte("p"), Meta: record.Encode(&tc.meta), Received: baseReceived}}
			if err := wab.WriteSealed(vfs.OS, seg, h, recs); err != nil {
				t.Fatal(err)
			}
			reason := strings.Repeat("refused ", 1000)
			s := &scriptSink{max: 10, script: func(context.Context, int, sink.Batch) (sink.CommitResult, error) {
				return sink.CommitResult{Rejected: []sink.Rejection{{Index: 0, Reason: reason, Code: sink.CodeDecode}}}, nil
			}}
			obs := &recObserver{}
			start(t, fastOptions(dir, newDirSource(dir), s, obs))
			waitFor(t, "segment dead-lettered or deferred", func() bool {
				o := obs.snapshot()
				return !exists(seg) || len(o.deferred) > 0
			})
			if exists(seg) {
				t.Fatalf("segment left in the buffer: the refused record could not be dead-lettered (deferred %v)", obs.snapshot().deferred)
			}
			files, err := ListDeadLetters(vfs.OS, dir)
			if err != nil || len(files) != 1 || files[0].Records != 1 {
				t.Fatalf("dead-letter files %+v, %v", files, err)
			}
			_, dl, err := ReadDeadLetter(vfs.OS, files[0].Path)
			if err != nil || dl[0].MetaErr != nil {
				t.Fatalf("read dead letter: %v, %v", err, dl[0].MetaErr)
			}
			m := dl[0].Meta
			if len(m.Key) != len(tc.meta.Key) || len(m.Headers) != len(tc.meta.Headers) || m.OriginPos != tc.meta.OriginPos ||
				m.Reject.Code != record.CodeDecode || !strings.HasPrefix(reason, strings.TrimSuffix(m.Reject.Error, "…")) || m.Reject.Error == "" {
				t.Errorf("dead letter keeps key %d bytes, %d headers, origin %q, code %s, error %d bytes",
					len(m.Key), len(m.Headers), m.OriginPos, m.Reject.Code, len(m.Reject.Error))
			}
		})
	}
}
