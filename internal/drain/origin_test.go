package drain

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
	"github.com/weir-io/weir/wab"
)

// v1Origin is the meta a source record was written with before version 2
// of the record meta (the removed source.EncodeOrigin): u8 1, the 16-byte
// id, u8 name length, name.
func v1Origin(id sink.RecordID, name string) []byte {
	b := append([]byte{1}, id[:]...)
	b = append(b, byte(len(name)))
	return append(b, name...)
}

// TestOriginIDs: records a source wrote carry their origin id, source
// name, key, headers and event time to the sink — from a segment written
// with today's meta (version 2) and from one written before it (version-1
// origin metas, which still read); records without a meta (wire-v1
// producer records) get the segment-derived id and nothing else.
func TestOriginIDs(t *testing.T) {
	dir := t.TempDir()
	sd := filepath.Join(dir, "shard-000")
	if err := os.MkdirAll(sd, 0o700); err != nil {
		t.Fatal(err)
	}
	oldID := source.ID([]byte("cluster"), []byte("topic"), source.Uint64(7))
	newID := source.ID([]byte("cluster"), []byte("topic"), source.Uint64(8))
	event := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	hdrs := []sink.Header{{Key: "h", Value: []byte("1")}, {Key: "x", Value: []byte{0, 0xff}}, {Key: "h", Value: []byte("2")}}
	v2 := record.Encode(&record.Meta{ID: newID, HasID: true, Source: "kafka:topic", Key: []byte("k1"),
		Headers: hdrs, EventTime: event.UnixNano(), OriginPos: "topic/0@8"})
	h1 := wab.Header{Shard: 0, Seq: 1, UID: 99, Instance: testInstance}
	old := []wab.Record{
		{Payload: []byte("from-kafka"), Meta: v1Origin(oldID, "kafka:topic"), Received: baseReceived},
		{Payload: []byte("from-socket"), Received: baseReceived},
	}
	h2 := wab.Header{Shard: 0, Seq: 2, UID: 100, Instance: testInstance, Flags: wab.FlagSyncMarks | wab.FlagTimeOrderedIDs}
	prod := record.Encode(&record.Meta{Producer: record.ProducerID{3}, Seq: 9, HasProducer: true, EventTime: event.UnixNano()})
	cur := []wab.Record{
		{Payload: []byte("from-kafka-v2"), Meta: v2, Received: baseReceived},
		{Payload: []byte("from-socket-now"), Received: baseReceived},
		{Payload: []byte("from-producer"), Meta: prod, Received: baseReceived},
	}
	for _, seg := range []struct {
		h    wab.Header
		name string
		recs []wab.Record
	}{{h1, "00000000000000000001.wab.sealed", old}, {h2, "00000000000000000002.wab.sealed", cur}} {
		if err := wab.WriteSealed(vfs.OS, filepath.Join(sd, seg.name), seg.h, seg.recs); err != nil {
			t.Fatal(err)
		}
	}
	s := &scriptSink{max: 10}
	s.script = func(context.Context, int, sink.Batch) (sink.CommitResult, error) { return sink.CommitResult{}, nil }
	obs := &recObserver{}
	start(t, fastOptions(dir, newDirSource(dir), s, obs))
	waitFor(t, "segments delivered", func() bool { return len(obs.snapshot().delivered) == 2 })
	got := s.got()
	v1 := got[0].Records
	if v1[0].ID != oldID || v1[0].Source != "kafka:topic" || v1[0].Key != nil || v1[0].Headers != nil || !v1[0].EventTime.IsZero() {
		t.Errorf("version-1 source record delivered as %+v; want the origin's id %s, source kafka:topic and no key, headers or event time", v1[0], oldID)
	}
	if want := sink.RecordID(wab.RecordID(h1, 1, []byte("from-socket"))); v1[1].ID != want || v1[1].Source != RecordSource || v1[1].Key != nil || v1[1].Headers != nil {
		t.Errorf("socket record delivered as %+v; want id %s, source %q", v1[1], want, RecordSource)
	}
	r := got[1].Records[0]
	if r.ID != newID || r.Source != "kafka:topic" || !bytes.Equal(r.Key, []byte("k1")) ||
		!reflect.DeepEqual(r.Headers, hdrs) || !r.EventTime.Equal(event) || string(r.Payload) != "from-kafka-v2" {
		t.Errorf("version-2 source record delivered as %+v; want id %s, key k1, headers %v, event time %s", r, newID, hdrs, event)
	}
	// In a segment that lays ids out by time, a position's id carries the
	// receive time and a producer record's id its event time.
	if want := record.TimeOrdered(sink.RecordID(wab.RecordID(h2, 1, []byte("from-socket-now"))), baseReceived); got[1].Records[1].ID != want {
		t.Errorf("socket record in a time-ordered segment: id %s, want %s", got[1].Records[1].ID, want)
	}
	if want := record.TimeOrdered(record.ProducerRecordID(record.ProducerID{3}, 9, []byte("from-producer")), event.UnixNano()); got[1].Records[2].ID != want {
		t.Errorf("producer record in a time-ordered segment: id %s, want %s", got[1].Records[2].ID, want)
	}
}
