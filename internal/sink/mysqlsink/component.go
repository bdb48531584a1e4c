package mysqlsink

import (
	"context"
	"time"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/sink"
)

// Kind is the MySQL/MariaDB sink's kind name: type = "mysql".
const Kind = "mysql"

// DefaultTable is the table written when none is configured.
const DefaultTable = "weir_records"

// Config is the MySQL sink's table: [sink.mysql], [secondary.mysql].
type Config struct {
	DSN          string        // dsn
	Table        string        // table
	PayloadType  string        // payload_type: blob|json
	BatchRecords int           // batch_records
	Timeout      time.Duration // timeout
	// MetadataColumns: metadata_columns.
	MetadataColumns bool
}

// Component is the MySQL sink's registration (internal/components lists
// it).
func Component() component.SinkDef {
	return component.Sink[Config]{
		Name:    Kind,
		Summary: "rows in a MySQL or MariaDB table, idempotent on weir_record_id (INSERT IGNORE)",
		Caps:    component.SinkCaps{Durable: true, Idempotent: true},
		Fields: []component.Field{
			component.Key("dsn", setting.Secret(`a go-sql-driver DSN, user:password@tcp(host:port)/database; required when sink.type is "mysql"`), "",
				"MySQL or MariaDB connection string. Holds the password if any; never logged.",
				func(c *Config) *string { return &c.DSN }, component.Required()),
			component.Key("table", setting.Ident(), DefaultTable, "Table (or database.table) the MySQL sink writes to; created when missing.",
				func(c *Config) *string { return &c.Table }),
			component.Key("payload_type", setting.Enum(PayloadBlob, PayloadJSON), PayloadBlob, "Column type of payload (LONGBLOB or JSON); with json a record that is not valid JSON is dead-lettered.",
				func(c *Config) *string { return &c.PayloadType }),
			component.Key("batch_records", setting.Int(1, 65536), DefaultMaxBatchSize, "Most records the MySQL sink takes per commit (one INSERT unless max_allowed_packet forces a split).",
				func(c *Config) *int { return &c.BatchRecords }),
			component.Key("timeout", setting.Duration(time.Second, time.Hour), DefaultTimeout, "Time allowed for one commit (a timeout is retried).",
				func(c *Config) *time.Duration { return &c.Timeout }),
			component.Key("metadata_columns", setting.Bool(), false, "Also write each record's key, headers and event time, into weir_key (LONGBLOB), weir_headers (JSON) and weir_event_time (DATETIME(6)); missing columns are added to an existing table.",
				func(c *Config) *bool { return &c.MetadataColumns }),
		},
		Open: func(ctx context.Context, p component.SinkParams[Config]) (sink.Sink, error) {
			c := p.Config
			return New(ctx, Options{DSN: c.DSN, Table: c.Table, PayloadType: c.PayloadType,
				MaxBatchSize: c.BatchRecords, Timeout: c.Timeout, MetadataColumns: c.MetadataColumns, Logger: p.Logger})
		},
		MaxBatch: func(c *Config) int { return c.BatchRecords },
		Probe: func(ctx context.Context, c *Config) error {
			return Probe(ctx, Options{DSN: c.DSN, Timeout: c.Timeout})
		},
	}
}
