package natssrc_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/source/natssrc"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

// TestRecordMetadataReachesTheSink: a message's headers (repeated names
// kept, in the order sent per name; names sorted), its Nats-Msg-Id as key
// and its stream timestamp as event time travel through the write-ahead
// buffer and the drain into the NDJSON primary raw, and come back through
// its raw reader — with "stream/subject@seq" in the buffer.
func TestRecordMetadataReachesTheSink(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type sent struct {
		hdr  nats.Header
		key  []byte
		seq  uint64
		subj string
		pub  time.Time
	}
	msgID := "id-" + e.stream
	cases := []nats.Header{
		{"z": {"1", "2"}, "a": {"x"}, jetstream.MsgIDHeader: {msgID}},
		nil,
		{"b": {"\u00e9", ""}},
	}
	want := map[string]sent{}
	for i, h := range cases {
		p := fmt.Sprintf("m-%d", i)
		subj := fmt.Sprintf("%s.%d", e.subject, i)
		before := time.Now()
		ack, err := e.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: []byte(p), Header: h})
		if err != nil {
			t.Fatal(err)
		}
		s := sent{hdr: h, seq: ack.Sequence, subj: subj, pub: before}
		if h != nil && h.Get(jetstream.MsgIDHeader) != "" {
			s.key = []byte(msgID)
		}
		want[p] = s
		e.check.ExpectPayload([]byte(p), enginetest.Position{Source: srcName, Partition: e.stream, Offset: int64(ack.Sequence)})
	}
	r := start(context.Background(), e.source(nil), e.check)
	e.settled()
	r.Stop(t)

	for _, st := range e.wab.Records(t) {
		w := want[st.Payload]
		if pos := fmt.Sprintf("%s/%s@%d", e.stream, w.subj, w.seq); st.OriginPos != pos {
			t.Errorf("%s: origin position %q, want %q", st.Payload, st.OriginPos, pos)
		}
	}
	got := e.wab.DrainToFileRaw(t)
	if len(got) != len(cases) {
		t.Fatalf("raw reader read %d records, want %d", len(got), len(cases))
	}
	for _, g := range got {
		w, ok := want[string(g.Payload)]
		if !ok {
			t.Fatalf("unexpected record %q", g.Payload)
		}
		if why := sinktest.MetaDiff(sink.Record{Key: w.key, Headers: natssrc.Headers(w.hdr)}, sink.Record{Key: g.Key, Headers: g.Headers}); why != "" {
			t.Errorf("%s: %s", g.Payload, why)
		}
		// The stream's timestamp: set by the server between publish and ack.
		if g.EventTime.Before(w.pub.Add(-time.Second)) || g.EventTime.After(time.Now()) {
			t.Errorf("%s: event time %s, published at %s", g.Payload, g.EventTime, w.pub)
		}
		if at, ok := record.IDTime(g.ID); !ok || !at.Equal(g.EventTime.Truncate(time.Millisecond)) {
			t.Errorf("%s: id %s carries %v (time-ordered %v), the stream's time is %v", g.Payload, g.ID, at, ok, g.EventTime)
		}
	}
}

// TestHeaders: names sorted, each name's values in order, repeats kept.
func TestHeaders(t *testing.T) {
	got := natssrc.Headers(nats.Header{"z": {"1", "2"}, "a": {"x"}, "M": {""}})
	want := []sink.Header{{Key: "M", Value: []byte{}}, {Key: "a", Value: []byte("x")}, {Key: "z", Value: []byte("1")}, {Key: "z", Value: []byte("2")}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Headers = %q, want %q", got, want)
	}
	if natssrc.Headers(nil) != nil || natssrc.Headers(nats.Header{}) != nil {
		t.Fatal("no headers should be nil")
	}
}
