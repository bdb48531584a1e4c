package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/sink/parquetsink"
	"github.com/weir-io/weir/internal/tlsconf"
	"github.com/weir-io/weir/wab"
	"github.com/weir-io/weir/wire"
)

// Defaults. Where the write-ahead buffer or the wire codec already own a
// default, the knob falls back to theirs so the two cannot drift apart.
const (
	DefaultDataDir          = "./data"
	DefaultSocketName       = "weir.sock" // under data_dir
	DefaultWABName          = "wab"       // under data_dir
	DefaultFileSinkName     = "out"       // under data_dir
	DefaultShards           = 4
	DefaultMaxConnections   = 1024
	DefaultMaxFrameBytes    = wire.DefaultMaxFrameBytes
	DefaultFrameReadTimeout = 10 * time.Second
	DefaultIdleTimeout      = 5 * time.Minute
	DefaultWriteTimeout     = 10 * time.Second
	DefaultConnMaxInflight  = 4096
	DefaultQueueCapacity    = wab.DefaultQueueCapacity
	DefaultQueueTimeout     = time.Second
	DefaultShutdownTimeout  = 30 * time.Second
	DefaultBatchMaxRecords  = wab.DefaultBatchMaxRecords
	DefaultBatchDeadline    = wab.DefaultBatchDeadline
	DefaultSegmentMaxBytes  = wab.DefaultSegmentMaxBytes
	DefaultSegmentMaxAge    = wab.DefaultSegmentMaxAge
	DefaultPreallocateBytes = wab.DefaultPreallocateBytes
	DefaultDrainRetryBase   = drain.DefaultRetryBase
	DefaultDrainRetryMax    = drain.DefaultRetryMax
	DefaultDrainMaxRetries  = drain.DefaultMaxRetries
	DefaultDeadLetterMax    = drain.DefaultDeadLetterMaxBytes
	DefaultDeadLetterCheck  = drain.DefaultDeadLetterCheckInterval
	DefaultHealthInterval   = drain.DefaultHealthInterval
	DefaultSinkType         = "file"
	DefaultFileMaxBytes     = filesink.DefaultMaxBytes
	DefaultFileMaxAge       = filesink.DefaultMaxAge
	DefaultFileBatchRecords = filesink.DefaultMaxBatchSize
	DefaultParquetSinkName  = "parquet" // under data_dir
	DefaultParquetMaxBytes  = parquetsink.DefaultMaxBytes
	DefaultParquetMaxAge    = parquetsink.DefaultMaxAge
	DefaultParquetBatch     = parquetsink.DefaultMaxBatchSize
	DefaultParquetMaxRecord = parquetsink.DefaultMaxPayloadBytes
	DefaultParquetLevel     = parquetsink.DefaultCompression
	DefaultPGTable          = "weir_records"
	DefaultPGPayloadType    = "bytea"
	DefaultPGBatchRecords   = 4096
	DefaultPGTimeout        = 30 * time.Second
	DefaultMySQLTable       = "weir_records"
	DefaultMySQLPayloadType = "blob"
	DefaultMySQLBatch       = 4096
	DefaultMySQLTimeout     = 30 * time.Second
	DefaultMetricsBind      = "127.0.0.1"
	DefaultMetricsPort      = 9185
	DefaultLiveStallTimeout = time.Minute
	DefaultLogLevel         = "info"
	DefaultLogFormat        = "text"
	DefaultTLSReload        = 30 * time.Second
	DefaultRole             = "both"
	DefaultGate             = "buffer"
	DefaultRecoveryMode     = "rehydrate"
	DefaultWindowRecords    = engine.DefaultWindowRecords
	DefaultWindowTime       = engine.DefaultWindowTime
	DefaultCoverageFlush    = engine.DefaultFlushInterval
	DefaultQueueBatches     = engine.DefaultQueueBatches
	DefaultQuarantineBuffer = engine.DefaultQuarantineBuffer

	// MaxSocketPathBytes is the longest Unix socket path the kernel accepts:
	// sun_path holds 108 bytes including the terminating NUL.
	MaxSocketPathBytes = 107
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// kind is how a knob's value is written.
type kind string

const (
	kindString   kind = "string"
	kindPath     kind = "path"
	kindInt      kind = "integer"
	kindSize     kind = "size"
	kindDuration kind = "duration"
	kindAddress  kind = "address"
	kindList     kind = "list"
	kindBool     kind = "boolean"
)

// knob is one configuration setting. The table returned by knobs is the only
// place a setting is declared: the flag set, the environment reader, the TOML
// reader, defaults, validation, Usage and the reference table in
// docs/configuration.md are all generated from it.
type knob struct {
	Key     string // TOML key, dotted for nested tables
	Kind    kind
	Default string // as shown to people
	Range   string // as shown to people
	Help    string

	// parse reads the text form (flag, environment, TOML string) into p.
	parse func(p *partial, s string) error
	// parseTOML reads a TOML value (string, int64, ...) into p.
	parseTOML func(p *partial, v any) error
	// merge copies the value from src into dst if src has one.
	merge func(dst, src *partial)
	// isSet reports whether p holds a value.
	isSet func(p *partial) bool
	// apply stores p's value, or the default, in c.
	apply func(c *Config, p *partial)
	// check validates the final value in c; "" means valid.
	check func(c *Config) string
	// value renders the final value in c for messages.
	value func(c *Config) string
}

// Flag is the knob's command-line flag, without dashes.
func (k *knob) Flag() string {
	return strings.NewReplacer(".", "-", "_", "-").Replace(k.Key)
}

// Env is the knob's environment variable.
func (k *knob) Env() string {
	return "WEIR_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(k.Key))
}

// spec describes a knob of Go type T; newKnob turns it into the closures.
type spec[T any] struct {
	key, help  string
	kind       kind
	def        T
	defText    string // overrides the rendered default when non-empty
	rangeText  string
	field      func(*partial) **T
	out        func(*Config) *T
	parse      func(string) (T, error)
	fromTOML   func(any) (T, error)
	check      func(T) string
	format     func(T) string
	skipDefApp bool // default is derived later (paths under data_dir)
}

func newKnob[T any](s spec[T]) knob {
	k := knob{Key: s.key, Kind: s.kind, Help: s.help, Range: s.rangeText}
	k.Default = s.defText
	if k.Default == "" {
		k.Default = s.format(s.def)
	}
	set := func(p *partial, v T) { *s.field(p) = &v }
	k.parse = func(p *partial, text string) error {
		v, err := s.parse(text)
		if err != nil {
			return err
		}
		set(p, v)
		return nil
	}
	k.parseTOML = func(p *partial, raw any) error {
		v, err := s.fromTOML(raw)
		if err != nil {
			return err
		}
		set(p, v)
		return nil
	}
	k.merge = func(dst, src *partial) {
		if v := *s.field(src); v != nil {
			*s.field(dst) = v
		}
	}
	k.isSet = func(p *partial) bool { return *s.field(p) != nil }
	k.apply = func(c *Config, p *partial) {
		if v := *s.field(p); v != nil {
			*s.out(c) = *v
		} else if !s.skipDefApp {
			*s.out(c) = s.def
		}
	}
	k.check = func(c *Config) string {
		if s.check == nil {
			return ""
		}
		return s.check(*s.out(c))
	}
	k.value = func(c *Config) string { return s.format(*s.out(c)) }
	return k
}

func intKnob(key string, def, lo, hi int, help string, field func(*partial) **int, out func(*Config) *int) knob {
	return newKnob(spec[int]{
		key: key, help: help, kind: kindInt, def: def,
		rangeText: fmt.Sprintf("%s – %s", formatCount(int64(lo)), formatCount(int64(hi))),
		field:     field, out: out,
		parse: func(s string) (int, error) {
			n, err := parseInt(s)
			return int(n), err
		},
		fromTOML: func(v any) (int, error) {
			switch v := v.(type) {
			case int64:
				return int(v), nil
			case string:
				n, err := parseInt(v)
				return int(n), err
			}
			return 0, fmt.Errorf("want an integer, got %s", tomlType(v))
		},
		check:  func(v int) string { return between(int64(v), int64(lo), int64(hi), formatCount) },
		format: func(v int) string { return formatCount(int64(v)) },
	})
}

func sizeKnob(key string, def, lo, hi int64, help string, field func(*partial) **int64, out func(*Config) *int64) knob {
	return newKnob(spec[int64]{
		key: key, help: help, kind: kindSize, def: def,
		rangeText: fmt.Sprintf("%s – %s", FormatSize(lo), FormatSize(hi)),
		field:     field, out: out,
		parse: ParseSize,
		fromTOML: func(v any) (int64, error) {
			switch v := v.(type) {
			case int64:
				return v, nil
			case string:
				return ParseSize(v)
			}
			return 0, fmt.Errorf("want a size (integer bytes or a string like \"64MiB\"), got %s", tomlType(v))
		},
		check:  func(v int64) string { return between(v, lo, hi, FormatSize) },
		format: FormatSize,
	})
}

// intSizeKnob is a size held in an int field.
func intSizeKnob(key string, def, lo, hi int64, help string, field func(*partial) **int, out func(*Config) *int) knob {
	return newKnob(spec[int]{
		key: key, help: help, kind: kindSize, def: int(def),
		rangeText: fmt.Sprintf("%s – %s", FormatSize(lo), FormatSize(hi)),
		field:     field, out: out,
		parse: func(s string) (int, error) {
			n, err := ParseSize(s)
			return int(n), err
		},
		fromTOML: func(v any) (int, error) {
			switch v := v.(type) {
			case int64:
				return int(v), nil
			case string:
				n, err := ParseSize(v)
				return int(n), err
			}
			return 0, fmt.Errorf("want a size (integer bytes or a string like \"64MiB\"), got %s", tomlType(v))
		},
		check:  func(v int) string { return between(int64(v), lo, hi, FormatSize) },
		format: func(v int) string { return FormatSize(int64(v)) },
	})
}

func durationKnob(key string, def, lo, hi time.Duration, help string, field func(*partial) **time.Duration, out func(*Config) *time.Duration) knob {
	return newKnob(spec[time.Duration]{
		key: key, help: help, kind: kindDuration, def: def,
		rangeText: fmt.Sprintf("%s – %s", formatDuration(lo), formatDuration(hi)),
		field:     field, out: out,
		parse: parseDuration,
		fromTOML: func(v any) (time.Duration, error) {
			switch v := v.(type) {
			case string:
				return parseDuration(v)
			case int64:
				if v == 0 {
					return 0, nil
				}
				return 0, fmt.Errorf("want a duration string such as \"%s\", got the integer %d", formatDuration(def+time.Second), v)
			}
			return 0, fmt.Errorf("want a duration string such as \"5s\", got %s", tomlType(v))
		},
		check: func(v time.Duration) string {
			if v < lo || v > hi {
				return fmt.Sprintf("must be between %s and %s", formatDuration(lo), formatDuration(hi))
			}
			return ""
		},
		format: formatDuration,
	})
}

func enumKnob(key, def string, values []string, help string, field func(*partial) **string, out func(*Config) *string) knob {
	return newKnob(spec[string]{
		key: key, help: help, kind: kindString, def: def,
		rangeText: "one of " + strings.Join(quoteAll(values), ", "),
		field:     field, out: out,
		parse:    func(s string) (string, error) { return s, nil },
		fromTOML: tomlString,
		check: func(v string) string {
			for _, ok := range values {
				if v == ok {
					return ""
				}
			}
			return "must be one of " + strings.Join(quoteAll(values), ", ")
		},
		format: func(v string) string { return fmt.Sprintf("%q", v) },
	})
}

// hostKnob is a listen address: an IP address or a host name, without a
// port.
func hostKnob(key, def, help string, field func(*partial) **string, out func(*Config) *string) knob {
	return newKnob(spec[string]{
		key: key, help: help, kind: kindString, def: def,
		rangeText: "an IP address or a host name, without a port",
		field:     field, out: out,
		parse:    func(s string) (string, error) { return s, nil },
		fromTOML: tomlString,
		check:    checkHost,
		format:   func(v string) string { return fmt.Sprintf("%q", v) },
	})
}

// checkHost accepts an IP address or a host name made of letters, digits,
// dots, dashes and underscores.
func checkHost(v string) string {
	const msg = "must be an IP address or a host name, without a port"
	if v == "" || len(v) > 253 {
		return msg
	}
	if net.ParseIP(v) != nil {
		return ""
	}
	for _, r := range v {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
		default:
			return msg
		}
	}
	return ""
}

