package natssrc

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/source"
)

// Kind is the JetStream source's kind name: type = "nats".
const Kind = "nats"

// Config is the JetStream source's table, [source.nats]. A zero number or
// duration takes the package default.
type Config struct {
	URL            string        // url
	Stream         string        // stream
	Consumer       string        // consumer
	FilterSubjects []string      // filter_subjects
	FetchBatch     int           // fetch_batch
	FetchMaxWait   time.Duration // fetch_max_wait
	AckWait        time.Duration // ack_wait
	MaxAckPending  int           // max_ack_pending
	MaxDeliver     int           // max_deliver
}

// Component is the JetStream source's registration (internal/components
// lists it).
func Component() component.SourceDef {
	return component.Source[Config]{
		Name:    Kind,
		Summary: "a NATS JetStream durable pull consumer; messages acked after the gate's durable write",
		Caps:    component.SourceCaps{Regime: source.BrokerManaged, Pausable: true},
		Fields: []component.Field{
			component.Key("url", setting.Text("a NATS URL; several separated by commas", nil), nats.DefaultURL, "Server to connect to.",
				func(c *Config) *string { return &c.URL }),
			component.Key("stream", setting.Text("a stream name", nil), "", "Stream to read.",
				func(c *Config) *string { return &c.Stream }, component.Required()),
			component.Key("consumer", setting.Text("a durable consumer name", nil), "", "Durable consumer; created, or updated to this configuration, at start. Its ack floor is the source's position.",
				func(c *Config) *string { return &c.Consumer }, component.Required()),
			component.Key("filter_subjects", setting.TableList("subjects, wildcards allowed", nil), nil, "Subjects the consumer reads; empty reads the whole stream.",
				func(c *Config) *[]string { return &c.FilterSubjects }),
			component.Key("fetch_batch", setting.OrZero(setting.Int(1, 1<<16), "the default"), DefaultFetchBatch, "Messages per fetch (one gate write); lowered to max_ack_pending when the memory budget lowers that.",
				func(c *Config) *int { return &c.FetchBatch }),
			component.Key("fetch_max_wait", setting.OrZero(setting.Duration(time.Millisecond, time.Minute), "the default"), DefaultFetchMaxWait, "How long a fetch waits to fill.",
				func(c *Config) *time.Duration { return &c.FetchMaxWait }),
			component.Key("ack_wait", setting.OrZero(setting.Duration(time.Second, 24*time.Hour), "the default"), DefaultAckWait,
				"The consumer's ack wait: a message not acked within it is redelivered. Must exceed fetch_max_wait plus the gate's latency.",
				func(c *Config) *time.Duration { return &c.AckWait }),
			component.Key("max_ack_pending", setting.OrZero(setting.Int(1, 1<<20), "the default"), 0, "The consumer's bound on unacknowledged messages; at least fetch_batch. Unset, it is 4 × fetch_batch, lowered to the records the source's share of memory_budget holds (docs/sources.md); set, it wins.",
				func(c *Config) *int { return &c.MaxAckPending }, component.Shown("4 × fetch_batch, within the memory budget")),
			component.Key("max_deliver", setting.OrZero(setting.Int(1, 1<<20), "unlimited"), 0, "Delivery attempts per message; a message the gate cannot take is never dropped by the server when unlimited.",
				func(c *Config) *int { return &c.MaxDeliver }),
		},
		Check: func(c *Config) []component.Problem {
			var ps []component.Problem
			ack, fetch := orDefault(c.AckWait, DefaultAckWait), orDefault(c.FetchMaxWait, DefaultFetchMaxWait)
			if ack <= fetch {
				ps = append(ps, component.Problem{Key: "ack_wait", Value: setting.FormatDuration(ack),
					Why: fmt.Sprintf("must exceed fetch_max_wait (%s)", setting.FormatDuration(fetch))})
			}
			batch := orDefault(c.FetchBatch, DefaultFetchBatch)
			if c.MaxAckPending != 0 && c.MaxAckPending < batch {
				ps = append(ps, component.Problem{Key: "max_ack_pending", Value: fmt.Sprint(c.MaxAckPending),
					Why: fmt.Sprintf("must be at least fetch_batch (%d)", batch)})
			}
			return ps
		},
		Open: func(_ context.Context, p component.SourceParams[Config]) (source.Source, error) {
			c := p.Config
			return New(Options{
				Name: p.Name, URL: c.URL, Stream: c.Stream, Consumer: c.Consumer, FilterSubjects: c.FilterSubjects,
				FetchBatch: c.FetchBatch, FetchMaxWait: c.FetchMaxWait, AckWait: c.AckWait,
				MaxAckPending: c.MaxAckPending, MaxDeliver: c.MaxDeliver,
				Prefetch: p.Flow.Prefetch, Estimator: p.Flow.Estimator,
				Logger: p.Logger,
				OnAck:  func(string, uint64) { p.OnCommit() },
			})
		},
		Probe: func(ctx context.Context, c *Config) error {
			return Probe(ctx, Options{URL: c.URL, Stream: c.Stream})
		},
	}
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
