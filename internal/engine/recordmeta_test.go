package engine_test

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
	"github.com/weir-io/weir/source"
	"github.com/weir-io/weir/wab"
)

// metaRecords are source records with and without each piece of
// metadata: a key (and an empty one), headers in an order with a repeated
// name and a binary value, an event time, an origin position.
func metaRecords() []source.Record {
	event := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	hdrs := []sink.Header{{Key: "b", Value: []byte("1")}, {Key: "a", Value: []byte{0, 0xff}}, {Key: "b", Value: []byte("2")}, {Key: "e"}}
	out := []source.Record{
		{Payload: []byte("full"), Source: "kafka:t", Key: []byte("k"), Headers: hdrs, Time: event, OriginPos: "t/0@5"},
		{Payload: []byte("empty-key"), Source: "kafka:t", Key: []byte{}, Time: event},
		{Payload: []byte("bare"), Source: "file:x"},
	}
	for i := range out {
		out[i].ID = source.ID([]byte("meta"), out[i].Payload)
	}
	return out
}

// TestWABGateKeepsRecordMeta: the buffer keeps each record's key,
// headers (order and repeats), event time (the source record's Time) and
// origin position next to its id and source.
func TestWABGateKeepsRecordMeta(t *testing.T) {
	w := enginetest.OpenWAB(t, 2)
	want := metaRecords()
	if err := w.Gate(t).Write(context.Background(), want); err != nil {
		t.Fatal(err)
	}
	stored := w.Records(t)
	if len(stored) != len(want) {
		t.Fatalf("stored %d records, wrote %d", len(stored), len(want))
	}
	byPayload := map[string]enginetest.Stored{}
	for _, s := range stored {
		byPayload[s.Payload] = s
	}
	for _, r := range want {
		s := byPayload[string(r.Payload)]
		var event int64
		if !r.Time.IsZero() {
			event = r.Time.UnixNano()
		}
		if s.ID != r.ID || s.Source != r.Source || s.EventTime != event || s.OriginPos != r.OriginPos {
			t.Errorf("%s: stored %+v", r.Payload, s)
		}
		if (s.Key == nil) != (r.Key == nil) || !bytes.Equal(s.Key, r.Key) {
			t.Errorf("%s: key %q (nil %v), want %q (nil %v)", r.Payload, s.Key, s.Key == nil, r.Key, r.Key == nil)
		}
		if why := sinktest.MetaDiff(sink.Record{Headers: r.Headers}, sink.Record{Headers: s.Headers}); why != "" {
			t.Errorf("%s: %s", r.Payload, why)
		}
	}
}

// TestWABGateRefusesOversizedMeta: headers too large for a buffer
// record's meta fail the whole Write before anything is written.
func TestWABGateRefusesOversizedMeta(t *testing.T) {
	w := enginetest.OpenWAB(t, 1)
	batch := metaRecords()
	batch[2].Headers = []sink.Header{{Key: "big", Value: make([]byte, wab.MaxMetaBytes)}}
	err := w.Gate(t).Write(context.Background(), batch)
	if !errors.Is(err, wab.ErrRecordTooLarge) || !errors.Is(err, engine.ErrGate) {
		t.Fatalf("err = %v, want ErrGate and ErrRecordTooLarge", err)
	}
	if got := w.Records(t); len(got) != 0 {
		t.Fatalf("%d records written, want none", len(got))
	}
}

// captureSink keeps every record committed to it.
type captureSink struct {
	mu   sync.Mutex
	recs []sink.Record
}

func (c *captureSink) Name() string                       { return "capture" }
func (c *captureSink) MaxBatchSize() int                  { return 100 }
func (c *captureSink) Close() error                       { return nil }
func (c *captureSink) Health(context.Context) sink.Health { return sink.Health{} }
func (c *captureSink) Commit(_ context.Context, b sink.Batch) (sink.CommitResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, b.Records...)
	return sink.CommitResult{}, nil
}

// TestSinkGateCarriesRecordMeta: without a buffer the sink receives the
// key, headers and event time too; Received is the source's own when it
// set one, else the gate's.
func TestSinkGateCarriesRecordMeta(t *testing.T) {
	want := metaRecords()
	read := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	want[2].Received = read
	c := &captureSink{}
	before := time.Now()
	if err := engine.NewSinkGate(c, engine.SinkGateOptions{}).Write(context.Background(), want); err != nil {
		t.Fatal(err)
	}
	if len(c.recs) != len(want) {
		t.Fatalf("sink got %d records, want %d", len(c.recs), len(want))
	}
	for i, r := range want {
		got := c.recs[i]
		exp := sink.Record{ID: r.ID, Payload: r.Payload, Source: r.Source, Durability: sink.Durable,
			Key: r.Key, Headers: r.Headers, EventTime: r.Time, Received: got.Received}
		if !reflect.DeepEqual(got, exp) {
			t.Errorf("record %d: %+v, want %+v", i, got, exp)
		}
	}
	if !c.recs[2].Received.Equal(read) || c.recs[0].Received.Before(before) {
		t.Errorf("received %s and %s; want the source's %s and the gate's (after %s)", c.recs[2].Received, c.recs[0].Received, read, before)
	}
}
