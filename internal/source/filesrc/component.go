package filesrc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/source"
)

// Kind is the file source's kind name: type = "file".
const Kind = "file"

// Config is the file source's table, [source.file]. A zero number or
// duration takes the package default.
type Config struct {
	Glob            string        // glob (absolute once configured)
	PollInterval    time.Duration // poll_interval
	MaxBatchRecords int           // max_batch_records
	MaxLineBytes    int           // max_line_bytes
	RotateGrace     time.Duration // rotate_grace
}

// Component is the file source's registration (internal/components lists
// it).
func Component() component.SourceDef {
	return component.Source[Config]{
		Name:    Kind,
		Summary: "tails files matching a glob, one record per line, following rotation; may be its own primary raw",
		Caps:    component.SourceCaps{Regime: source.StoreManaged, Pausable: true},
		Fields: []component.Field{
			component.Key("glob", setting.Glob(), "", "Files to tail (filepath.Match syntax); keep the wildcard in the file name part so rotated files are found.",
				func(c *Config) *string { return &c.Glob }, component.Required()),
			component.Key("poll_interval", setting.OrZero(setting.Duration(time.Millisecond, time.Hour), "the default"), DefaultPollInterval, "How often the files are looked at when there was nothing to read.",
				func(c *Config) *time.Duration { return &c.PollInterval }),
			component.Key("max_batch_records", setting.OrZero(setting.Int(1, 1<<20), "the default"), DefaultMaxBatchRecords, "Most lines one gate write takes. (The bytes one write reads ahead are bounded by the source's share of memory_budget: see docs/sources.md.)",
				func(c *Config) *int { return &c.MaxBatchRecords }),
			component.Key("max_line_bytes", setting.OrZero(setting.IntSize(1, 1<<30), "the default"), DefaultMaxLineBytes, "Longer lines are cut to this size.",
				func(c *Config) *int { return &c.MaxLineBytes }),
			component.Key("rotate_grace", setting.OrZero(setting.Duration(time.Millisecond, 24*time.Hour), "the default"), DefaultRotateGrace,
				"How long a file that no longer matches the glob stays open for a writer that still has it.",
				func(c *Config) *time.Duration { return &c.RotateGrace }),
		},
		Open: func(_ context.Context, p component.SourceParams[Config]) (source.Source, error) {
			return New(options(p))
		},
		Origin: &component.OriginMode[Config]{Open: openOwnRaw},
	}
}

func options(p component.SourceParams[Config]) Options {
	c := p.Config
	return Options{
		Name: p.Name, Glob: c.Glob, PollInterval: c.PollInterval, MaxBatchRecords: c.MaxBatchRecords,
		MaxLineBytes: c.MaxLineBytes, RotateGrace: c.RotateGrace,
		Prefetch: p.Flow.Prefetch, Estimator: p.Flow.Estimator,
		Logger:   p.Logger,
		OnCommit: func(string, int64) { p.OnCommit() },
	}
}

// openOwnRaw opens the origin (its index in p.Dir) and the source that
// appends to it.
func openOwnRaw(ctx context.Context, p component.OriginParams[Config]) (component.OwnRaw, error) {
	opts := options(p.SourceParams)
	origin, err := OpenOriginRaw(ctx, OriginOptions{FS: p.FS, Dir: p.Dir, Source: opts, Logger: p.Logger})
	if err != nil {
		return component.OwnRaw{}, fmt.Errorf("open its origin raw (own_raw): %w", err)
	}
	opts.Origin, opts.OnDurable, opts.Admit = origin, p.OnDurable, p.Admit
	src, err := New(opts)
	if err != nil {
		return component.OwnRaw{}, errors.Join(err, origin.Close())
	}
	return component.OwnRaw{Source: src, Reader: origin, Close: origin.Close}, nil
}
