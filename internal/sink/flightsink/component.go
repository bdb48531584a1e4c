package flightsink

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/sink"
)

// Kind is the Flight sink's kind name: type = "flight".
const Kind = "flight"

// Defaults of the Flight sink's keys.
const (
	DefaultMaxBatchSize    = 4096
	DefaultMaxMessageBytes = 4 << 20 // gRPC's default receive limit
	DefaultCommitTimeout   = 30 * time.Second
	DefaultCompression     = CompressionNone
	DefaultColumns         = ColumnsGeneric
)

// The column layouts (the columns key).
const (
	// ColumnsGeneric sends every record in GenericSchema.
	ColumnsGeneric = "generic"
	// ColumnsArrow sends the rows of an Arrow source (the Flight and
	// Arrow IPC sources) in typed columns of their own schema, after the
	// id column; other records in GenericSchema.
	ColumnsArrow = "arrow"
	// ColumnsJSONSchema sends every record in typed columns derived from
	// a JSON Schema (json_schema_file; ArrowFromJSONSchema), after the id
	// column.
	ColumnsJSONSchema = "json_schema"
)

// The compression codecs of the IPC bodies.
const (
	CompressionNone = "none"
	CompressionLZ4  = "lz4"
	CompressionZstd = "zstd"
)

// Config is the Flight sink's table: [secondary.flight], [sink.flight].
type Config struct {
	Endpoint        string        // endpoint
	Path            []string      // path
	BatchRecords    int           // batch_records
	MaxMessageBytes int           // max_message_bytes
	CommitTimeout   time.Duration // commit_timeout
	Compression     string        // compression
	Columns         string        // columns
	JSONSchemaFile  string        // json_schema_file
	TokenFile       string        // token_file
	TokenEnv        string        // token_env
	TLSCAFile       string        // tls_ca_file
	TLSCertFile     string        // tls_cert_file
	TLSKeyFile      string        // tls_key_file
	TLSServerName   string        // tls_server_name
}