// pathKnob is a path; defText documents a default derived from data_dir
// (applied by derivePaths), or def is the default itself.
func pathKnob(key, def, defText, help string, field func(*partial) **string, out func(*Config) *string) knob {
	rangeText := "absolute or relative to the working directory; no NUL, no `..`"
	if key == "socket_path" {
		rangeText = fmt.Sprintf("%s; at most %d bytes once absolute", rangeText, MaxSocketPathBytes)
	}
	return newKnob(spec[string]{
		key: key, help: help, kind: kindPath, def: def, defText: defText,
		rangeText: rangeText,
		field:     field, out: out,
		parse: func(s string) (string, error) {
			if s == "" {
				return "", errors.New("empty path")
			}
			return s, nil
		},
		fromTOML: func(v any) (string, error) {
			s, err := tomlString(v)
			if err == nil && s == "" {
				err = errors.New("empty path")
			}
			return s, err
		},
		format:     func(v string) string { return fmt.Sprintf("%q", v) },
		skipDefApp: def == "",
	})
}

// optPathKnob is a path with no default: empty means not set.
func optPathKnob(key, rangeText, help string, field func(*partial) **string, out func(*Config) *string) knob {
	return newKnob(spec[string]{
		key: key, help: help, kind: kindPath, def: "",
		rangeText: rangeText + "; absolute or relative to the working directory; no NUL, no `..`",
		field:     field, out: out,
		parse:    func(s string) (string, error) { return s, nil },
		fromTOML: tomlString,
		format:   func(v string) string { return fmt.Sprintf("%q", v) },
	})
}

