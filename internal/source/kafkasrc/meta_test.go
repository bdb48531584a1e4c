package kafkasrc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/source/kafkasrc"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

// metaCase is one produced record with the metadata it must arrive with.
type metaCase struct {
	key     []byte // nil: a null key
	headers []kgo.RecordHeader
	ts      time.Time
}

// TestRecordMetadataReachesTheSink: a record's key (null, empty, binary),
// headers (order kept, a repeated name kept twice, binary values) and
// timestamp travel from the topic through the write-ahead buffer and the
// drain into the NDJSON primary raw, and come back through its raw
// reader (what recovery gives secondaries) — with the record's
// "topic/partition@offset" in the buffer.
func TestRecordMetadataReachesTheSink(t *testing.T) {
	e := newEnv(t, 1)
	base := time.Date(2024, 3, 4, 5, 6, 7, 8_000_000, time.UTC) // Kafka keeps milliseconds
	cases := []metaCase{
		{key: []byte("k0"), ts: base,
			headers: []kgo.RecordHeader{{Key: "z", Value: []byte("1")}, {Key: "a", Value: []byte{0, 0xff}}, {Key: "z", Value: []byte("2")}}},
		{key: nil, ts: base.Add(time.Second)},
		{key: []byte{}, ts: base.Add(2 * time.Second), headers: []kgo.RecordHeader{{Key: "only"}}},
		{key: []byte{0xff, 0}, ts: base.Add(-time.Hour)},
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.ListenAddrs()...), kgo.DefaultProduceTopic(e.topic))
	if err != nil {
		t.Fatal(err)
	}
	byPayload := map[string]metaCase{}
	for i, c := range cases {
		p := fmt.Sprintf("m-%d", i)
		byPayload[p] = c
		res := cl.ProduceSync(context.Background(), &kgo.Record{Key: c.key, Value: []byte(p), Headers: c.headers, Timestamp: c.ts})
		if err := res.FirstErr(); err != nil {
			t.Fatal(err)
		}
		r := res[0].Record
		e.check.ExpectPayload(r.Value, enginetest.Position{Source: srcName, Partition: kafkasrc.PartitionKey(r.Topic, r.Partition), Offset: r.Offset})
	}
	cl.Close()
	r := start(e.source("kafka", nil), e.check)
	e.waitAllCommitted()
	r.Stop(t)

	stored := e.wab.Records(t)
	if len(stored) != len(cases) {
		t.Fatalf("%d records in the buffer, want %d", len(stored), len(cases))
	}
	for i, s := range stored {
		if want := kafkasrc.OriginPos(e.topic, 0, int64(i)); s.OriginPos != want {
			t.Errorf("%s: origin position %q, want %q", s.Payload, s.OriginPos, want)
		}
	}
	got := e.wab.DrainToFileRaw(t)
	if len(got) != len(cases) {
		t.Fatalf("raw reader read %d records, want %d", len(got), len(cases))
	}
	for _, g := range got {
		c, ok := byPayload[string(g.Payload)]
		if !ok {
			t.Fatalf("unexpected record %q", g.Payload)
		}
		want := sink.Record{Key: c.key, EventTime: c.ts}
		for _, h := range c.headers {
			want.Headers = append(want.Headers, sink.Header{Key: h.Key, Value: h.Value})
		}
		if why := sinktest.MetaDiff(want, g); why != "" {
			t.Errorf("%s: %s", g.Payload, why)
		}
		if g.Source != "kafka" {
			t.Errorf("%s: source %q", g.Payload, g.Source)
		}
		// The id is laid out by the record's timestamp (ms 0 without one).
		at, ok := record.IDTime(g.ID)
		if wantAt := c.ts.Truncate(time.Millisecond); !ok || !c.ts.IsZero() && !at.Equal(wantAt) || c.ts.IsZero() && at.UnixMilli() != 0 {
			t.Errorf("%s: id %s carries %v (time-ordered %v), timestamp %v", g.Payload, g.ID, at, ok, c.ts)
		}
	}
}
