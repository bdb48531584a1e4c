package coord

import (
	"context"
	"log/slog"
	"slices"
	"strings"

	"go.uber.org/zap/zapcore"
)

// slogCore sends etcd's zap entries at or above min to a slog.Logger, so
// the embedded server and the client log through weir's logger.
type slogCore struct {
	log    *slog.Logger
	min    zapcore.Level
	fields []zapcore.Field
}

func newSlogCore(log *slog.Logger, min zapcore.Level) zapcore.Core {
	return slogCore{log: log.With("source", "etcd"), min: min}
}

func (c slogCore) Enabled(l zapcore.Level) bool { return l >= c.min }

func (c slogCore) With(fs []zapcore.Field) zapcore.Core {
	c.fields = append(slices.Clip(c.fields), fs...)
	return c
}

// routine are etcd messages logged at warn or error on every start or
// stop that say nothing about weir's use of it (it serves gRPC and HTTP on
// one port, auth is off, the listeners close on shutdown).
var routine = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
	"setting up serving from embedded etcd failed.":                                        true,
	"stopping insecure grpc server due to error":                                           true,
	"stopped insecure grpc server due to error":                                            true,
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) && !routine[e.Message] {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	slices.SortFunc(attrs, func(a, b slog.Attr) int { return strings.Compare(a.Key, b.Key) })
	c.log.LogAttrs(context.Background(), slogLevel(e.Level), e.Message, attrs...)
	return nil
}

func (c slogCore) Sync() error { return nil }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l >= zapcore.WarnLevel:
		return slog.LevelWarn
	case l >= zapcore.InfoLevel:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