// addressKnob is a TCP host:port to listen on; empty turns it off.
func addressKnob(key, help string, field func(*partial) **string, out func(*Config) *string) knob {
	return newKnob(spec[string]{
		key: key, help: help, kind: kindAddress, def: "",
		rangeText: "empty (off) or host:port; the host may be an IP address, a name, or empty for every interface; port 0 – 65535",
		field:     field, out: out,
		parse:    func(s string) (string, error) { return strings.TrimSpace(s), nil },
		fromTOML: tomlString,
		check: func(v string) string {
			if v == "" {
				return ""
			}
			_, port, err := net.SplitHostPort(v)
			if err != nil {
				return "must be host:port, such as \"127.0.0.1:9443\" or \":9443\" (IPv6 hosts in brackets: \"[::1]:9443\")"
			}
			if n, err := strconv.ParseUint(port, 10, 16); err != nil || port == "" || n > 65535 {
				return fmt.Sprintf("port %q must be a number from 0 to 65535", port)
			}
			return ""
		},
		format: func(v string) string { return fmt.Sprintf("%q", v) },
	})
}

// listKnob is a list of strings: comma-separated in flags and environment
// variables, an array of strings (or one comma-separated string) in TOML.
// An empty list is nil. check validates one entry.
func listKnob(key, rangeText, help string, check func(string) error, field func(*partial) **[]string, out func(*Config) *[]string) knob {
	return newKnob(spec[[]string]{
		key: key, help: help, kind: kindList, def: nil,
		rangeText: rangeText + "; comma-separated in a flag or variable, an array of strings in TOML",
		field:     field, out: out,
		parse: func(s string) ([]string, error) { return splitList(s), nil },
		fromTOML: func(v any) ([]string, error) {
			switch v := v.(type) {
			case string:
				return splitList(v), nil
			case []any:
				var out []string
				for i, e := range v {
					s, ok := e.(string)
					if !ok {
						return nil, fmt.Errorf("want an array of strings, element %d is %s", i+1, tomlType(e))
					}
					if s = strings.TrimSpace(s); s != "" {
						out = append(out, s)
					}
				}
				return out, nil
			}
			return nil, fmt.Errorf("want an array of strings, got %s", tomlType(v))
		},
		check: func(vs []string) string {
			var why []string
			for _, v := range vs {
				if err := check(v); err != nil {
					why = append(why, err.Error())
				}
			}
			return strings.Join(why, "; ")
		},
		format: func(vs []string) string {
			return "[" + strings.Join(quoteAll(vs), ", ") + "]"
		},
	})
}