// Component is the Flight sink's registration (internal/components lists
// it). It has no raw mode: what a Flight server keeps cannot be read back
// by weir's positions, so it cannot be primary raw. It is durable in the
// server's sense (Commit returns on the server's PutResult), not
// idempotent by itself (a replay is sent again; a server that
// deduplicates on weir_record_id absorbs it), and has no non-durable mode.
func Component() component.SinkDef {
	return component.Sink[Config]{
		Name:    Kind,
		Summary: "Arrow record batches sent with DoPut to a Flight server; durable on the server's PutResult, replays carry the same weir_record_id",
		Caps:    component.SinkCaps{Durable: true},
		Fields: []component.Field{
			component.Key("endpoint", setting.Text("grpc://host:port or grpc+tls://host:port", checkEndpoint), "",
				"Flight server the sink sends to: grpc:// in clear text, grpc+tls:// over TLS (verified against tls_ca_file, or the system's CAs).",
				func(c *Config) *string { return &c.Endpoint }, component.Required()),
			component.Key("path", setting.List("path elements of the DoPut descriptor", checkPathElem), nil,
				"Path of the flight descriptor every DoPut names (a table, a stream on the server).",
				func(c *Config) *[]string { return &c.Path }, component.Shown("[<the sink's name>]")),
			component.Key("batch_records", setting.Int(1, 65536), DefaultMaxBatchSize, "Most records the Flight sink takes per commit.",
				func(c *Config) *int { return &c.BatchRecords }),
			component.Key("max_message_bytes", setting.IntSize(256<<10, 256<<20), DefaultMaxMessageBytes,
				"Largest Arrow message sent: a commit is sent as as many record batches as keep each under it, and a record that cannot fit is dead-lettered as oversize. Keep it at or below the server's gRPC receive limit (4 MiB unless the server raised it).",
				func(c *Config) *int { return &c.MaxMessageBytes }),
			component.Key("commit_timeout", setting.Duration(time.Second, time.Hour), DefaultCommitTimeout,
				"Bound of one commit, from the DoPut's start to the last PutResult: a batch not acknowledged by then fails the commit, which is retried.",
				func(c *Config) *time.Duration { return &c.CommitTimeout }),
			component.Key("compression", setting.Enum(CompressionNone, CompressionLZ4, CompressionZstd), DefaultCompression,
				"Codec of the IPC message bodies; the server must read it.",
				func(c *Config) *string { return &c.Compression }),
			component.Key("columns", setting.Enum(ColumnsGeneric, ColumnsArrow, ColumnsJSONSchema), DefaultColumns,
				"generic: every record in weir's generic schema (id, event time, key, headers, payload bytes, source, durability, received_at). arrow: the rows of an Arrow source (flight, arrow_ipc) in typed columns of the stream's own Arrow schema, after weir_record_id — one DoPut per schema — and other records generic; the schemas seen are kept under <data_dir>/flight-schemas/<name>. json_schema: every record's JSON payload in typed columns derived from json_schema_file, after weir_record_id; a payload that does not fit is dead-lettered (decode).",
				func(c *Config) *string { return &c.Columns }),
			component.Key("json_schema_file", setting.OptionalPath("with columns = \"json_schema\": a JSON Schema file"), "",
				"JSON Schema whose top-level properties become the typed columns (docs/sinks/flight.md has the mapping) — typically the schema_file of the stream's [[contract]], so that what passed the contract fits.",
				func(c *Config) *string { return &c.JSONSchemaFile }),
			component.Key("token_file", setting.OptionalPath("a file whose first line is a bearer token"), "",
				"File holding the bearer token sent as `authorization: Bearer <token>` on every call; re-read when it changes.",
				func(c *Config) *string { return &c.TokenFile }),
			component.Key("token_env", setting.Text("an environment variable's name", checkEnvName), "",
				"Environment variable holding the bearer token (instead of token_file).",
				func(c *Config) *string { return &c.TokenEnv }),
			component.Key("tls_ca_file", setting.OptionalPath("with grpc+tls://"), "",
				"PEM bundle of the CAs the server's certificate must chain to; empty: the system's CAs.",
				func(c *Config) *string { return &c.TLSCAFile }),
			component.Key("tls_cert_file", setting.OptionalPath("with grpc+tls:// and tls_key_file"), "",
				"PEM client certificate chain, leaf first, presented to a server that asks for one (mutual TLS).",
				func(c *Config) *string { return &c.TLSCertFile }),
			component.Key("tls_key_file", setting.OptionalPath("with tls_cert_file"), "",
				"PEM private key of tls_cert_file's leaf.",
				func(c *Config) *string { return &c.TLSKeyFile }),
			component.Key("tls_server_name", setting.Text("a host name", nil), "",
				"Name the server's certificate must carry; empty: the endpoint's host.",
				func(c *Config) *string { return &c.TLSServerName }),
		},
		Open: func(ctx context.Context, p component.SinkParams[Config]) (sink.Sink, error) {
			o := options(p.Config, p.Name, p)
			o.Columns, o.FS = p.Config.Columns, p.FS
			if o.Columns == ColumnsArrow && p.DataDir != "" {
				o.SchemaDir = filepath.Join(p.DataDir, "flight-schemas", p.Name)
			}
			if o.Columns == ColumnsJSONSchema {
				typed, err := readJSONSchema(p.Config.JSONSchemaFile)
				if err != nil {
					return nil, err
				}
				o.Typed = typed
			}
			return New(ctx, o)
		},
		MaxBatch: func(c *Config) int { return c.BatchRecords },
		Check:    check,
		Probe: func(ctx context.Context, c *Config) error {
			return Probe(ctx, options(c, "probe", component.SinkParams[Config]{}))
		},
	}
}

func options(c *Config, name string, p component.SinkParams[Config]) Options {
	path := c.Path
	if len(path) == 0 {
		path = []string{name}
	}
	return Options{Name: name, Endpoint: c.Endpoint, Path: path, MaxBatchSize: c.BatchRecords,
		MaxMessageBytes: c.MaxMessageBytes, CommitTimeout: c.CommitTimeout, Compression: c.Compression,
		TokenFile: c.TokenFile, TokenEnv: c.TokenEnv,
		TLS:    TLSFiles{CAFile: c.TLSCAFile, CertFile: c.TLSCertFile, KeyFile: c.TLSKeyFile, ServerName: c.TLSServerName},
		Logger: p.Logger, Metrics: p.Metrics}
}

