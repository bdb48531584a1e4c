// Package config loads weir's configuration from four layers — command-line
// flags over WEIR_* environment variables over a TOML file over built-in
// defaults — each read as a partial configuration, merged, then validated.
//
// Every setting is declared once, in the knob table (knobs.go). Its TOML key
// fixes its flag and environment variable mechanically: sink.file.max_bytes
// is --sink-file-max-bytes and WEIR_SINK_FILE_MAX_BYTES. Durations are Go
// durations ("250ms", "5s"); sizes are integers of bytes or carry a KiB, MiB
// or GiB suffix. docs/configuration.md is checked against the table by the
// package's tests.
//
// The sink and source kinds are not declared here but in the component
// registry (internal/component, the built-in list in internal/components):
// each kind's keys become the [sink.<kind>] knobs, and the [[secondary]]
// and [[source]] tables are read and checked key by key through them, with
// the same value types (package setting), the same range checks and the
// same warnings for unknown keys. The keys of those two tables themselves
// (name, type, queue_batches, raw_dir…) are declared the same way, as
// component.Fields of SecondaryConfig and SourceConfig (topology.go). Config.Components is the registry a
// configuration was checked against.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/components"
)

// Config is the daemon's validated configuration. Paths are absolute and
// clean.
type Config struct {
	DataDir    string // data_dir
	SocketPath string // socket_path; default <data_dir>/weir.sock
	WABDir     string // wab_dir; default <data_dir>/wab

	Shards           int           // shards
	MaxConnections   int           // max_connections
	MaxFrameBytes    int           // max_frame_bytes
	FrameReadTimeout time.Duration // frame_read_timeout
	IdleTimeout      time.Duration // idle_timeout
	WriteTimeout     time.Duration // write_timeout
	ConnMaxInflight  int           // conn_max_inflight (requests)
	QueueCapacity    int           // queue_capacity (per shard)
	QueueTimeout     time.Duration // queue_timeout
	ShutdownTimeout  time.Duration // shutdown_timeout

	ConnMaxInflightBytes int64 // conn_max_inflight_bytes
	QueueCapacityBytes   int64 // queue_capacity_bytes (per shard)

	// TCP with mutual TLS; off when TCPListen is empty.
	TCPListen            string        // tcp_listen (host:port)
	TLSCertFile          string        // tls_cert_file
	TLSKeyFile           string        // tls_key_file
	TLSClientCAFile      string        // tls_client_ca_file
	TLSAllowedIdentities []string      // tls_allowed_identities; nil allows any verified client
	TLSReloadInterval    time.Duration // tls_reload_interval

	BatchMaxRecords  int           // batch_max_records
	BatchDeadline    time.Duration // batch_deadline
	SegmentMaxBytes  int64         // segment_max_bytes
	SegmentMaxAge    time.Duration // segment_max_age
	PreallocateBytes int64         // segment_preallocate_bytes

	DrainRetryBase time.Duration // drain_retry_base
	DrainRetryMax  time.Duration // drain_retry_max

	DrainMaxRetries         int           // drain_max_retries
	DrainOpenSegments       bool          // drain_open_segments
	DrainLinger             time.Duration // drain_linger
	DeadLetterMaxBytes      int64         // dead_letter_max_bytes
	DeadLetterCheckInterval time.Duration // dead_letter_check_interval
	SinkHealthInterval      time.Duration // sink_health_interval

	Sink SinkConfig // [sink]; with secondaries, the primary raw

	// Topology: secondaries fed from primary raw, and sources writing
	// through the write-ahead buffer. Both are TOML-only ([[secondary]],
	// [[source]]); see topology.go.
	Secondaries           []SecondaryConfig // [[secondary]]
	Sources               []SourceConfig    // [[source]]
	Role                  string            // role: both|ingest|recovery
	Gate                  string            // gate: buffer|raw
	RecoveryMode          string            // recovery_mode: rehydrate|skip-quarantine
	RecoveryWindowRecords int               // recovery_window_records
	RecoveryWindowTime    time.Duration     // recovery_window_time
	CoverageFlushInterval time.Duration     // coverage_flush_interval

	MetricsBind      string        // metrics_bind
	MetricsPort      int           // metrics_port; 0 turns the endpoint off
	LiveStallTimeout time.Duration // live_stall_timeout
	DebugPprof       bool          // debug_pprof
	// MetricsTLS (metrics_tls) serves the metrics endpoint over HTTPS
	// with [http]'s certificate material, a client certificate optional.
	MetricsTLS bool
	// MetricsAllowUnauthenticated (metrics_allow_unauthenticated) lets
	// the admin routes be served beyond loopback without authentication.
	MetricsAllowUnauthenticated bool

	Flow FlowConfig // memory_budget, record_size_estimate, [flow]

	// Contracts are the [[contract]]s: streams' data contracts, quality
	// rules and content dedup (docs/data_quality.md).
	Contracts []ContractConfig
	DQAudit   DQAuditConfig // [dq_audit]

	Coordination CoordinationConfig // [coordination] (docs/coordination.md)

	HTTP HTTPConfig // [http] (docs/http.md)

	LogLevel  string // log_level: debug|info|warn|error
	LogFormat string // log_format: text|json

	// Components are the sink and source kinds the configuration was
	// read and checked against; the daemon opens its sinks and sources
	// through them.
	Components *component.Registry

	// File is the TOML file read (--config or WEIR_CONFIG), absolute; ""
	// when none was.
	File string
}