// boolKnob is true or false; TOML takes a boolean (or the string form).
func boolKnob(key string, def bool, help string, field func(*partial) **bool, out func(*Config) *bool) knob {
	parse := func(s string) (bool, error) {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "true", "1", "yes", "on":
			return true, nil
		case "false", "0", "no", "off":
			return false, nil
		}
		return false, fmt.Errorf("want true or false, got %q", s)
	}
	return newKnob(spec[bool]{
		key: key, help: help, kind: kindBool, def: def,
		rangeText: "true or false",
		field:     field, out: out,
		parse: parse,
		fromTOML: func(v any) (bool, error) {
			switch v := v.(type) {
			case bool:
				return v, nil
			case string:
				return parse(v)
			}
			return false, fmt.Errorf("want a boolean, got %s", tomlType(v))
		},
		format: strconv.FormatBool,
	})
}

// dsnKnob is a database connection string. It is never echoed back in
// messages: it may hold a password.
func dsnKnob(key, rangeText, help string, field func(*partial) **string, out func(*Config) *string) knob {
	return newKnob(spec[string]{
		key: key, help: help, kind: kindString, def: "",
		rangeText: rangeText,
		field:     field, out: out,
		parse:    func(s string) (string, error) { return s, nil },
		fromTOML: tomlString,
		format: func(v string) string {
			if v == "" {
				return `""`
			}
			return "(set, not shown)"
		},
	})
}

// identKnob is a table name: "name" or "schema.name", used verbatim.
func identKnob(key, def, help string, field func(*partial) **string, out func(*Config) *string) knob {
	return newKnob(spec[string]{
		key: key, help: help, kind: kindString, def: def,
		rangeText: "a table name or schema.table, used verbatim (case-sensitive), at most 63 bytes per part",
		field:     field, out: out,
		parse:    func(s string) (string, error) { return s, nil },
		fromTOML: tomlString,
		check: func(v string) string {
			parts := strings.Split(v, ".")
			if v == "" || len(parts) > 2 {
				return "must be a table name or schema.table"
			}
			for _, p := range parts {
				if p == "" || len(p) > 63 || strings.ContainsRune(p, 0) {
					return "each part must be 1 to 63 bytes, without NUL"
				}
			}
			return ""
		},
		format: func(v string) string { return fmt.Sprintf("%q", v) },
	})
}

