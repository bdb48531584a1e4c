package filesink

import (
	"context"
	"time"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// Kind is the file sink's kind name: type = "file".
const Kind = "file"

// DefaultDirName is the [sink]'s directory under data_dir.
const DefaultDirName = "out"

// Config is the file sink's table: [sink.file], [secondary.file].
type Config struct {
	Dir          string        // dir
	MaxBytes     int64         // max_bytes
	MaxAge       time.Duration // max_age
	BatchRecords int           // batch_records
}

// Component is the file sink's registration (internal/components lists
// it).
func Component() component.SinkDef {
	return component.Sink[Config]{
		Name:    Kind,
		Summary: "newline-delimited JSON files in a directory, fdatasynced per commit",
		Caps:    component.SinkCaps{FSSeam: true, Durable: true, NonDurable: true},
		Fields: []component.Field{
			component.Key("dir", setting.Path(), "", "Directory the file sink writes its NDJSON files to.",
				func(c *Config) *string { return &c.Dir }, component.Dir(DefaultDirName)),
			component.Key("max_bytes", setting.Size(4<<10, 64<<30), DefaultMaxBytes, "An output file is closed and a new one started once it reaches this size.",
				func(c *Config) *int64 { return &c.MaxBytes }),
			component.Key("max_age", setting.Duration(10*time.Millisecond, 24*time.Hour), DefaultMaxAge, "An output file is closed and a new one started once it is this old.",
				func(c *Config) *time.Duration { return &c.MaxAge }),
			component.Key("batch_records", setting.Int(1, 1<<20), DefaultMaxBatchSize, "Most records the file sink takes per commit.",
				func(c *Config) *int { return &c.BatchRecords }),
		},
		Open: func(ctx context.Context, p component.SinkParams[Config]) (sink.Sink, error) {
			return New(ctx, options(p, false))
		},
		MaxBatch: func(c *Config) int { return c.BatchRecords },
		Raw: component.DirRaw(func(c *Config) string { return c.Dir },
			func(ctx context.Context, p component.SinkParams[Config]) (sink.Raw, error) {
				return New(ctx, options(p, true))
			},
			func(fsys vfs.FS, dir string) (sink.RawReader, func() error, error) {
				r, err := OpenRawReader(fsys, dir)
				if err != nil {
					return nil, nil, err
				}
				return r, func() error { return nil }, nil
			}),
	}
}

func options(p component.SinkParams[Config], positions bool) Options {
	c := p.Config
	return Options{FS: p.FS, Dir: c.Dir, MaxBytes: c.MaxBytes, MaxAge: c.MaxAge, MaxBatchSize: c.BatchRecords,
		Positions: positions, NoSync: p.NonDurable, Logger: p.Logger}
}