// SinkConfig chooses and configures a sink: the [sink], or a
// [[secondary]]'s.
type SinkConfig struct {
	Type string // sink.type: a registered sink kind
	// Durable is sink.durable: always true for the [sink] (primary raw,
	// or the gate's sink); a [[secondary]] of a kind with the NonDurable
	// capability may set it false, and its commits then need not wait for
	// stable storage.
	Durable bool
	// Kinds holds each kind's table ([sink.<kind>]) with its defaults
	// filled in and paths made absolute, keyed by kind: the kind's own
	// settings type (for "file", *filesink.Config). The [sink] holds every
	// registered kind's (flags and variables may set any of them); a
	// secondary only its own.
	Kinds map[string]any
}

// Settings are the settings of the kind in use, s.Kinds[s.Type].
func (s SinkConfig) Settings() any { return s.Kinds[s.Type] }

// SinkDir is the directory a sink configured by s writes — its kind's
// directory key, such as sink.file.dir — or "" for a kind that writes no
// directory.
func (c *Config) SinkDir(s SinkConfig) string {
	f := c.sinkDirField(s.Type)
	if f == nil || s.Settings() == nil {
		return ""
	}
	return f.Get(s.Settings()).(string)
}

func (c *Config) sinkDirField(kind string) *component.Field {
	sk, ok := c.Components.Sink(kind)
	if !ok {
		return nil
	}
	return sk.Dir()
}

// ConfigFlag and ConfigEnv name the TOML file to read. Without either, no
// file is read.
const (
	ConfigFlag = "config"
	ConfigEnv  = "WEIR_CONFIG"
)

// Level is LogLevel as a slog level.
func (c *Config) Level() slog.Level {
	switch c.LogLevel {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// Load builds the configuration for `weir serve`. args are the arguments
// after the subcommand, environ is in the form of os.Environ. Flags win over
// WEIR_* variables, which win over the TOML file named by --config or
// WEIR_CONFIG, which wins over the defaults. Unknown keys in the file and
// unknown WEIR_* variables are logged as warnings on logger (nil discards
// them). Every parse and validation error is reported, joined; each names
// the setting, its value and where it came from or what is allowed. For
// --help or -h Load returns an error matching flag.ErrHelp; print Usage.
//
// The sink and source kinds are the built-in ones (internal/components);
// LoadWith reads a configuration against another registry.
func Load(args []string, environ []string, logger *slog.Logger) (*Config, error) {
	return LoadWith(components.Registry(), args, environ, logger)
}

// LoadWith is Load with the sink and source kinds of reg.
func LoadWith(reg *component.Registry, args []string, environ []string, logger *slog.Logger) (*Config, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("config: working directory: %w", err)
	}
	return loadWith(reg, args, environ, logger, wd)
}

func load(args, environ []string, logger *slog.Logger, wd string) (*Config, error) {
	return loadWith(components.Registry(), args, environ, logger, wd)
}

func loadWith(reg *component.Registry, args, environ []string, logger *slog.Logger, wd string) (*Config, error) {
	c, err := check(reg, args, environ, logger, wd, false)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Validate checks the configuration file at path as Load does for weir
// serve — every knob, table and rule over them, against the built-in
// kinds — with environ's WEIR_* variables over the file (nil: none; the
// --config and WEIR_CONFIG names are not read, path is the file), and
// refuses what Load only warns about: a key in the file that no setting
// has, and an unknown WEIR_ variable. Relative paths are taken against
// the working directory, as weir serve takes them.
//
// The error joins one error per problem, each a *Problem (Problems
// lists them). The Config is returned even then, whenever the file could
// be read, for the checks made after loading (internal/daemon's Check):
// with problems it may be only partly filled in and must not be run.
func Validate(path string, environ []string) (*Config, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("config: working directory: %w", err)
	}
	var env []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, ConfigEnv+"=") {
			env = append(env, kv)
		}
	}
	return check(components.Registry(), []string{"--" + ConfigFlag, path}, env, nil, wd, true)
}

