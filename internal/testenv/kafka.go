package testenv

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ReadKafkaTopic reads every record of topic, from the start of each
// partition to its end as the read finds it, through a client of its own
// (opts are added to its options): what a newcomer consuming the topic
// sees. Records come partition by partition in offset order.
func ReadKafkaTopic(ctx context.Context, brokers []string, topic string, opts ...kgo.Opt) ([]*kgo.Record, error) {
	ends, err := kafkaEnds(ctx, brokers, topic, opts)
	if err != nil {
		return nil, err
	}
	from := map[int32]kgo.Offset{}
	var total int64
	for p, end := range ends {
		if end > 0 {
			from[p] = kgo.NewOffset().AtStart()
			total += end
		}
	}
	if len(from) == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from})}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("read topic %s: %w", topic, err)
	}
	defer cl.Close()
	next := map[int32]int64{} // next offset to see, per partition
	out := make([]*kgo.Record, 0, total)
	for done := 0; done < len(from); {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read topic %s: %d of %d partitions read: %w", topic, done, len(from), err)
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) { ferr = fmt.Errorf("read topic %s partition %d: %w", topic, p, err) })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= ends[r.Partition] {
				return
			}
			out = append(out, r)
			if next[r.Partition] = r.Offset + 1; next[r.Partition] == ends[r.Partition] {
				done++
			}
		})
	}
	return out, nil
}

// kafkaEnds is the end offset of each partition of topic.
func kafkaEnds(ctx context.Context, brokers []string, topic string, opts []kgo.Opt) (map[int32]int64, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("read topic %s: %w", topic, err)
	}
	defer cl.Close()
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = []kmsg.MetadataRequestTopic{mt}
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("read topic %s: metadata: %w", topic, err)
	}
	if len(mresp.Topics) != 1 {
		return nil, fmt.Errorf("read topic %s: metadata names %d topics", topic, len(mresp.Topics))
	}
	if err := kerr.ErrorForCode(mresp.Topics[0].ErrorCode); err != nil {
		return nil, fmt.Errorf("read topic %s: metadata: %w", topic, err)
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.ReplicaID = -1
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	for _, p := range mresp.Topics[0].Partitions {
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition = p.Partition
		lp.Timestamp = -1 // the end
		lt.Partitions = append(lt.Partitions, lp)
	}
	lo.Topics = []kmsg.ListOffsetsRequestTopic{lt}
	lresp, err := lo.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("read topic %s: list offsets: %w", topic, err)
	}
	ends := map[int32]int64{}
	for _, t := range lresp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("read topic %s partition %d: list offsets: %w", topic, p.Partition, err)
			}
			ends[p.Partition] = p.Offset
		}
	}
	return ends, nil
}