// splitList splits a comma-separated list, trimming space and dropping
// empty entries.
func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// knobs is the table of every setting, in documentation order.
func knobs() []knob {
	return []knob{
		pathKnob("data_dir", DefaultDataDir, "", "Directory for the daemon's state; the other paths default to places under it.",
			func(p *partial) **string { return &p.DataDir }, func(c *Config) *string { return &c.DataDir }),
		pathKnob("socket_path", "", "<data_dir>/"+DefaultSocketName, "Unix socket producers connect to.",
			func(p *partial) **string { return &p.SocketPath }, func(c *Config) *string { return &c.SocketPath }),
		pathKnob("wab_dir", "", "<data_dir>/"+DefaultWABName, "Directory of the write-ahead buffer's segment files.",
			func(p *partial) **string { return &p.WABDir }, func(c *Config) *string { return &c.WABDir }),

		intKnob("shards", DefaultShards, 1, 256, "Number of write-ahead buffer shards, each with its own segment files and flusher.",
			func(p *partial) **int { return &p.Shards }, func(c *Config) *int { return &c.Shards }),
		intKnob("max_connections", DefaultMaxConnections, 1, 65536, "Most producer connections open at once; further connections are refused.",
			func(p *partial) **int { return &p.MaxConnections }, func(c *Config) *int { return &c.MaxConnections }),
		intSizeKnob("max_frame_bytes", DefaultMaxFrameBytes, 64, 256*mib, "Largest frame body accepted from a producer; checked before any allocation.",
			func(p *partial) **int { return &p.MaxFrameBytes }, func(c *Config) *int { return &c.MaxFrameBytes }),
		durationKnob("frame_read_timeout", DefaultFrameReadTimeout, time.Millisecond, time.Hour, "Time allowed to read one frame once its first byte has arrived.",
			func(p *partial) **time.Duration { return &p.FrameReadTimeout }, func(c *Config) *time.Duration { return &c.FrameReadTimeout }),
		durationKnob("idle_timeout", DefaultIdleTimeout, time.Second, 24*time.Hour, "A connection with no frame for this long is closed.",
			func(p *partial) **time.Duration { return &p.IdleTimeout }, func(c *Config) *time.Duration { return &c.IdleTimeout }),
		durationKnob("write_timeout", DefaultWriteTimeout, time.Millisecond, time.Hour, "Time allowed to write a reply to a producer before the connection is dropped.",
			func(p *partial) **time.Duration { return &p.WriteTimeout }, func(c *Config) *time.Duration { return &c.WriteTimeout }),
		intKnob("conn_max_inflight", DefaultConnMaxInflight, 1, 1<<20, "Records one connection may have sent but not yet had acknowledged.",
			func(p *partial) **int { return &p.ConnMaxInflight }, func(c *Config) *int { return &c.ConnMaxInflight }),
		intKnob("queue_capacity", DefaultQueueCapacity, 1, 1<<24, "Records queued per shard between the connections and the shard's flusher.",
			func(p *partial) **int { return &p.QueueCapacity }, func(c *Config) *int { return &c.QueueCapacity }),
		durationKnob("queue_timeout", DefaultQueueTimeout, time.Millisecond, time.Minute, "How long a record waits for room in a full shard queue before the producer gets a busy reply.",
			func(p *partial) **time.Duration { return &p.QueueTimeout }, func(c *Config) *time.Duration { return &c.QueueTimeout }),
		durationKnob("shutdown_timeout", DefaultShutdownTimeout, 100*time.Millisecond, time.Hour, "Time a graceful shutdown waits for in-flight records before closing connections.",
			func(p *partial) **time.Duration { return &p.ShutdownTimeout }, func(c *Config) *time.Duration { return &c.ShutdownTimeout }),

		addressKnob("tcp_listen", "TCP address producers may also connect to, with mutual TLS only (there is no plaintext TCP); empty serves the Unix socket alone.",
			func(p *partial) **string { return &p.TCPListen }, func(c *Config) *string { return &c.TCPListen }),
		optPathKnob("tls_cert_file", "required when tcp_listen is set",
			"PEM certificate chain the daemon presents to TCP producers, leaf first.",
			func(p *partial) **string { return &p.TLSCertFile }, func(c *Config) *string { return &c.TLSCertFile }),
		optPathKnob("tls_key_file", "required when tcp_listen is set",
			"PEM private key of tls_cert_file; keep it mode 0600.",
			func(p *partial) **string { return &p.TLSKeyFile }, func(c *Config) *string { return &c.TLSKeyFile }),
		optPathKnob("tls_client_ca_file", "required when tcp_listen is set",
			"PEM bundle of the CAs a producer's client certificate must chain to.",
			func(p *partial) **string { return &p.TLSClientCAFile }, func(c *Config) *string { return &c.TLSClientCAFile }),
		listKnob("tls_allowed_identities", "each a DNS name, a URI with a scheme (spiffe://…) or an email address; no wildcards",
			"Client certificate SANs allowed to connect over TCP; empty allows every certificate the client CA signed.",
			func(s string) error { _, err := tlsconf.ParseIdentity(s); return err },
			func(p *partial) **[]string { return &p.TLSAllowedIdentities }, func(c *Config) *[]string { return &c.TLSAllowedIdentities }),
		durationKnob("tls_reload_interval", DefaultTLSReload, time.Second, 24*time.Hour, "How often the certificate, key and client CA files are checked for changes (SIGHUP checks at once).",
			func(p *partial) **time.Duration { return &p.TLSReloadInterval }, func(c *Config) *time.Duration { return &c.TLSReloadInterval }),

		intKnob("batch_max_records", DefaultBatchMaxRecords, 1, 1<<20, "Most records a flusher writes (and syncs) as one batch.",
			func(p *partial) **int { return &p.BatchMaxRecords }, func(c *Config) *int { return &c.BatchMaxRecords }),
		durationKnob("batch_deadline", DefaultBatchDeadline, 0, 10*time.Second, "How long a flusher waits to fill a batch; 0 writes whatever is queued at once.",
			func(p *partial) **time.Duration { return &p.BatchDeadline }, func(c *Config) *time.Duration { return &c.BatchDeadline }),
		sizeKnob("segment_max_bytes", DefaultSegmentMaxBytes, mib, 4*gib, "A segment is sealed once it reaches this size.",
			func(p *partial) **int64 { return &p.SegmentMaxBytes }, func(c *Config) *int64 { return &c.SegmentMaxBytes }),
		durationKnob("segment_max_age", DefaultSegmentMaxAge, time.Millisecond, 24*time.Hour, "A segment is sealed (and handed to the drain) once it is this old.",
			func(p *partial) **time.Duration { return &p.SegmentMaxAge }, func(c *Config) *time.Duration { return &c.SegmentMaxAge }),
		sizeKnob("segment_preallocate_bytes", DefaultPreallocateBytes, 0, 4*gib, "Disk space reserved for each new segment ahead of writes; 0 turns preallocation off. Never more than segment_max_bytes. On a disk with less free space, less is reserved (halved down to 1MiB, then just what each batch needs; logged once, weir_wab_preallocate_reduced): a push fails with DiskFull only when its own bytes cannot be reserved.",
			func(p *partial) **int64 { return &p.PreallocateBytes }, func(c *Config) *int64 { return &c.PreallocateBytes }),

		durationKnob("drain_retry_base", DefaultDrainRetryBase, time.Millisecond, time.Minute, "First back-off after a sink reports a transient error; doubles per attempt.",
			func(p *partial) **time.Duration { return &p.DrainRetryBase }, func(c *Config) *time.Duration { return &c.DrainRetryBase }),
		durationKnob("drain_retry_max", DefaultDrainRetryMax, time.Millisecond, time.Hour, "Cap on the drain's back-off between retries; at least drain_retry_base.",
			func(p *partial) **time.Duration { return &p.DrainRetryMax }, func(c *Config) *time.Duration { return &c.DrainRetryMax }),
		intKnob("drain_max_retries", DefaultDrainMaxRetries, 0, 1000, "Retries of a sub-batch after a transient sink error before the segment is set aside (left on disk, retried on a later pass).",
			func(p *partial) **int { return &p.DrainMaxRetries }, func(c *Config) *int { return &c.DrainMaxRetries }),
		sizeKnob("dead_letter_max_bytes", DefaultDeadLetterMax, 1<<20, 1<<40, "Cap on the dead-letter lane's size on disk; at the cap the drain blocks (state blocked_dead_letter_full) until an operator frees space.",
			func(p *partial) **int64 { return &p.DeadLetterMaxBytes }, func(c *Config) *int64 { return &c.DeadLetterMaxBytes }),
		durationKnob("dead_letter_check_interval", DefaultDeadLetterCheck, 10*time.Millisecond, time.Hour, "How often a drain blocked on a full dead-letter lane rescans it for space an operator freed.",
			func(p *partial) **time.Duration { return &p.DeadLetterCheckInterval }, func(c *Config) *time.Duration { return &c.DeadLetterCheckInterval }),
		durationKnob("sink_health_interval", DefaultHealthInterval, 100*time.Millisecond, time.Hour, "How often the sink's health is polled, also while idle or blocked (the weir_sink_health gauge).",
			func(p *partial) **time.Duration { return &p.SinkHealthInterval }, func(c *Config) *time.Duration { return &c.SinkHealthInterval }),

		enumKnob("sink.type", DefaultSinkType, []string{"file", "parquet", "postgres", "mysql"}, "Which sink the drain delivers to. With [[secondary]] sinks it is primary raw and must have a raw mode (file, parquet or postgres).",
			func(p *partial) **string { return &p.SinkType }, func(c *Config) *string { return &c.Sink.Type }),
		boolKnob("sink.durable", true, "The [sink] acknowledges only what is on stable storage. It is the pipeline's primary raw (its system of record), so false is refused.",
			func(p *partial) **bool { return &p.SinkDurable }, func(c *Config) *bool { return &c.Sink.Durable }),
		pathKnob("sink.file.dir", "", "<data_dir>/"+DefaultFileSinkName, "Directory the file sink writes its NDJSON files to.",
			func(p *partial) **string { return &p.FileDir }, func(c *Config) *string { return &c.Sink.File.Dir }),
		sizeKnob("sink.file.max_bytes", DefaultFileMaxBytes, 4*kib, 64*gib, "An output file is closed and a new one started once it reaches this size.",
			func(p *partial) **int64 { return &p.FileMaxBytes }, func(c *Config) *int64 { return &c.Sink.File.MaxBytes }),
		durationKnob("sink.file.max_age", DefaultFileMaxAge, 10*time.Millisecond, 24*time.Hour, "An output file is closed and a new one started once it is this old.",
			func(p *partial) **time.Duration { return &p.FileMaxAge }, func(c *Config) *time.Duration { return &c.Sink.File.MaxAge }),
		intKnob("sink.file.batch_records", DefaultFileBatchRecords, 1, 1<<20, "Most records the file sink takes per commit.",
			func(p *partial) **int { return &p.FileBatchRecords }, func(c *Config) *int { return &c.Sink.File.BatchRecords }),

		pathKnob("sink.parquet.dir", "", "<data_dir>/"+DefaultParquetSinkName, "Directory the Parquet sink writes its files (and their staging logs) to.",
			func(p *partial) **string { return &p.ParquetDir }, func(c *Config) *string { return &c.Sink.Parquet.Dir }),
		sizeKnob("sink.parquet.max_bytes", DefaultParquetMaxBytes, 64*kib, 16*gib, "A Parquet file is written once its staged records reach this size (before compression); the file is smaller.",
			func(p *partial) **int64 { return &p.ParquetMaxBytes }, func(c *Config) *int64 { return &c.Sink.Parquet.MaxBytes }),
		durationKnob("sink.parquet.max_age", DefaultParquetMaxAge, 10*time.Millisecond, 24*time.Hour, "A Parquet file is written once its first staged record is this old.",
			func(p *partial) **time.Duration { return &p.ParquetMaxAge }, func(c *Config) *time.Duration { return &c.Sink.Parquet.MaxAge }),
		intKnob("sink.parquet.batch_records", DefaultParquetBatch, 1, 1<<20, "Most records the Parquet sink takes per commit.",
			func(p *partial) **int { return &p.ParquetBatchRecords }, func(c *Config) *int { return &c.Sink.Parquet.BatchRecords }),
		sizeKnob("sink.parquet.max_payload_bytes", DefaultParquetMaxRecord, 1, 1*gib, "A record with a larger payload is dead-lettered by the Parquet sink.",
			func(p *partial) **int64 { return &p.ParquetMaxPayload }, func(c *Config) *int64 { return &c.Sink.Parquet.MaxPayloadBytes }),
		enumKnob("sink.parquet.compression", DefaultParquetLevel, parquetsink.CompressionLevels, "zstd level of the Parquet files: fastest, default (about zstd 3), better (about 7) or best.",
			func(p *partial) **string { return &p.ParquetCompression }, func(c *Config) *string { return &c.Sink.Parquet.Compression }),

		dsnKnob("sink.postgres.dsn", "a libpq URL or key=value string; required when sink.type is \"postgres\"",
			"PostgreSQL connection string, such as postgres://weir@db:5432/ingest?sslmode=verify-full. Holds the password if any; never logged.",
			func(p *partial) **string { return &p.PGDSN }, func(c *Config) *string { return &c.Sink.Postgres.DSN }),
		identKnob("sink.postgres.table", DefaultPGTable, "Table the Postgres sink writes to.",
			func(p *partial) **string { return &p.PGTable }, func(c *Config) *string { return &c.Sink.Postgres.Table }),
		enumKnob("sink.postgres.payload_type", DefaultPGPayloadType, []string{"bytea", "jsonb"}, "Column type of payload; with jsonb a record that is not valid JSON is dead-lettered.",
			func(p *partial) **string { return &p.PGPayloadType }, func(c *Config) *string { return &c.Sink.Postgres.PayloadType }),
		intKnob("sink.postgres.batch_records", DefaultPGBatchRecords, 1, 65536, "Most records the Postgres sink takes per transaction.",
			func(p *partial) **int { return &p.PGBatchRecords }, func(c *Config) *int { return &c.Sink.Postgres.BatchRecords }),
		boolKnob("sink.postgres.create_table", true, "Create the table when it does not exist; an existing table is always checked.",
			func(p *partial) **bool { return &p.PGCreateTable }, func(c *Config) *bool { return &c.Sink.Postgres.CreateTable }),
		durationKnob("sink.postgres.timeout", DefaultPGTimeout, time.Second, time.Hour, "Time allowed for one commit (a timeout is retried).",
			func(p *partial) **time.Duration { return &p.PGTimeout }, func(c *Config) *time.Duration { return &c.Sink.Postgres.Timeout }),

		dsnKnob("sink.mysql.dsn", "a go-sql-driver DSN, user:password@tcp(host:port)/database; required when sink.type is \"mysql\"",
			"MySQL or MariaDB connection string. Holds the password if any; never logged.",
			func(p *partial) **string { return &p.MySQLDSN }, func(c *Config) *string { return &c.Sink.MySQL.DSN }),
		identKnob("sink.mysql.table", DefaultMySQLTable, "Table (or database.table) the MySQL sink writes to; created when missing.",
			func(p *partial) **string { return &p.MySQLTable }, func(c *Config) *string { return &c.Sink.MySQL.Table }),
		enumKnob("sink.mysql.payload_type", DefaultMySQLPayloadType, []string{"blob", "json"}, "Column type of payload (LONGBLOB or JSON); with json a record that is not valid JSON is dead-lettered.",
			func(p *partial) **string { return &p.MySQLPayloadType }, func(c *Config) *string { return &c.Sink.MySQL.PayloadType }),
		intKnob("sink.mysql.batch_records", DefaultMySQLBatch, 1, 65536, "Most records the MySQL sink takes per commit (one INSERT unless max_allowed_packet forces a split).",
			func(p *partial) **int { return &p.MySQLBatchRecords }, func(c *Config) *int { return &c.Sink.MySQL.BatchRecords }),
		durationKnob("sink.mysql.timeout", DefaultMySQLTimeout, time.Second, time.Hour, "Time allowed for one commit (a timeout is retried).",
			func(p *partial) **time.Duration { return &p.MySQLTimeout }, func(c *Config) *time.Duration { return &c.Sink.MySQL.Timeout }),

		enumKnob("gate", DefaultGate, []string{"buffer", "raw"}, "What a [[source]] waits for before it commits its position: the write-ahead buffer's durable write (buffer), or the [sink]'s own durable commit with no write-ahead buffer at all (raw: no producers, no drain; records the sink refuses go to <data_dir>/quarantine/raw).",
			func(p *partial) **string { return &p.Gate }, func(c *Config) *string { return &c.Gate }),
		enumKnob("role", DefaultRole, []string{"both", "ingest", "recovery"}, "What this node does for [[secondary]] sinks: deliver live batches and recover gaps (both), only deliver live (ingest), or only recover (recovery): a recovery-only node reads another node's raw in sink.file.dir read-only and runs no buffer, listener or source.",
			func(p *partial) **string { return &p.Role }, func(c *Config) *string { return &c.Role }),
		enumKnob("recovery_mode", DefaultRecoveryMode, []string{"rehydrate", "skip-quarantine"}, "Whether records a secondary rejects during recovery go to its quarantine lane again (rehydrate) or are only counted (skip-quarantine).",
			func(p *partial) **string { return &p.RecoveryMode }, func(c *Config) *string { return &c.RecoveryMode }),
		intKnob("recovery_window_records", DefaultWindowRecords, 1, 1<<20, "Most records one recovery window reads from raw and commits to a lagging secondary.",
			func(p *partial) **int { return &p.RecoveryWindowRecords }, func(c *Config) *int { return &c.RecoveryWindowRecords }),
		durationKnob("recovery_window_time", DefaultWindowTime, 10*time.Millisecond, time.Hour, "Deadline of one recovery window's commit; a window that misses it is retried at half the size.",
			func(p *partial) **time.Duration { return &p.RecoveryWindowTime }, func(c *Config) *time.Duration { return &c.RecoveryWindowTime }),
		durationKnob("coverage_flush_interval", DefaultCoverageFlush, 10*time.Millisecond, time.Minute, "How often the secondaries' coverage is written to the offset store in the raw directory (and the recovery gauges are updated).",
			func(p *partial) **time.Duration { return &p.CoverageFlushInterval }, func(c *Config) *time.Duration { return &c.CoverageFlushInterval }),

		hostKnob("metrics_bind", DefaultMetricsBind, "Address the metrics and health endpoint listens on: an IP address or a host name. The endpoint is unauthenticated; keep it on loopback or a private network.",
			func(p *partial) **string { return &p.MetricsBind }, func(c *Config) *string { return &c.MetricsBind }),
		intKnob("metrics_port", DefaultMetricsPort, 0, 65535, "TCP port of the metrics and health endpoint (/metrics, /live, /ready); 0 turns the endpoint off.",
			func(p *partial) **int { return &p.MetricsPort }, func(c *Config) *int { return &c.MetricsPort }),
		durationKnob("live_stall_timeout", DefaultLiveStallTimeout, time.Second, time.Hour, "/live fails once a shard flusher or the drain has been busy this long without progress (a sink that is slow or down never counts).",
			func(p *partial) **time.Duration { return &p.LiveStallTimeout }, func(c *Config) *time.Duration { return &c.LiveStallTimeout }),
		boolKnob("debug_pprof", false, "Also serve Go's profiler at /debug/pprof/ on the metrics endpoint (for diagnosis; unauthenticated like /metrics).",
			func(p *partial) **bool { return &p.DebugPprof }, func(c *Config) *bool { return &c.DebugPprof }),

		enumKnob("log_level", DefaultLogLevel, []string{"debug", "info", "warn", "error"}, "Least severe log level written.",
			func(p *partial) **string { return &p.LogLevel }, func(c *Config) *string { return &c.LogLevel }),
		enumKnob("log_format", DefaultLogFormat, []string{"text", "json"}, "Log line format.",
			func(p *partial) **string { return &p.LogFormat }, func(c *Config) *string { return &c.LogFormat }),
	}
}

