package kafkasink_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-io/weir/internal/sink/kafkasink"
	"github.com/weir-io/weir/sink"
)

// BenchmarkSink compares the Kafka sink with a bare franz-go producer of
// the same settings (idempotent, acks=all, no compression, 1 MiB batches)
// producing into the same in-process cluster (kfake, one broker, a topic
// of 4 partitions per variant), in the same run. Each run prints a
// "BENCH: {json}" line:
//
//	go test -run '^$' -bench . -benchtime 1x -count 5 ./internal/sink/kafkasink
//
// Baselines, each sending the same batches of 4096 records with 256-byte
// payloads (WEIR_BENCH_BATCHES of them, default 48), after a warm-up of
// the cluster, in an order that rotates from run to run:
//
//   - bare: each batch's payloads as plain records (no key, no headers,
//     franz-go's default partitioner), produced and flushed batch by batch
//     — one batch at a time, as the drain commits and the sink waits;
//   - bare_same_records: the Kafka records the sink sends (weir's four
//     headers, each on the partition its id picks), built off the clock,
//     produced and flushed batch by batch: what is left is the sink's own
//     cost;
//   - bare_headers: the same records left to franz-go's default
//     partitioner (sticky: it fills one partition's batch, then the
//     next), which tells the cost of weir's headers from that of placing
//     records by id;
//   - bare_pipelined: the plain records of every batch produced without
//     waiting between batches, one Flush at the end.
//
// ratio is the sink's rate over bare's; ratio_<baseline> over the others'.
func BenchmarkSink(b *testing.B) {
	n := 48
	if s := os.Getenv("WEIR_BENCH_BATCHES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	const per, payloadBytes, partitions = 4096, 256, 4
	batches := benchBatches(n, per, payloadBytes)
	for range b.N {
		iter := int(benchRuns.Add(1))
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "warm", "bare", "same", "headers", "pipelined", "sink"))
		if err != nil {
			b.Fatal(err)
		}
		plain := func(i int) []*kgo.Record { return plainRecords(batches[i]) }
		bareSync(b, c, "warm", 2, plain) // the cluster's first requests are slow
		variants := []struct {
			name string
			run  func() float64
		}{
			{"bare", func() float64 { return bareSync(b, c, "bare", n, plain) }},
			{"same", func() float64 {
				return bareSync(b, c, "same", n, func(i int) []*kgo.Record { return sinkRecords(batches[i], partitions) },
					kgo.RecordPartitioner(kgo.ManualPartitioner()))
			}},
			{"headers", func() float64 {
				return bareSync(b, c, "headers", n, func(i int) []*kgo.Record { return sinkRecords(batches[i], 0) })
			}},
			{"pipelined", func() float64 { return barePipelined(b, c, "pipelined", batches) }},
			{"sink", func() float64 { return sinkRate(b, c, "sink", batches) }},
		}
		rates := map[string]float64{}
		for k := range variants { // each run starts with another variant
			v := variants[(iter+k)%len(variants)]
			runtime.GC()
			rates[v.name] = v.run()
		}
		c.Close()
		got, bare, same, piped, hdrs := rates["sink"], rates["bare"], rates["same"], rates["pipelined"], rates["headers"]
		b.ReportMetric(got, "records/s")
		j, _ := json.Marshal(map[string]any{
			"name": "kafkasink", "records_per_s": got,
			"bare_records_per_s": bare, "ratio": got / bare,
			"bare_same_records_per_s": same, "ratio_same_records": got / same,
			"bare_headers_records_per_s": hdrs, "ratio_headers": got / hdrs,
			"bare_pipelined_records_per_s": piped, "ratio_pipelined": got / piped,
			"batch": per, "payload_bytes": payloadBytes, "records": n * per, "partitions": partitions,
			"first": variants[iter%len(variants)].name,
			"date":  time.Now().UTC().Format(time.RFC3339),
		})
		fmt.Printf("BENCH: %s\n", j)
	}
}