// check reads and validates a configuration for loadWith, and with
// strict for Validate: then unknown keys and variables are problems,
// and the Config is returned with the problems.
func check(reg *component.Registry, args, environ []string, logger *slog.Logger, wd string, strict bool) (*Config, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ks := knobsFor(reg)
	var errs []error

	cli, cliFile, err := parseFlags(ks, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		errs = append(errs, err)
	}
	var unknown func(file, key string)
	if strict {
		unknown = func(file, key string) {
			p := &Problem{File: file, Key: key, Why: unknownKeyWhy, msg: fmt.Sprintf("config: file %s: %s: %s", file, key, unknownKeyWhy)}
			if file == "" {
				p.Why = "unknown WEIR_ environment variable: weir serve ignores it with a warning"
				p.msg = "config: env " + key + ": " + p.Why
			}
			errs = append(errs, p)
		}
	}
	env, envFile, envErrs := parseEnv(ks, environ, logger, unknown)
	errs = append(errs, envErrs...)

	file := &partial{}
	path := envFile
	if cliFile != nil {
		path = *cliFile
	}
	if path != "" {
		if !filepath.IsAbs(path) {
			path = filepath.Join(wd, path)
		}
		var ferrs []error
		file, ferrs = parseFile(reg, ks, path, logger, unknown)
		errs = append(errs, ferrs...)
	}

	merged := &partial{}
	for _, layer := range []*partial{file, env, cli} {
		for i := range ks {
			ks[i].merge(merged, layer)
		}
	}
	c := &Config{Components: reg, File: path}
	for i := range ks {
		ks[i].apply(c, merged)
	}
	topo := file.topology // TOML-only: no flag or environment layer
	if merged.PreallocateBytes == nil && c.PreallocateBytes > c.SegmentMaxBytes {
		c.PreallocateBytes = c.SegmentMaxBytes
	}
	errs = append(errs, validate(ks, c, wd)...)
	errs = append(errs, buildTopology(ks, c, topo, wd)...)
	errs = append(errs, checkHTTPStream(ks, c)...)
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	logger.Debug("configuration loaded", "file", path, "data_dir", c.DataDir)
	return c, nil
}

func knobByKey(ks []knob, key string) *knob {
	for i := range ks {
		if ks[i].Key == key {
			return &ks[i]
		}
	}
	panic("config: no knob " + key)
}

func invalid(k *knob, value, why string) error {
	return &Problem{Key: k.Key, Value: value, Why: why,
		msg: fmt.Sprintf("config: %s = %s: %s (flag --%s, env %s)", k.Key, value, why, k.Flag(), k.Env())}
}

// AutoShards is the shard count of shards = 0: one per CPU the process
// may use (GOMAXPROCS, which follows a container's CPU limit), at most
// MaxAutoShards. Measured on 2 cores (docs/benchmarks.md, "The drain and
// the shard count"): four flushers make four fdatasyncs where two make
// two, on the same two cores; two shards ack 16 % more at 64 producers ×
// 16 in flight and lose nowhere measurably.
func AutoShards() int { return max(1, min(MaxAutoShards, runtime.GOMAXPROCS(0))) }

