package parquetsink

import (
	"context"
	"time"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// Kind is the Parquet sink's kind name: type = "parquet".
const Kind = "parquet"

// DefaultDirName is the [sink]'s directory under data_dir.
const DefaultDirName = "parquet"

// Config is the Parquet sink's table: [sink.parquet], [secondary.parquet].
type Config struct {
	Dir             string        // dir
	MaxBytes        int64         // max_bytes (staged bytes per file)
	MaxAge          time.Duration // max_age
	BatchRecords    int           // batch_records
	MaxPayloadBytes int64         // max_payload_bytes
	Compression     string        // compression: a zstd level name
}

// Component is the Parquet sink's registration (internal/components lists
// it).
func Component() component.SinkDef {
	return component.Sink[Config]{
		Name:    Kind,
		Summary: "Parquet files (zstd) built from a synced staging log",
		Caps:    component.SinkCaps{FSSeam: true, Durable: true, NonDurable: true},
		Fields: []component.Field{
			component.Key("dir", setting.Path(), "", "Directory the Parquet sink writes its files (and their staging logs) to.",
				func(c *Config) *string { return &c.Dir }, component.Dir(DefaultDirName)),
			component.Key("max_bytes", setting.Size(64<<10, 16<<30), DefaultMaxBytes, "A Parquet file is written once its staged records reach this size (before compression); the file is smaller.",
				func(c *Config) *int64 { return &c.MaxBytes }),
			component.Key("max_age", setting.Duration(10*time.Millisecond, 24*time.Hour), DefaultMaxAge, "A Parquet file is written once its first staged record is this old.",
				func(c *Config) *time.Duration { return &c.MaxAge }),
			component.Key("batch_records", setting.Int(1, 1<<20), DefaultMaxBatchSize, "Most records the Parquet sink takes per commit.",
				func(c *Config) *int { return &c.BatchRecords }),
			component.Key("max_payload_bytes", setting.Size(1, 1<<30), int64(DefaultMaxPayloadBytes), "A record with a larger payload is dead-lettered by the Parquet sink.",
				func(c *Config) *int64 { return &c.MaxPayloadBytes }),
			component.Key("compression", setting.Enum(CompressionLevels...), DefaultCompression, "zstd level of the Parquet files: fastest, default (about zstd 3), better (about 7) or best.",
				func(c *Config) *string { return &c.Compression }),
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
				return r, r.Close, nil
			}),
	}
}

func options(p component.SinkParams[Config], positions bool) Options {
	c := p.Config
	return Options{FS: p.FS, Dir: c.Dir, MaxBytes: c.MaxBytes, MaxAge: c.MaxAge, MaxBatchSize: c.BatchRecords,
		MaxPayloadBytes: int(c.MaxPayloadBytes), Compression: c.Compression, Positions: positions,
		NoSync: p.NonDurable, Logger: p.Logger}
}