// sinkRate commits batches to a Kafka sink on topic, one after another as
// the drain does.
func sinkRate(b *testing.B, c *kfake.Cluster, topic string, batches [][]sink.Record) float64 {
	b.Helper()
	ctx := context.Background()
	s, err := kafkasink.New(ctx, kafkasink.Options{Brokers: c.ListenAddrs(), Topic: topic, MaxBatchSize: len(batches[0])})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	sb := make([]sink.Batch, len(batches)) // the drain's work, not the sink's
	n := 0
	for i, recs := range batches {
		sb[i] = sink.NewBatch(recs)
		n += len(recs)
	}
	start := time.Now()
	for _, batch := range sb {
		if res, err := s.Commit(ctx, batch); err != nil || len(res.Rejected) > 0 {
			b.Fatalf("commit: %v %v", err, res.Rejected)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// benchRuns counts the runs of BenchmarkSink in this process (-count), so
// that each starts with another variant.
var benchRuns atomic.Int64

func benchBatches(n, per, payloadBytes int) [][]sink.Record {
	payload := []byte(strings.Repeat("abcdefghijklmnop", payloadBytes/16))
	now := time.Now()
	out := make([][]sink.Record, n)
	for i := range out {
		recs := make([]sink.Record, per)
		for j := range recs {
			sum := sha256.Sum256(fmt.Appendf(nil, "%d/%d/%d", now.UnixNano(), i, j))
			recs[j] = sink.Record{ID: sink.RecordID(sum[:16]), Payload: payload, Received: now, Source: "socket"}
		}
		out[i] = recs
	}
	return out
}

// bareOpts are the bare producer's options: franz-go's defaults
// (idempotent, acks=all) with the sink's batch size and no compression.
func bareOpts(c *kfake.Cluster, topic string, more ...kgo.Opt) []kgo.Opt {
	return append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchMaxBytes(kafkasink.DefaultMaxMessageBytes),
		kgo.ProducerBatchCompression(kgo.NoCompression())}, more...)
}

// plainRecords are recs' payloads as plain Kafka records.
func plainRecords(recs []sink.Record) []*kgo.Record {
	out := make([]*kgo.Record, len(recs))
	for i := range recs {
		out[i] = &kgo.Record{Value: recs[i].Payload}
	}
	return out
}

// sinkRecords are the Kafka records the sink sends for a batch — the
// payload and weir's four headers — each placed on the partition the sink
// picks (its id as a key) for a producer that places them by hand; with
// partitions 0, left to the producer's partitioner.
func sinkRecords(recs []sink.Record, partitions int) []*kgo.Record {
	byID := kgo.StickyKeyPartitioner(nil).ForTopic("")
	durable := []byte("durable")
	slab := make([]kgo.Record, len(recs)) // one allocation per batch, as the sink makes
	hs := make([]kgo.RecordHeader, 4*len(recs))
	out := make([]*kgo.Record, len(recs))
	for j, r := range recs {
		id := []byte(r.ID.String())
		h := hs[4*j : 4*j+4 : 4*j+4]
		h[0] = kgo.RecordHeader{Key: kafkasink.HeaderRecordID, Value: id}
		h[1] = kgo.RecordHeader{Key: kafkasink.HeaderSource, Value: []byte(r.Source)}
		h[2] = kgo.RecordHeader{Key: kafkasink.HeaderDurability, Value: durable}
		h[3] = kgo.RecordHeader{Key: kafkasink.HeaderReceivedAt, Value: []byte(r.Received.UTC().Format(time.RFC3339Nano))}
		slab[j] = kgo.Record{Value: r.Payload, Headers: h}
		if partitions > 0 {
			slab[j].Partition = int32(byID.Partition(&kgo.Record{Key: id}, partitions))
		}
		out[j] = &slab[j]
	}
	return out
}

// bareSync produces each of n batches and waits for it (Flush: no linger)
// before the next, as the sink does. build makes batch i's records; only
// producing and waiting are timed, so that records built ahead do not
// swell the heap the run collects.
func bareSync(b *testing.B, c *kfake.Cluster, topic string, n int, build func(i int) []*kgo.Record, more ...kgo.Opt) float64 {
	b.Helper()
	cl, err := kgo.NewClient(bareOpts(c, topic, more...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	var failed atomic.Int64
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.Add(1)
		}
	}
	var took time.Duration
	records := 0
	for i := range n {
		recs := build(i)
		start := time.Now()
		for _, r := range recs {
			cl.Produce(ctx, r, promise)
		}
		if err := cl.Flush(ctx); err != nil || failed.Load() > 0 {
			b.Fatal(err, failed.Load())
		}
		took += time.Since(start)
		records += len(recs)
	}
	return float64(records) / took.Seconds()
}

func barePipelined(b *testing.B, c *kfake.Cluster, topic string, batches [][]sink.Record) float64 {
	b.Helper()
	cl, err := kgo.NewClient(bareOpts(c, topic, kgo.MaxBufferedRecords(1<<20))...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	start := time.Now()
	n := 0
	var failed atomic.Int64
	for _, recs := range batches {
		for _, r := range plainRecords(recs) {
			cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.Add(1)
				}
			})
		}
		n += len(recs)
	}
	if err := cl.Flush(ctx); err != nil || failed.Load() > 0 {
		b.Fatal(err, failed.Load())
	}
	return float64(n) / time.Since(start).Seconds()
}