// partial is one layer's view of the configuration: nil means the layer
// does not set the knob.
type partial struct {
	DataDir, SocketPath, WABDir *string

	Shards, MaxConnections, MaxFrameBytes *int
	FrameReadTimeout, IdleTimeout         *time.Duration
	WriteTimeout                          *time.Duration
	ConnMaxInflight, QueueCapacity        *int
	QueueTimeout, ShutdownTimeout         *time.Duration

	TCPListen, TLSCertFile, TLSKeyFile *string
	TLSClientCAFile                    *string
	TLSAllowedIdentities               *[]string
	TLSReloadInterval                  *time.Duration

	BatchMaxRecords  *int
	BatchDeadline    *time.Duration
	SegmentMaxBytes  *int64
	SegmentMaxAge    *time.Duration
	PreallocateBytes *int64

	DrainRetryBase, DrainRetryMax *time.Duration
	DrainMaxRetries               *int
	DeadLetterMaxBytes            *int64
	DeadLetterCheckInterval       *time.Duration
	SinkHealthInterval            *time.Duration

	SinkType         *string
	SinkDurable      *bool
	FileDir          *string
	FileMaxBytes     *int64
	FileMaxAge       *time.Duration
	FileBatchRecords *int

	ParquetDir, ParquetCompression     *string
	ParquetMaxBytes, ParquetMaxPayload *int64
	ParquetMaxAge                      *time.Duration
	ParquetBatchRecords                *int

	PGDSN, PGTable, PGPayloadType *string
	PGBatchRecords                *int
	PGCreateTable                 *bool
	PGTimeout                     *time.Duration

	MySQLDSN, MySQLTable, MySQLPayloadType *string
	MySQLBatchRecords                      *int
	MySQLTimeout                           *time.Duration

	MetricsBind      *string
	MetricsPort      *int
	LiveStallTimeout *time.Duration
	DebugPprof       *bool

	Role, RecoveryMode    *string
	Gate                  *string
	RecoveryWindowRecords *int
	RecoveryWindowTime    *time.Duration
	CoverageFlushInterval *time.Duration

	LogLevel, LogFormat *string

	// topology holds the [[secondary]] and [[source]] tables as read from
	// the file; they have no flag or environment form.
	topology *topologyTOML
}

func between(v, lo, hi int64, f func(int64) string) string {
	if v < lo || v > hi {
		return fmt.Sprintf("must be between %s and %s", f(lo), f(hi))
	}
	return ""
}

func quoteAll(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

func tomlString(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	return "", fmt.Errorf("want a string, got %s", tomlType(v))
}

func tomlType(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case int64:
		return fmt.Sprintf("the integer %d", v)
	case float64:
		return fmt.Sprintf("the float %v", v)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "an array"
	default:
		return fmt.Sprintf("a %T", v)
	}
}