// validate range-checks every knob, resolves shards = 0 (AutoShards),
// resolves and checks paths, and checks the rules that span knobs.
func validate(ks []knob, c *Config, wd string) []error {
	var errs []error
	for i := range ks {
		k := &ks[i]
		if why := k.check(c); why != "" {
			errs = append(errs, invalid(k, k.value(c), why))
		}
	}
	if c.Shards == 0 {
		c.Shards = AutoShards()
	}

	dataOK := true
	resolve := func(key string, p *string, derived string) {
		k := knobByKey(ks, key)
		if *p == "" { // unset: derived from data_dir
			if !dataOK {
				return
			}
			*p = filepath.Join(c.DataDir, derived)
		} else {
			abs, why := resolvePath(*p, wd)
			if why != "" {
				errs = append(errs, invalid(k, fmt.Sprintf("%q", *p), why))
				if key == "data_dir" {
					dataOK = false
				}
				return
			}
			*p = abs
		}
		if key == "socket_path" && len(*p) > MaxSocketPathBytes {
			errs = append(errs, invalid(k, fmt.Sprintf("%q", *p),
				fmt.Sprintf("is %d bytes long; a Unix socket path may be at most %d bytes (choose a shorter socket_path or data_dir)", len(*p), MaxSocketPathBytes)))
		}
	}
	resolve("data_dir", &c.DataDir, "")
	resolve("socket_path", &c.SocketPath, DefaultSocketName)
	resolve("wab_dir", &c.WABDir, DefaultWABName)
	resolve("dq_audit.dir", &c.DQAudit.Dir, DefaultDQAuditDirName)
	resolve("coordination.data_dir", &c.Coordination.DataDir, DefaultCoordDirName)
	// Every sink kind's directory, in use or not: a flag may set any.
	for _, sk := range c.Components.Sinks() {
		if f := sk.Dir(); f != nil {
			settings := c.Sink.settings(sk)
			dir := f.Get(settings).(string)
			resolve("sink."+sk.Name()+"."+f.Key, &dir, f.DirName)
			f.Set(settings, dir)
			if c.WABDir != "" && c.WABDir == dir {
				errs = append(errs, invalid(knobByKey(ks, "sink."+sk.Name()+"."+f.Key), fmt.Sprintf("%q", dir), "must differ from wab_dir"))
			}
		}
	}

	errs = append(errs, validateTLS(ks, c, wd)...)
	errs = append(errs, validateSinkKind(ks, c, wd)...)
	errs = append(errs, validateFlow(ks, c)...)
	errs = append(errs, validateCoordination(ks, c)...)
	errs = append(errs, validateHTTP(ks, c, wd)...)
	errs = append(errs, validateAdmin(ks, c)...)
	if c.DrainRetryMax < c.DrainRetryBase {
		k := knobByKey(ks, "drain_retry_max")
		errs = append(errs, invalid(k, formatDuration(c.DrainRetryMax),
			fmt.Sprintf("must be at least drain_retry_base (%s)", formatDuration(c.DrainRetryBase))))
	}
	if c.PreallocateBytes > c.SegmentMaxBytes {
		k := knobByKey(ks, "segment_preallocate_bytes")
		errs = append(errs, invalid(k, FormatSize(c.PreallocateBytes),
			fmt.Sprintf("must not exceed segment_max_bytes (%s)", FormatSize(c.SegmentMaxBytes))))
	}
	return errs
}

// validateSinkKind checks the [sink]'s kind: its required keys, its rules
// over several keys, its other paths.
func validateSinkKind(ks []knob, c *Config, wd string) []error {
	sk, ok := c.Components.Sink(c.Sink.Type)
	if !ok {
		return nil // sink.type itself is reported
	}
	var errs []error
	settings := c.Sink.Settings()
	report := func(key, value, why string) {
		if value == "" {
			value = `""`
		}
		errs = append(errs, invalid(knobByKey(ks, "sink."+c.Sink.Type+"."+key), value, why))
	}
	checkKind(sk.Fields(), settings, sk.Check(settings), fmt.Sprintf("sink.type is %q", c.Sink.Type), report)
	resolveFields(sk.Fields(), settings, wd, false, report) // its directory is resolved with the other paths
	return errs
}

// pathField is a knob's file path, resolved in place.
type pathField struct {
	key string
	p   *string
}

// resolvePaths makes each set path absolute against wd (resolvePath),
// reporting the ones that cannot be.
func resolvePaths(ks []knob, files []pathField, wd string) []error {
	var errs []error
	for _, f := range files {
		if *f.p == "" {
			continue
		}
		abs, why := resolvePath(*f.p, wd)
		if why != "" {
			errs = append(errs, invalid(knobByKey(ks, f.key), fmt.Sprintf("%q", *f.p), why))
			continue
		}
		*f.p = abs
	}
	return errs
}

