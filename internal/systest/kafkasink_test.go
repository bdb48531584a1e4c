package systest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-io/weir/internal/sink/kafkasink"
	"github.com/weir-io/weir/internal/testenv"
)

// TestKafkaMirrorKill9: Kafka → weir → Kafka. A Kafka source feeds the
// buffer and file raw, and a Kafka sink secondary produces into another
// topic of the same cluster, while the daemon is killed -9 again and
// again mid-stream. Afterwards every input record is in the output topic;
// the copies a kill caused are told apart by their weir_record_id header:
// each input record (one partition and offset, one payload) has exactly
// one id across all its copies, no two inputs share one, every copy of a
// record sits on the one partition its id picks, and each output record
// keeps its input's timestamp as its own and names its source.
func TestKafkaMirrorKill9(t *testing.T) {
	const (
		in    = "mirror-in"
		out   = "mirror-out"
		group = "weir-mirror"
		n     = 4000
	)
	c, cl := startKafka(t, in, 3, out)
	brokers := c.ListenAddrs()
	cfg := writeConfig(t, kafkaSourceTOML("orders", group, in, brokers)+fmt.Sprintf(`
[[secondary]]
name = "mirror"
type = "kafka"
[secondary.kafka]
brokers = ["%s"]
topic = %q
delivery_timeout = "5s"
batch_records = 500
`, strings.Join(brokers, `", "`), out))
	d := newDaemon(t, "--config", cfg, "--coverage-flush-interval", "50ms")
	d.start()
	produced := produceAndKill(t, d, cl, group, in, "mirror", n, func() map[string]int { return durableNow(t, d) }, d.start)

	inputs := readTopicTB(t, brokers, in) // payload → the input record
	if len(inputs) != n {
		t.Fatalf("%d distinct payloads in the input topic, want %d", len(inputs), n)
	}
	var got map[string][]*kgo.Record
	deadline := time.Now().Add(90 * time.Second)
	for {
		got = groupByPayload(t, readKafka(t, brokers, out))
		missing, example := 0, ""
		for p := range produced {
			if len(got[p]) == 0 {
				missing, example = missing+1, p
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d input records not in the output topic after 90s (e.g. %q)\n%s", missing, n, example, tail(d.log.String(), 4000))
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := d.stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, tail(d.log.String(), 4000))
	}
	checkMirror(t, inputs, got)
}

// checkMirror checks the copies of every input record in the output
// topic; see TestKafkaMirrorKill9.
func checkMirror(t *testing.T, inputs map[string]*kgo.Record, got map[string][]*kgo.Record) {
	t.Helper()
	owner := map[string]string{} // weir_record_id → payload
	copies := 0
	for payload, outs := range got {
		in, ok := inputs[payload]
		if !ok {
			t.Errorf("output record %q was never produced", payload)
			continue
		}
		ids := map[string]bool{}
		for _, o := range outs {
			r, err := kafkasink.Decode(o)
			if err != nil {
				t.Fatalf("output record %q: %v", payload, err)
			}
			id := r.ID.String()
			ids[id] = true
			if p, ok := owner[id]; ok && p != payload {
				t.Errorf("records %q and %q share weir_record_id %s", p, payload, id)
			}
			owner[id] = payload
			if o.Partition != outs[0].Partition {
				t.Errorf("copies of %q in partitions %d and %d", payload, outs[0].Partition, o.Partition)
			}
			if r.Source != "orders" || !o.Timestamp.Equal(in.Timestamp) || !r.EventTime.Equal(in.Timestamp) {
				t.Errorf("%q: source %q, timestamp %v, event time %v; want orders and the input's %v",
					payload, r.Source, o.Timestamp, r.EventTime, in.Timestamp)
			}
		}
		if len(ids) != 1 {
			t.Errorf("input %q (partition %d offset %d) has %d weir_record_ids over %d copies: %v",
				payload, in.Partition, in.Offset, len(ids), len(outs), ids)
		}
		copies += len(outs)
	}
	t.Logf("%d input records, %d in the output topic (%d duplicates, each with its original's weir_record_id)",
		len(inputs), copies, copies-len(inputs))
}

func readKafka(t *testing.T, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, err := testenv.ReadKafkaTopic(ctx, brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func groupByPayload(t *testing.T, recs []*kgo.Record) map[string][]*kgo.Record {
	t.Helper()
	out := map[string][]*kgo.Record{}
	for _, r := range recs {
		out[string(r.Value)] = append(out[string(r.Value)], r)
	}
	return out
}

// readTopicTB is every record of topic by payload (payloads are unique).
func readTopicTB(t *testing.T, brokers []string, topic string) map[string]*kgo.Record {
	t.Helper()
	out := map[string]*kgo.Record{}
	for p, rs := range groupByPayload(t, readKafka(t, brokers, topic)) {
		if len(rs) != 1 {
			t.Fatalf("payload %q %d times in topic %s", p, len(rs), topic)
		}
		out[p] = rs[0]
	}
	return out
}
