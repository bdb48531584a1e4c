package kafkasrc

import (
	"context"
	"time"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/source"
)

// Kind is the Kafka source's kind name: type = "kafka".
const Kind = "kafka"

// Config is the Kafka source's table, [source.kafka]. A zero number or
// duration takes the package default.
type Config struct {
	Brokers          []string      // brokers
	Topics           []string      // topics
	Group            string        // group
	Cluster          string        // cluster
	MaxPollRecords   int           // max_poll_records
	PerRecordCommit  bool          // per_record_commit
	StartAtEnd       bool          // start_at_end
	CommitTimeout    time.Duration // commit_timeout
	RebalanceTimeout time.Duration // rebalance_timeout
	SessionTimeout   time.Duration // session_timeout
}

// Component is the Kafka source's registration (internal/components lists
// it).
func Component() component.SourceDef {
	return component.Source[Config]{
		Name:    Kind,
		Summary: "a Kafka consumer group; offsets committed after the gate's durable write",
		Caps:    component.SourceCaps{Regime: source.BrokerManaged, PerRecordCommit: true, Pausable: true},
		Fields: []component.Field{
			component.Key("brokers", setting.TableList("host:port of one or more brokers", nil), nil, "Bootstrap brokers.",
				func(c *Config) *[]string { return &c.Brokers }, component.Required()),
			component.Key("topics", setting.TableList("topic names", nil), nil, "Topics the group reads.",
				func(c *Config) *[]string { return &c.Topics }, component.Required()),
			component.Key("group", setting.Text("a consumer group id", nil), "", "Consumer group; its committed offsets are the source's position.",
				func(c *Config) *string { return &c.Group }, component.Required()),
			component.Key("cluster", setting.Text("any string; empty: the cluster id the brokers report", nil), "",
				"Names the cluster in record ids; keep it stable (a cluster rebuilt under another id would change the ids of re-read records).",
				func(c *Config) *string { return &c.Cluster }),
			component.Key("max_poll_records", setting.OrZero(setting.Int(1, 1<<20), "the default"), DefaultMaxPollRecords,
				"Most records one poll (one gate write) takes. (What the client fetches ahead of the polls is bounded by the source's share of memory_budget: see docs/sources.md.)",
				func(c *Config) *int { return &c.MaxPollRecords }),
			component.Key("per_record_commit", setting.Bool(), false, "Write and commit one record at a time instead of one poll at a time (slower; a crash re-reads at most one record).",
				func(c *Config) *bool { return &c.PerRecordCommit }),
			component.Key("start_at_end", setting.Bool(), false, "A group without committed offsets starts at the end of each partition instead of the beginning.",
				func(c *Config) *bool { return &c.StartAtEnd }),
			component.Key("commit_timeout", setting.OrZero(setting.Duration(100*time.Millisecond, 10*time.Minute), "the default"), DefaultCommitTimeout,
				"Bound of one offset commit attempt; a commit after a durable write is still tried at shutdown within it.",
				func(c *Config) *time.Duration { return &c.CommitTimeout }),
			component.Key("rebalance_timeout", setting.OrZero(setting.Duration(time.Second, time.Hour), "the default"), DefaultRebalanceTimeout, "The group's rebalance timeout.",
				func(c *Config) *time.Duration { return &c.RebalanceTimeout }),
			component.Key("session_timeout", setting.OrZero(setting.Duration(time.Second, time.Hour), "the default"), DefaultSessionTimeout,
				"The group's session timeout (the brokers bound it: group.min/max.session.timeout.ms).",
				func(c *Config) *time.Duration { return &c.SessionTimeout }),
		},
		Open: func(_ context.Context, p component.SourceParams[Config]) (source.Source, error) {
			c := p.Config
			return New(Options{
				Name: p.Name, Brokers: c.Brokers, Topics: c.Topics, Group: c.Group, Cluster: c.Cluster,
				MaxPollRecords: c.MaxPollRecords, PerRecordCommit: c.PerRecordCommit, StartAtEnd: c.StartAtEnd,
				CommitTimeout: c.CommitTimeout, RebalanceTimeout: c.RebalanceTimeout, SessionTimeout: c.SessionTimeout,
				Prefetch: p.Flow.Prefetch, Estimator: p.Flow.Estimator,
				Logger:   p.Logger,
				OnCommit: func(string, int32, int64) { p.OnCommit() },
			})
		},
		Probe: func(ctx context.Context, c *Config) error {
			return Probe(ctx, Options{Brokers: c.Brokers, Topics: c.Topics})
		},
	}
}
