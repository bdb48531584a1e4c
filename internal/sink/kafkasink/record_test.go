package kafkasink_test

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-io/weir/internal/sink/kafkasink"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

// readRaw reads the topic's Kafka records as they are stored.
func readRaw(t *testing.T, c *cluster) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, err := testenv.ReadKafkaTopic(ctx, c.addrs(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func commit(t *testing.T, s *kafkasink.Sink, recs []sink.Record) sink.CommitResult {
	t.Helper()
	res, err := s.Commit(context.Background(), sink.NewBatch(recs))
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return res
}

// TestRecordLayout: the record's key, payload and headers, then weir's
// headers in their order; the event time as the Kafka timestamp (but
// before 1970, which Kafka cannot hold); an empty payload as an empty value,
// not a null one; a record carrying weir headers of its own (a mirrored
// topic) decodes to its own.
func TestRecordLayout(t *testing.T) {
	c := newCluster(t, 1)
	s := open(t, c, nil, nil)
	recs := records("layout", 4)
	event := time.Date(2001, 2, 3, 4, 5, 6, 789_123_456, time.UTC) // far older than any timeout
	recs[0].Key = []byte("k0")
	recs[0].Headers = []sink.Header{{Key: "b", Value: []byte("1")}, {Key: "a"}}
	recs[0].EventTime = event
	recs[1].Key = []byte{}
	recs[1].Payload = nil
	recs[2].EventTime = time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC)
	recs[3].Headers = []sink.Header{{Key: kafkasink.HeaderRecordID, Value: []byte("upstream")}, {Key: kafkasink.HeaderSource, Value: []byte("up")}}
	before := time.Now().Add(-time.Second)
	commit(t, s, recs)
	got := readRaw(t, c)
	if len(got) != len(recs) {
		t.Fatalf("%d records in the topic, want %d", len(got), len(recs))
	}
	keys := func(r *kgo.Record) []string {
		var out []string
		for _, h := range r.Headers {
			out = append(out, h.Key)
		}
		return out
	}
	weir := []string{"weir_record_id", "weir_source", "weir_durability", "weir_received_at"}
	for i, want := range [][]string{
		append([]string{"b", "a"}, append(weir, "weir_event_time")...),
		weir,
		append(weir, "weir_event_time"),
		append([]string{"weir_record_id", "weir_source"}, weir...),
	} {
		if k := keys(got[i]); !slices.Equal(k, want) {
			t.Errorf("record %d headers %q, want %q", i, k, want)
		}
	}
	if !got[0].Timestamp.Equal(event.Truncate(time.Millisecond)) {
		t.Errorf("timestamp %v, want the event time %v to the ms", got[0].Timestamp, event)
	}
	if got[2].Timestamp.Before(before) {
		t.Errorf("timestamp of a record with an event time before 1970: %v, want the time it was produced", got[2].Timestamp)
	}
	if got[1].Value == nil || got[1].Key == nil || len(got[1].Key) != 0 || got[3].Key != nil {
		t.Errorf("record 1 value %v (nil: %v) key %q (nil: %v); record 3 key %q", got[1].Value, got[1].Value == nil, got[1].Key, got[1].Key == nil, got[3].Key)
	}
	for i, kr := range got {
		r, err := kafkasink.Decode(kr)
		if err != nil {
			t.Fatalf("Decode %d: %v", i, err)
		}
		w := recs[i]
		if r.ID != w.ID || !bytes.Equal(r.Payload, w.Payload) || r.Source != w.Source || r.Durability != w.Durability || !r.Received.Equal(w.Received) {
			t.Errorf("record %d decodes to %+v, want %+v", i, r, w)
		}
		if why := sinktest.MetaDiff(w, r); why != "" {
			t.Errorf("record %d: %s", i, why)
		}
	}
	if _, err := kafkasink.Decode(&kgo.Record{Value: []byte("x")}); !errors.Is(err, kafkasink.ErrNotWeir) {
		t.Errorf("Decode of a foreign record: %v", err)
	}
}

// TestPartitioning: a keyed record goes where Kafka's default partitioner
// puts its key (murmur2, the values from Kafka's own tests); a record
// without a key goes where its weir_record_id would as a key, so every
// copy of it lands on the same partition, and such records spread over
// the partitions.
func TestPartitioning(t *testing.T) {
	const n = 7
	c := newCluster(t, n)
	s := open(t, c, nil, nil)
	// Utils.murmur2 of these keys in Kafka's UtilsTest.
	murmur2 := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
	}
	var keyed []sink.Record
	for i, k := range slices.Sorted(maps.Keys(murmur2)) {
		r := records("keyed", len(murmur2))[i]
		r.Key = []byte(k)
		keyed = append(keyed, r)
	}
	keyless := records("keyless", 200)
	commit(t, s, append(append([]sink.Record(nil), keyed...), keyless...))
	commit(t, s, keyless[:50]) // replayed: the same partitions
	hasher := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	where := map[sink.RecordID]int32{}
	used := map[int32]bool{}
	for _, kr := range readRaw(t, c) {
		r, err := kafkasink.Decode(kr)
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := murmur2[string(r.Key)]; ok && r.Key != nil {
			if want := (uint32(h) & 0x7fffffff) % n; kr.Partition != int32(want) {
				t.Errorf("key %q in partition %d, want %d", r.Key, kr.Partition, want)
			}
			continue
		}
		used[kr.Partition] = true
		if want := hasher.Partition(&kgo.Record{Key: []byte(r.ID.String())}, n); kr.Partition != int32(want) {
			t.Errorf("record %s without a key in partition %d, want %d (its id as a key)", r.ID, kr.Partition, want)
		}
		if p, ok := where[r.ID]; ok && p != kr.Partition {
			t.Errorf("record %s in partitions %d and %d", r.ID, p, kr.Partition)
		}
		where[r.ID] = kr.Partition
	}
	if len(used) != n {
		t.Errorf("records without a key in %d of %d partitions", len(used), n)
	}
}