// check holds the rules over several keys.
func check(c *Config) []component.Problem {
	var ps []component.Problem
	tlsOn := strings.HasPrefix(c.Endpoint, schemeTLS+"://")
	for _, k := range []struct{ key, v string }{{"tls_ca_file", c.TLSCAFile}, {"tls_cert_file", c.TLSCertFile}, {"tls_server_name", c.TLSServerName}} {
		if k.v != "" && !tlsOn {
			ps = append(ps, component.Problem{Key: k.key, Value: fmt.Sprintf("%q", k.v), Why: "needs a grpc+tls:// endpoint"})
		}
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		ps = append(ps, component.Problem{Key: "tls_key_file", Value: fmt.Sprintf("%q", c.TLSKeyFile), Why: "tls_cert_file and tls_key_file go together"})
	}
	switch {
	case c.Columns == ColumnsJSONSchema && c.JSONSchemaFile == "":
		ps = append(ps, component.Problem{Key: "json_schema_file", Value: `""`, Why: `is required with columns = "json_schema"`})
	case c.Columns != ColumnsJSONSchema && c.JSONSchemaFile != "":
		ps = append(ps, component.Problem{Key: "json_schema_file", Value: fmt.Sprintf("%q", c.JSONSchemaFile), Why: `needs columns = "json_schema"`})
	case c.JSONSchemaFile != "":
		if _, err := readJSONSchema(c.JSONSchemaFile); err != nil {
			ps = append(ps, component.Problem{Key: "json_schema_file", Value: fmt.Sprintf("%q", c.JSONSchemaFile), Why: err.Error()})
		}
	}
	if c.TokenFile != "" && c.TokenEnv != "" {
		ps = append(ps, component.Problem{Key: "token_env", Value: fmt.Sprintf("%q", c.TokenEnv), Why: "set token_file or token_env, not both"})
	}
	if (c.TokenFile != "" || c.TokenEnv != "") && !tlsOn && !loopbackEndpoint(c.Endpoint) {
		ps = append(ps, component.Problem{Key: "endpoint", Value: fmt.Sprintf("%q", c.Endpoint),
			Why: "must be grpc+tls:// when a bearer token is set and the host is not loopback: the token would cross the network in clear text"})
	}
	return ps
}

// The endpoint's schemes: Flight's location URIs.
const (
	schemePlain = "grpc"
	schemeTCP   = "grpc+tcp"
	schemeTLS   = "grpc+tls"
)

// parseEndpoint splits a grpc:// or grpc+tls:// endpoint into host:port
// and whether it uses TLS.
func parseEndpoint(s string) (addr string, useTLS bool, err error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", false, fmt.Errorf("endpoint %q: %w", s, err)
	}
	switch u.Scheme {
	case schemePlain, schemeTCP:
	case schemeTLS:
		useTLS = true
	default:
		return "", false, fmt.Errorf("endpoint %q: want grpc://host:port or grpc+tls://host:port", s)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" || port == "" || (u.Path != "" && u.Path != "/") {
		return "", false, fmt.Errorf("endpoint %q: want grpc://host:port or grpc+tls://host:port", s)
	}
	return u.Host, useTLS, nil
}

func checkEndpoint(s string) string {
	if s == "" {
		return "" // required when in use: reported as such
	}
	if _, _, err := parseEndpoint(s); err != nil {
		return "must be grpc://host:port or grpc+tls://host:port"
	}
	return ""
}

func loopbackEndpoint(s string) bool {
	addr, _, err := parseEndpoint(s)
	if err != nil {
		return false
	}
	host, _, _ := net.SplitHostPort(addr)
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// readJSONSchema reads a JSON Schema file and derives its typed columns.
func readJSONSchema(path string) (*arrow.Schema, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("json_schema_file: %w", err)
	}
	s, err := ArrowFromJSONSchema(doc)
	if err != nil {
		return nil, fmt.Errorf("json_schema_file %s: %w", path, err)
	}
	if err := arrowrec.CheckSchema(s); err != nil {
		return nil, fmt.Errorf("json_schema_file %s: %w", path, err)
	}
	if _, err := typedSchema(s); err != nil {
		return nil, fmt.Errorf("json_schema_file %s: %w", path, err)
	}
	return s, nil
}

func checkPathElem(s string) error {
	if s == "" {
		return fmt.Errorf("empty path element")
	}
	return nil
}

func checkEnvName(s string) string {
	if s == "" {
		return ""
	}
	for i, r := range s {
		if r != '_' && (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (i == 0 || r < '0' || r > '9') {
			return "must be an environment variable's name: letters, digits and '_', not starting with a digit"
		}
	}
	return ""
}
