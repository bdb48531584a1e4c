package kafkasink

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/sink"
)

// Kind is the Kafka sink's kind name: type = "kafka".
const Kind = "kafka"

// Config is the Kafka sink's table: [secondary.kafka], [sink.kafka].
type Config struct {
	Brokers         []string      // brokers
	Topic           string        // topic
	ClientID        string        // client_id
	DeliveryTimeout time.Duration // delivery_timeout
	BatchRecords    int           // batch_records
	MaxMessageBytes int           // max_message_bytes
	Compression     string        // compression
}

// Component is the Kafka sink's registration (internal/components lists
// it). It has no raw mode: a topic cannot be read back by weir's
// positions, so it cannot be primary raw. It is durable in Kafka's sense
// (acks=all), not idempotent (a replay is produced again; readers
// deduplicate on the weir_record_id header), and has no non-durable mode.
func Component() component.SinkDef {
	return component.Sink[Config]{
		Name:    Kind,
		Summary: "records of a Kafka topic (idempotent producer, acks=all); duplicates carry the same weir_record_id header",
		Caps:    component.SinkCaps{Durable: true},
		Fields: []component.Field{
			component.Key("brokers", setting.List("host:port of one or more brokers", checkBroker), nil, "Bootstrap brokers of the cluster the Kafka sink produces to.",
				func(c *Config) *[]string { return &c.Brokers }, component.Required()),
			component.Key("topic", setting.Text("an existing topic's name", nil), "", "Topic every record is produced to; it must exist (the sink creates none).",
				func(c *Config) *string { return &c.Topic }, component.Required()),
			component.Key("client_id", setting.Text("any string", nil), DefaultClientID, "Client id the brokers see (quotas, logs).",
				func(c *Config) *string { return &c.ClientID }),
			component.Key("delivery_timeout", setting.Duration(time.Second, time.Hour), DefaultDeliveryTimeout,
				"Bound of one commit: records not acknowledged by then fail the commit, which is retried (an unreachable broker never holds the sink longer).",
				func(c *Config) *time.Duration { return &c.DeliveryTimeout }),
			component.Key("batch_records", setting.Int(1, 65536), DefaultMaxBatchSize, "Most records the Kafka sink takes per commit.",
				func(c *Config) *int { return &c.BatchRecords }),
			component.Key("max_message_bytes", setting.IntSize(1<<10, 64<<20), DefaultMaxMessageBytes,
				"Largest record batch sent to one partition, before compression; keep it at or below the topic's max.message.bytes. A larger record is dead-lettered as oversize.",
				func(c *Config) *int { return &c.MaxMessageBytes }),
			component.Key("compression", setting.Enum(CompressionNone, CompressionSnappy, CompressionLZ4, CompressionZstd, CompressionGzip), DefaultCompression,
				"Codec of the record batches; every consumer of the topic must read it.",
				func(c *Config) *string { return &c.Compression }),
		},
		Open: func(ctx context.Context, p component.SinkParams[Config]) (sink.Sink, error) {
			c := p.Config
			return New(ctx, Options{Brokers: c.Brokers, Topic: c.Topic, ClientID: c.ClientID,
				DeliveryTimeout: c.DeliveryTimeout, MaxBatchSize: c.BatchRecords, MaxMessageBytes: c.MaxMessageBytes,
				Compression: c.Compression, Logger: p.Logger})
		},
		MaxBatch: func(c *Config) int { return c.BatchRecords },
		Probe: func(ctx context.Context, c *Config) error {
			return Probe(ctx, Options{Brokers: c.Brokers, Topic: c.Topic, ClientID: c.ClientID, DeliveryTimeout: c.DeliveryTimeout})
		},
	}
}

func checkBroker(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("broker %q: want host:port", s)
	}
	return nil
}
