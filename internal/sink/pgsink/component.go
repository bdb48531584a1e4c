package pgsink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/sink"
)

// Kind is the Postgres sink's kind name: type = "postgres".
const Kind = "postgres"

// DefaultTable is the table written when none is configured.
const DefaultTable = "weir_records"

// Config is the Postgres sink's table: [sink.postgres],
// [secondary.postgres].
type Config struct {
	DSN          string        // dsn
	Table        string        // table
	PayloadType  string        // payload_type: bytea|jsonb
	BatchRecords int           // batch_records
	CreateTable  bool          // create_table
	Timeout      time.Duration // timeout
	// MetadataColumns: metadata_columns.
	MetadataColumns bool
	InsertMethod    string // insert_method: copy|unnest
}

// Component is the Postgres sink's registration (internal/components lists
// it).
func Component() component.SinkDef {
	return component.Sink[Config]{
		Name:    Kind,
		Summary: "rows in a PostgreSQL table, idempotent on weir_record_id; as primary raw, with weir_position and the offset store in the same transaction",
		Caps:    component.SinkCaps{Durable: true, Idempotent: true, NonDurable: true},
		Fields: []component.Field{
			component.Key("dsn", setting.Secret(`a libpq URL or key=value string; required when sink.type is "postgres"`), "",
				"PostgreSQL connection string, such as postgres://weir@db:5432/ingest?sslmode=verify-full. Holds the password if any; never logged.",
				func(c *Config) *string { return &c.DSN }, component.Required()),
			component.Key("table", setting.Ident(), DefaultTable, "Table the Postgres sink writes to.",
				func(c *Config) *string { return &c.Table }),
			component.Key("payload_type", setting.Enum(PayloadBytea, PayloadJSONB), PayloadBytea, "Column type of payload; with jsonb a record that is not valid JSON is dead-lettered.",
				func(c *Config) *string { return &c.PayloadType }),
			component.Key("batch_records", setting.Int(1, 65536), DefaultMaxBatchSize, "Most records the Postgres sink takes per transaction.",
				func(c *Config) *int { return &c.BatchRecords }),
			component.Key("create_table", setting.Bool(), true, "Create the table when it does not exist; an existing table is always checked.",
				func(c *Config) *bool { return &c.CreateTable }),
			component.Key("timeout", setting.Duration(time.Second, time.Hour), DefaultTimeout, "Time allowed for one commit (a timeout is retried).",
				func(c *Config) *time.Duration { return &c.Timeout }),
			component.Key("metadata_columns", setting.Bool(), false, "Also write each record's key, headers and event time, into weir_key (bytea), weir_headers (jsonb) and weir_event_time (timestamptz); missing columns are added when create_table is on, else refused. A raw table always has them.",
				func(c *Config) *bool { return &c.MetadataColumns }),
			component.Key("insert_method", setting.Enum(InsertCopy, InsertUnnest), InsertCopy, "How a batch is sent: copy (one binary COPY straight into the table; a batch that meets rows already stored, a replay, goes again by unnest) or unnest (one INSERT … SELECT FROM unnest(…) ON CONFLICT DO NOTHING of array parameters, for a server or proxy that does not pass COPY through).",
				func(c *Config) *string { return &c.InsertMethod }),
		},
		Open: func(ctx context.Context, p component.SinkParams[Config]) (sink.Sink, error) {
			return New(ctx, options(p, false))
		},
		MaxBatch: func(c *Config) int { return c.BatchRecords },
		Probe: func(ctx context.Context, c *Config) error {
			return Probe(ctx, options(component.SinkParams[Config]{Config: c}, false))
		},
		Raw: &component.RawMode[Config]{
			Open: func(ctx context.Context, p component.SinkParams[Config]) (component.RawSink, error) {
				s, store, err := openRaw(ctx, p)
				if err != nil {
					return component.RawSink{}, err
				}
				return component.RawSink{Sink: s, Store: store}, nil
			},
			// A recovery-only node reads the table through a raw-mode
			// sink that only ever reads.
			Read: func(ctx context.Context, p component.SinkParams[Config]) (component.RawRead, error) {
				s, store, err := openRaw(ctx, p)
				if err != nil {
					return component.RawRead{}, err
				}
				return component.RawRead{Reader: s, Store: store, Close: s.Close}, nil
			},
			Check: func(c *Config) []component.Problem {
				if c.PayloadType != PayloadBytea {
					return []component.Problem{{Key: "payload_type", Value: setting.Quote(c.PayloadType),
						Why: `must be "bytea" when the [sink] is primary raw: raw gives every payload back byte for byte, which jsonb does not`}}
				}
				return nil
			},
			Where: func(c *Config) string { return "postgres table " + c.Table },
			// The cursors of a node without secondaries live in the
			// same rows of the offsets table as with them.
			Store: func(ctx context.Context, p component.SinkParams[Config]) (*engine.OffsetStore, error) {
				return OpenCursorStore(ctx, options(p, true))
			},
		},
	}
}

func options(p component.SinkParams[Config], positions bool) Options {
	c := p.Config
	return Options{DSN: c.DSN, Table: c.Table, PayloadType: c.PayloadType, CreateTable: c.CreateTable,
		MaxBatchSize: c.BatchRecords, Timeout: c.Timeout, Positions: positions, MetadataColumns: c.MetadataColumns,
		InsertMethod: c.InsertMethod, AsyncCommit: p.NonDurable, Logger: p.Logger}
}

// openRaw opens the table in raw mode with the offset store beside it.
func openRaw(ctx context.Context, p component.SinkParams[Config]) (*Sink, *engine.OffsetStore, error) {
	s, err := New(ctx, options(p, true))
	if err != nil {
		return nil, nil, err
	}
	store, err := s.OffsetStore(ctx)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("open offset store: %w", err), s.Close())
	}
	return s, store, nil
}
