package arrowipcsrc

import (
	"context"
	"fmt"
	"time"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/source"
)

// Kind is the Arrow IPC file source's kind name: type = "arrow_ipc".
const Kind = "arrow_ipc"

// Config is the source's table, [source.arrow_ipc]. A zero number or
// duration takes the package default.
type Config struct {
	Glob            string        // glob (absolute once configured)
	PollInterval    time.Duration // poll_interval
	MaxBatchRecords int           // max_batch_records
	MaxMessageBytes int64         // max_message_bytes
	MaxBatchRows    int           // max_batch_rows
	KeyColumn       string        // key_column
	EventTimeColumn string        // event_time_column
	HeaderColumns   []string      // header_columns
}

// Component is the source's registration (internal/components lists it).
func Component() component.SourceDef {
	column := setting.Text("a column name of the files' schema", nil)
	return component.Source[Config]{
		Name:    Kind,
		Summary: "reads a directory of Arrow IPC files (.arrow) and streams (.arrows) in name order, one record per row, each up to its last complete batch",
		Caps:    component.SourceCaps{Regime: source.StoreManaged, Pausable: true},
		Fields: []component.Field{
			component.Key("glob", setting.Glob(), "", "Files to read (filepath.Match syntax), e.g. /data/in/*.arrow*; the IPC file or stream format is told by the file's first bytes.",
				func(c *Config) *string { return &c.Glob }, component.Required()),
			component.Key("poll_interval", setting.OrZero(setting.Duration(time.Millisecond, time.Hour), "the default"), DefaultPollInterval, "How often the files are looked at when there was nothing to read.",
				func(c *Config) *time.Duration { return &c.PollInterval }),
			component.Key("max_batch_records", setting.OrZero(setting.Int(1, 1<<20), "the default"), DefaultMaxBatchRecords, "Most rows one gate write takes (a larger Arrow batch is written in parts).",
				func(c *Config) *int { return &c.MaxBatchRecords }),
			component.Key("max_message_bytes", setting.OrZero(setting.Size(1<<10, 1<<34), "the default"), int64(DefaultMaxMessageBytes), "Largest IPC message body (and decompressed buffer) accepted; a message claiming more is corrupt, and the rest of its file is quarantined.",
				func(c *Config) *int64 { return &c.MaxMessageBytes }),
			component.Key("max_batch_rows", setting.OrZero(setting.Int(1, 1<<30), "the default"), DefaultMaxBatchRows, "Most rows one Arrow record batch may have; a batch claiming more is quarantined (code decode).",
				func(c *Config) *int { return &c.MaxBatchRows }),
			component.Key("key_column", column, "", "The column whose value is each record's key (it stays in the payload).",
				func(c *Config) *string { return &c.KeyColumn }),
			component.Key("event_time_column", column, "", "The timestamp or date column whose value is each record's event time, and lays its id out by time.",
				func(c *Config) *string { return &c.EventTimeColumn }),
			component.Key("header_columns", setting.List("column names", nil), []string(nil), "Columns each of which becomes a header of its name.",
				func(c *Config) *[]string { return &c.HeaderColumns }),
		},
		Open: func(_ context.Context, p component.SourceParams[Config]) (source.Source, error) {
			m, err := NewMetrics(p.Metrics)
			if err != nil {
				return nil, fmt.Errorf("arrow_ipc metrics: %w", err)
			}
			m.Init(p.Name)
			c := p.Config
			return New(Options{
				Name: p.Name, Glob: c.Glob, PollInterval: c.PollInterval, MaxBatchRecords: c.MaxBatchRecords,
				MaxMessageBytes: c.MaxMessageBytes, MaxBatchRows: int64(c.MaxBatchRows),
				Columns:  arrowrec.Columns{Key: c.KeyColumn, EventTime: c.EventTimeColumn, Headers: c.HeaderColumns},
				Prefetch: p.Flow.Prefetch, Estimator: p.Flow.Estimator, Logger: p.Logger, Metrics: m,
				OnCommit: func(string, int64, int64) { p.OnCommit() },
			})
		},
	}
}