// validateTLS resolves the TLS file paths and checks that TCP is served
// only with all of its TLS material, and that TLS settings are not given
// without TCP (they would silently do nothing).
func validateTLS(ks []knob, c *Config, wd string) []error {
	files := []pathField{
		{"tls_cert_file", &c.TLSCertFile},
		{"tls_key_file", &c.TLSKeyFile},
		{"tls_client_ca_file", &c.TLSClientCAFile},
	}
	errs := resolvePaths(ks, files, wd)
	if c.TCPListen != "" {
		for _, f := range files {
			if *f.p == "" {
				errs = append(errs, invalid(knobByKey(ks, f.key), `""`,
					fmt.Sprintf("is required because tcp_listen is set (%q): TCP is served only with mutual TLS", c.TCPListen)))
			}
		}
		return errs
	}
	for _, f := range files {
		if *f.p != "" {
			errs = append(errs, invalid(knobByKey(ks, f.key), fmt.Sprintf("%q", *f.p),
				"has no effect while tcp_listen is empty; set tcp_listen to serve TCP with mutual TLS, or unset this"))
		}
	}
	if len(c.TLSAllowedIdentities) > 0 {
		k := knobByKey(ks, "tls_allowed_identities")
		errs = append(errs, invalid(k, k.value(c),
			"has no effect while tcp_listen is empty; set tcp_listen to serve TCP with mutual TLS, or unset this"))
	}
	return errs
}

// resolvePath checks raw and makes it absolute against wd. The `..` check is
// on the cleaned raw input, so "a/../b" (which is just "b") passes while
// "../b" and "/.." style escapes do not.
func resolvePath(raw, wd string) (string, string) {
	if strings.IndexByte(raw, 0) >= 0 {
		return "", "contains a NUL byte"
	}
	clean := filepath.Clean(raw)
	if slices.Contains(strings.Split(clean, string(filepath.Separator)), "..") {
		return "", "must not contain a \"..\" element"
	}
	if !filepath.IsAbs(clean) {
		clean = filepath.Join(wd, clean)
	}
	return clean, ""
}

// parseFlags reads the command line into a partial. The second result is
// the --config value, nil when not given.
func parseFlags(ks []knob, args []string) (*partial, *string, error) {
	p := &partial{}
	fs := flag.NewFlagSet("weir serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var file *string
	fs.Func(ConfigFlag, "TOML configuration `file`", func(s string) error {
		file = &s
		return nil
	})
	for i := range ks {
		k := &ks[i]
		set := func(s string) error {
			if err := k.parse(p, s); err != nil {
				return fmt.Errorf("%s: %w", k.Key, err)
			}
			return nil
		}
		if k.Kind == kindBool {
			fs.BoolFunc(k.Flag(), k.Help, set) // --flag alone means true
		} else {
			fs.Func(k.Flag(), k.Help, set)
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return p, nil, fmt.Errorf("config: %w", err)
		}
		return p, file, fmt.Errorf("config: command line: %w", err)
	}
	if fs.NArg() > 0 {
		return p, file, fmt.Errorf("config: command line: unexpected argument %q (settings are flags such as --shards=8)", fs.Arg(0))
	}
	return p, file, nil
}

// parseEnv reads WEIR_* variables into a partial. The second result is
// WEIR_CONFIG. Empty variables are treated as unset; for repeated ones the
// last wins.
//
// unknown, when not nil, is told of each unknown WEIR_ variable (with
// file ""), which is then not logged.
func parseEnv(ks []knob, environ []string, logger *slog.Logger, unknown func(file, key string)) (*partial, string, []error) {
	p := &partial{}
	byEnv := make(map[string]*knob, len(ks))
	for i := range ks {
		byEnv[ks[i].Env()] = &ks[i]
	}
	vals := map[string]string{}
	var order []string
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, "WEIR_") {
			continue
		}
		if _, seen := vals[name]; !seen {
			order = append(order, name)
		}
		vals[name] = val
	}
	var file string
	var errs []error
	for _, name := range order {
		val := vals[name]
		if name == ConfigEnv {
			file = val
			continue
		}
		k, ok := byEnv[name]
		if !ok && unknown != nil {
			unknown("", name)
			continue
		}
		if !ok {
			logger.Warn("config: unknown WEIR_ environment variable ignored", "env", name)
			continue
		}
		if val == "" {
			continue
		}
		if err := k.parse(p, val); err != nil {
			errs = append(errs, fmt.Errorf("config: env %s: %s: %w", name, k.Key, err))
		}
	}
	return p, file, errs
}

// tomlNode is one key of the TOML tree the knob table describes.
type tomlNode struct {
	name     string
	k        *knob
	children []*tomlNode
}

func tomlTree(ks []knob) *tomlNode {
	root := &tomlNode{}
	for i := range ks {
		n := root
		for _, part := range strings.Split(ks[i].Key, ".") {
			var next *tomlNode
			for _, c := range n.children {
				if c.name == part {
					next = c
				}
			}
			if next == nil {
				next = &tomlNode{name: part}
				n.children = append(n.children, next)
			}
			n = next
		}
		n.k = &ks[i]
	}
	return root
}

