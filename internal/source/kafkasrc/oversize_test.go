package kafkasrc_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/internal/source/kafkasrc"
	"github.com/weir-io/weir/internal/vfs"
)

// TestOversizedRecordDoesNotStallThePartition: a record larger than the
// buffer takes, among good ones, goes to the buffer gate's rejection lane
// (code oversize, with its Kafka position) and the partition's committed
// offset passes it — the good records are in the buffer, none twice, and
// the group reaches the high water instead of retrying the poison record
// forever. Every commit is checked against what is durable (the big
// record is durable in the lane once the gate's Write returned nil).
func TestOversizedRecordDoesNotStallThePartition(t *testing.T) {
	e := newEnv(t, 1)
	laneDir := t.TempDir()
	lane := quarantine.NewOnDemand(quarantine.Options{Dir: laneDir})
	e.check = enginetest.NewTestChecker(t, e.wab.GateWith(t, engine.GateOptions{MaxRecordBytes: 1000, Quarantine: lane}), nil)

	big := bytes.Repeat([]byte("b"), 2000)
	var values [][]byte
	for i := range 20 {
		values = append(values, fmt.Appendf(nil, "good-%02d", i))
		if i == 9 {
			values = append(values, big)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.ListenAddrs()...), kgo.DefaultProduceTopic(e.topic))
	if err != nil {
		t.Fatal(err)
	}
	var bigOffset int64
	for _, v := range values {
		res := cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte("k"), Value: v})
		if err := res.FirstErr(); err != nil {
			t.Fatal(err)
		}
		r := res[0].Record
		if bytes.Equal(v, big) {
			bigOffset = r.Offset
		}
		e.check.ExpectPayload(v, enginetest.Position{Source: srcName, Partition: kafkasrc.PartitionKey(r.Topic, r.Partition), Offset: r.Offset})
	}
	cl.Close()

	r := start(e.source("kafka", nil), e.check)
	e.waitAllCommitted()
	r.Stop(t)

	copies := enginetest.Summary(t, e.wab.Records(t))
	if len(copies) != 20 || copies[string(big)] != 0 {
		t.Fatalf("buffer holds %d distinct records (the big one %d times), want the 20 good ones", len(copies), copies[string(big)])
	}
	got, err := quarantine.ReadDir(vfs.OS, laneDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Fatal("the oversized record is nowhere")
	}
	for _, q := range got { // a retried Write may quarantine it again, under the same id
		if q.Record.Payload != string(big) || q.ReasonCode != "oversize" || q.Stage != "gate" ||
			q.OriginPos != kafkasrc.OriginPos(e.topic, 0, bigOffset) || q.Key != "k" || q.Record.Source != srcName {
			t.Fatalf("lane holds %+v", q)
		}
	}
}