// TestRefusals: each refused record is rejected with its reason code —
// oversize for a record over max_message_bytes (never sent) and for one
// the broker finds too large, sink-refused for an invalid record — and
// the rest of the batch is committed. A broker whose max.message.bytes is
// below the sink's max_message_bytes refuses whole batches; the sink
// sends those records again one by one and rejects only the ones too large
// on their own.
func TestRefusals(t *testing.T) {
	t.Run("codes", func(t *testing.T) {
		c := newCluster(t, 2)
		refuseMarked(c.kfake())
		s := open(t, c, nil, nil)
		recs := records("good", 40)
		want := map[int]sink.Code{}
		for i, k := range map[int]int{3: 0, 17: 1, 30: 2} {
			p, _ := poison(k)
			recs[i].Payload = p.Payload
			want[i] = map[int]sink.Code{0: sink.CodeOversize, 1: sink.CodeSinkRefused, 2: sink.CodeOversize}[k]
		}
		res := commit(t, s, recs)
		got := map[int]sink.Code{}
		for _, rj := range res.Rejected {
			got[rj.Index] = rj.Code
		}
		if len(got) != len(want) {
			t.Fatalf("rejected %v, want %v", res.Rejected, want)
		}
		for i, code := range want {
			if got[i] != code {
				t.Errorf("record %d rejected as %v, want %v", i, got[i], code)
			}
		}
		if st := s.Stats(); st.Isolated == 0 || st.Rejected != 3 {
			t.Errorf("stats %+v: want records isolated and 3 rejected", st)
		}
		stored := readTopic(t, c)
		for i, r := range recs {
			if _, bad := want[i]; !bad && stored[string(r.Payload)] == 0 {
				t.Errorf("good record %d missing", i)
			}
		}
	})
	t.Run("broker limit below the sink's", func(t *testing.T) {
		c := newCluster(t, 1, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
		s := open(t, c, nil, func(o *kafkasink.Options) { o.MaxMessageBytes = 64 << 10 })
		recs := records("small", 30)
		recs[7].Payload = bytes.Repeat([]byte("y"), 8000) // fits the sink, not the broker
		res := commit(t, s, recs)
		if len(res.Rejected) != 1 || res.Rejected[0].Index != 7 || res.Rejected[0].Code != sink.CodeOversize {
			t.Fatalf("rejected %+v, want only record 7, oversize", res.Rejected)
		}
		t.Logf("reason: %s", res.Rejected[0].Reason)
		stored := readTopic(t, c)
		for i, r := range recs {
			if i != 7 && stored[string(r.Payload)] == 0 {
				t.Errorf("good record %d missing", i)
			}
		}
	})
}
