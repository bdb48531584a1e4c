package jsonlsink

import (
	"context"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/sink"
)

// Kind is the kind's name: type = "jsonl".
const Kind = "jsonl"

// Config is the kind's table, [sink.jsonl] or [secondary.jsonl]: one
// field per key.
type Config struct {
	Dir          string // dir
	MaxBytes     int64  // max_bytes
	BatchRecords int    // batch_records
}

// Component is the kind's registration. Adding the kind to weir is one
// line in internal/components/all.go: jsonlsink.Component().
func Component() component.SinkDef {
	return component.Sink[Config]{
		Name:    Kind,
		Summary: "example: JSON lines appended to numbered files, fdatasynced per commit",
		Caps:    component.SinkCaps{FSSeam: true, Durable: true},
		Fields: []component.Field{
			component.Key("dir", setting.Path(), "", "Directory the files are written to.",
				func(c *Config) *string { return &c.Dir }, component.Dir("jsonl")),
			component.Key("max_bytes", setting.Size(4<<10, 16<<30), int64(DefaultMaxBytes), "A file is left for a new one once it holds this much.",
				func(c *Config) *int64 { return &c.MaxBytes }),
			component.Key("batch_records", setting.Int(1, 1<<16), DefaultMaxBatchSize, "Most records one commit takes.",
				func(c *Config) *int { return &c.BatchRecords }),
		},
		Open: func(ctx context.Context, p component.SinkParams[Config]) (sink.Sink, error) {
			return New(ctx, Options{FS: p.FS, Dir: p.Config.Dir, MaxBytes: p.Config.MaxBytes,
				MaxBatchSize: p.Config.BatchRecords, Logger: p.Logger})
		},
		MaxBatch: func(c *Config) int { return c.BatchRecords },
	}
}