var primitiveType = reflect.TypeFor[toml.Primitive]()

// structType is a Go struct mirroring the node: toml.Primitive for each
// setting, a nested struct for each table. Decoding into it lets the TOML
// decoder report every key the table does not know as undecoded.
func (n *tomlNode) structType() reflect.Type {
	fields := make([]reflect.StructField, len(n.children))
	for i, c := range n.children {
		t := primitiveType
		if c.k == nil {
			t = c.structType()
		}
		fields[i] = reflect.StructField{
			Name: fmt.Sprintf("F%d", i),
			Type: t,
			Tag:  reflect.StructTag(fmt.Sprintf(`toml:%q`, c.name)),
		}
	}
	return reflect.StructOf(fields)
}

// tomlLeaf decodes one setting through its knob, so that the decoder's
// error carries the line and key.
type tomlLeaf struct {
	k *knob
	p *partial
}

func (l *tomlLeaf) UnmarshalTOML(v any) error { return l.k.parseTOML(l.p, v) }

// parseFile reads the file at path into a partial. unknown, when not
// nil, is told of each key no setting has, which is then not logged.
func parseFile(reg *component.Registry, ks []knob, path string, logger *slog.Logger, unknown func(file, key string)) (*partial, []error) {
	p := &partial{}
	data, err := os.ReadFile(path)
	if err != nil {
		return p, []error{&Problem{File: path, Why: err.Error(), cause: err, msg: fmt.Sprintf("config: file %s: %v", path, err)}}
	}
	root := tomlTree(ks)
	doc := reflect.New(withTopology(root.structType()))
	md, err := toml.Decode(string(data), doc.Interface())
	if err != nil {
		return p, []error{fileError(path, "", err)}
	}
	var errs []error
	var walk func(n *tomlNode, v reflect.Value)
	walk = func(n *tomlNode, v reflect.Value) {
		for i, c := range n.children {
			f := v.Field(i)
			if c.k == nil {
				walk(c, f)
				continue
			}
			if f.IsZero() {
				continue
			}
			leaf := &tomlLeaf{k: c.k, p: p}
			if err := md.PrimitiveDecode(f.Interface().(toml.Primitive), leaf); err != nil {
				errs = append(errs, fileError(path, c.k.Key, err))
			}
		}
	}
	walk(root, doc.Elem())
	errs = append(errs, decodeTopology(reg, root, md, doc.Elem(), p, path)...)
	for _, key := range md.Undecoded() {
		if unknown != nil {
			unknown(path, key.String())
			continue
		}
		logger.Warn("config: unknown key in configuration file ignored", "file", path, "key", key.String())
	}
	return p, errs
}

func fileError(path, key string, err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		if key == "" {
			key = pe.LastKey
		}
		loc := path
		if pe.Position.Line > 0 {
			loc = fmt.Sprintf("%s:%d", path, pe.Position.Line)
		}
		p := &Problem{File: path, Line: pe.Position.Line, Key: key, Why: pe.Message}
		if key != "" {
			p.msg = fmt.Sprintf("config: file %s: %s: %s", loc, key, pe.Message)
		} else {
			p.msg = fmt.Sprintf("config: file %s: %s", loc, pe.Message)
		}
		return p
	}
	return &Problem{File: path, Key: key, Why: err.Error(), cause: err, msg: fmt.Sprintf("config: file %s: %v", path, err)}
}

// Usage is the help text for `weir serve`: every flag with its default.
func Usage() string {
	var b strings.Builder
	b.WriteString("Usage: weir serve [flags]\n\n")
	b.WriteString("Settings come from flags, then WEIR_* environment variables, then the\n")
	b.WriteString("TOML file named by --config, then the defaults shown. Durations are Go\n")
	b.WriteString("durations (250ms, 5s, 1m); sizes are bytes or use KiB, MiB, GiB.\n\n")
	fmt.Fprintf(&b, "  --%s FILE\n        TOML configuration file (env %s); none is read by default\n", ConfigFlag, ConfigEnv)
	for _, k := range knobs() {
		fmt.Fprintf(&b, "  --%s %s\n        %s\n        default %s; %s; env %s\n",
			k.Flag(), strings.ToUpper(string(k.Kind)), k.Help, k.Default, k.Range, k.Env())
	}
	return b.String()
}
