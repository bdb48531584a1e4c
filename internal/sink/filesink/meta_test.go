package filesink

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// metaRecords are records with a key, headers and an event time, and one
// without any.
func metaRecords() []sink.Record {
	recv := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	return []sink.Record{
		{ID: sink.RecordID{1}, Payload: []byte("p1"), Source: "kafka:o", Received: recv,
			Key: []byte("k1"), EventTime: time.Date(2024, 1, 2, 3, 4, 5, 123456789, time.UTC),
			Headers: []sink.Header{{Key: "b", Value: []byte("1")}, {Key: "a", Value: []byte{0, 0xff}}, {Key: "b", Value: []byte("2")}}},
		{ID: sink.RecordID{2}, Payload: []byte("p2"), Source: "socket", Received: recv},
		{ID: sink.RecordID{3}, Payload: []byte("p3"), Source: "kafka:o", Received: recv, Key: []byte{}},
	}
}

// TestNDJSONMetadata pins the line of a record with a key, headers and an
// event time, and that a record without them is written as it always was.
func TestNDJSONMetadata(t *testing.T) {
	recs := metaRecords()
	var lines []string
	for i := range recs {
		lines = append(lines, string(appendRecord(nil, &recs[i])))
	}
	want := []string{
		`{"weir_record_id":"01000000000000000000000000000000","durability":"durable","received_at":"2025-01-02T03:04:05.000000006Z","source":"kafka:o","payload":"p1","payload_encoding":"utf8",` +
			`"key":"k1","key_encoding":"utf8","headers":[{"key":"b","value":"1","value_encoding":"utf8"},{"key":"a","value":"AP8=","value_encoding":"base64"},{"key":"b","value":"2","value_encoding":"utf8"}],` +
			`"event_time":"2024-01-02T03:04:05.123456789Z"}` + "\n",
		`{"weir_record_id":"02000000000000000000000000000000","durability":"durable","received_at":"2025-01-02T03:04:05.000000006Z","source":"socket","payload":"p2","payload_encoding":"utf8"}` + "\n",
		`{"weir_record_id":"03000000000000000000000000000000","durability":"durable","received_at":"2025-01-02T03:04:05.000000006Z","source":"kafka:o","payload":"p3","payload_encoding":"utf8","key":"","key_encoding":"utf8"}` + "\n",
	}
	if !reflect.DeepEqual(lines, want) {
		t.Fatalf("lines:\n%s\nwant:\n%s", lines, want)
	}
}

// TestRawMetadataRoundTrip: raw mode keeps a record's key, headers and
// event time, and both the sink's ReadFrom and a RawReader (what recovery
// reads secondaries from) give them back.
func TestRawMetadataRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir, Positions: true})
	want := metaRecords()
	commitRaw(t, s, sink.NewBatch(want))
	r, _ := openReader(t, dir)
	ctx := context.Background()
	for name, read := range map[string]func() ([]sink.Positioned, error){
		"sink":       func() ([]sink.Positioned, error) { return s.ReadFrom(ctx, 0, 10, 0) },
		"raw reader": func() ([]sink.Positioned, error) { return r.ReadFrom(ctx, 0, 10, 0) },
	} {
		got, err := read()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d records, want %d", name, len(got), len(want))
		}
		for i, p := range got {
			g := p.Record
			g.Received = g.Received.In(time.UTC)
			g.EventTime = g.EventTime.In(time.UTC)
			w := want[i]
			w.Durability = g.Durability
			if w.EventTime.IsZero() {
				g.EventTime = time.Time{}
			}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%s: position %d:\n got %+v\nwant %+v", name, i, g, w)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReadsLinesWithoutMetadata: a file written before the metadata
// fields existed still reads, its records without key, headers or event
// time.
func TestReadsLinesWithoutMetadata(t *testing.T) {
	dir := t.TempDir()
	old := `{"weir_record_id":"0f000000000000000000000000000000","durability":"buffered","received_at":"2025-03-01T12:00:00.123456789Z","source":"socket","payload":"aGk=","payload_encoding":"base64"}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "weir-00000000000000000001-000000.ndjson"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	lines, err := ReadDirFS(vfs.OS, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 1 || !bytes.Equal(lines[0].Payload, []byte("hi")) || lines[0].Key != nil || lines[0].Headers != nil || !lines[0].EventTime.IsZero() {
		t.Fatalf("read %+v", lines)
	}
}
