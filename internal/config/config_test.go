package config

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/weir-io/weir/internal/components"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/sink/flightsink"
	"github.com/weir-io/weir/internal/sink/kafkasink"
	"github.com/weir-io/weir/internal/sink/mysqlsink"
	"github.com/weir-io/weir/internal/sink/parquetsink"
	"github.com/weir-io/weir/internal/sink/pgsink"
)

const wd = "/srv/weir"

// capture is a slog handler that keeps records for assertions.
type capture struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r.Clone())
	return nil
}
func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

// warnings lists "msg key=value" for every warning.
func (c *capture) warnings() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.recs {
		if r.Level != slog.LevelWarn {
			continue
		}
		s := r.Message
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "key" || a.Key == "env" {
				s += " " + a.Key + "=" + a.Value.String()
			}
			return true
		})
		out = append(out, s)
	}
	return out
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "weir.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// fileSink is the file sink's settings in s.
func fileSink(s SinkConfig) *filesink.Config { return s.Kinds["file"].(*filesink.Config) }

func mustLoad(t *testing.T, args, env []string) *Config {
	t.Helper()
	c, err := load(args, env, nil, wd)
	if err != nil {
		t.Fatalf("load(%q, %q): %v", args, env, err)
	}
	return c
}

func TestDefaults(t *testing.T) {
	got := mustLoad(t, nil, nil)
	want := &Config{
		DataDir:                 "/srv/weir/data",
		SocketPath:              "/srv/weir/data/weir.sock",
		WABDir:                  "/srv/weir/data/wab",
		Shards:                  AutoShards(),
		MaxConnections:          1024,
		MaxFrameBytes:           4 << 20,
		FrameReadTimeout:        10 * time.Second,
		IdleTimeout:             5 * time.Minute,
		WriteTimeout:            10 * time.Second,
		ConnMaxInflight:         4096,
		QueueCapacity:           DefaultQueueCapacity,
		ConnMaxInflightBytes:    64 << 20,
		QueueCapacityBytes:      64 << 20,
		QueueTimeout:            time.Second,
		ShutdownTimeout:         30 * time.Second,
		TLSReloadInterval:       30 * time.Second,
		BatchMaxRecords:         4096,
		BatchDeadline:           0,
		SegmentMaxBytes:         256 << 20,
		SegmentMaxAge:           time.Second,
		PreallocateBytes:        DefaultPreallocateBytes,
		DrainRetryBase:          100 * time.Millisecond,
		DrainRetryMax:           10 * time.Second,
		DrainMaxRetries:         5,
		DrainOpenSegments:       true,
		DrainLinger:             5 * time.Millisecond,
		DeadLetterMaxBytes:      1 << 30,
		DeadLetterCheckInterval: 5 * time.Second,
		SinkHealthInterval:      30 * time.Second,
		Role:                    "both",
		Gate:                    "buffer",
		RecoveryMode:            "rehydrate",
		RecoveryWindowRecords:   4096,
		RecoveryWindowTime:      10 * time.Second,
		CoverageFlushInterval:   250 * time.Millisecond,
		Sink: SinkConfig{Type: "file", Durable: true, Kinds: map[string]any{
			"file": &filesink.Config{Dir: "/srv/weir/data/out", MaxBytes: 128 << 20, MaxAge: time.Minute, BatchRecords: 4096},
			"parquet": &parquetsink.Config{Dir: "/srv/weir/data/parquet", MaxBytes: 64 << 20, MaxAge: time.Minute, BatchRecords: 4096,
				MaxPayloadBytes: 16 << 20, Compression: "default"},
			"postgres": &pgsink.Config{Table: "weir_records", PayloadType: "bytea", BatchRecords: 4096, CreateTable: true, Timeout: 30 * time.Second, InsertMethod: "copy"},
			"mysql":    &mysqlsink.Config{Table: "weir_records", PayloadType: "blob", BatchRecords: 4096, Timeout: 30 * time.Second},
			"kafka": &kafkasink.Config{ClientID: "weir", DeliveryTimeout: 30 * time.Second, BatchRecords: 4096,
				MaxMessageBytes: 1 << 20, Compression: "none"},
			"flight": &flightsink.Config{BatchRecords: 4096, MaxMessageBytes: 4 << 20, CommitTimeout: 30 * time.Second, Compression: "none", Columns: "generic"},
		}},
		Components:       components.Registry(),
		MetricsBind:      "127.0.0.1",
		MetricsPort:      9185,
		LiveStallTimeout: time.Minute,
		Flow: FlowConfig{
			RecordSizeEstimate: 256, Admission: true, AdmissionWait: 100 * time.Millisecond, RetryAfter: 100 * time.Millisecond,
			WarmupPercent: 25, WarmupAcks: 1024, WarmupTimeout: 5 * time.Second,
			DegradedMemoryPercent: 80, CriticalMemoryPercent: 90, DegradedQueuePercent: 70, CriticalQueuePercent: 90,
			IdleQueuePercent: 5, Failures: 3, CriticalHold: 5 * time.Second, RecoveryHold: 30 * time.Second, RecoveryTime: time.Minute,
			SampleInterval: 250 * time.Millisecond, StuckMemoryPercent: 50,
			StuckWarnAfter: 2 * time.Minute, StuckFailAfter: 5 * time.Minute, StuckExitAfter: 5 * time.Minute,
			StuckClearAfter: 30 * time.Second, Profile: "default", QuorumBudgetPercent: 50, QuorumBatchPercent: 50,
		},
		DQAudit: DQAuditConfig{Dir: "/srv/weir/data/dq-audit", Table: DefaultDQAuditTable, Window: time.Minute, Sample: 16},
		Coordination: CoordinationConfig{DataDir: "/srv/weir/data/coordination", PeerListen: DefaultCoordPeerListen,
			ClientListen: DefaultCoordClientListen, BackupInterval: DefaultCoordBackupInterval, BackupKeep: DefaultCoordBackupKeep,
			ReadyTimeout: DefaultCoordReadyTimeout, HandoffGrace: DefaultCoordHandoffGrace, SessionTTL: DefaultCoordSessionTTL,
			LeaseTTL: DefaultCoordLeaseTTL, ClaimPositions: DefaultCoordClaimPositions},
		HTTP: HTTPConfig{Enabled: true, Listen: "127.0.0.1:9186", Stream: "http",
			MaxBodyBytes: 16 << 20, MaxDecodedBytes: 32 << 20, MaxRecords: 10000, MaxConcurrent: 256, MaxConnections: 1024, StreamInflightBytes: 8 << 20, MaxHeaderBytes: 16 << 10,
			ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute},
		LogLevel:  "info",
		LogFormat: "text",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
	if got.Level() != slog.LevelInfo {
		t.Errorf("Level() = %v", got.Level())
	}
}

func TestLoadUsesWorkingDirectory(t *testing.T) {
	c, err := Load(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cwd, _ := os.Getwd()
	if c.DataDir != filepath.Join(cwd, "data") {
		t.Errorf("DataDir = %q, want under %q", c.DataDir, cwd)
	}
}

// samples holds two distinct, valid, non-default values per knob in text
// form. Every knob must have an entry, so a new knob gets tested through
// every layer.
var samples = map[string][2]string{
	"data_dir":                       {"/var/lib/weir", "rel/dir"},
	"socket_path":                    {"/run/weir/a.sock", "/run/weir/b.sock"},
	"wab_dir":                        {"/var/lib/weir/wab1", "wab2"},
	"shards":                         {"8", "16"},
	"max_connections":                {"10", "20"},
	"max_frame_bytes":                {"1MiB", "65536"},
	"frame_read_timeout":             {"2s", "250ms"},
	"idle_timeout":                   {"1m", "90s"},
	"write_timeout":                  {"3s", "4s"},
	"conn_max_inflight":              {"100", "200"},
	"queue_capacity":                 {"1000", "2000"},
	"queue_capacity_bytes":           {"1MiB", "256MiB"},
	"conn_max_inflight_bytes":        {"8MiB", "1GiB"},
	"queue_timeout":                  {"5ms", "2s"},
	"shutdown_timeout":               {"5s", "1m"},
	"tcp_listen":                     {"127.0.0.1:9443", ":7000"},
	"tls_cert_file":                  {"/etc/weir/tls/a.crt", "tls/b.crt"},
	"tls_key_file":                   {"/etc/weir/tls/a.key", "tls/b.key"},
	"tls_client_ca_file":             {"/etc/weir/tls/ca-a.crt", "tls/ca-b.crt"},
	"tls_allowed_identities":         {"spiffe://weir.test/producer", "ingest.weir.test, ops@weir.test"},
	"tls_reload_interval":            {"5s", "1h"},
	"batch_max_records":              {"128", "1"},
	"batch_deadline":                 {"1ms", "2ms"},
	"segment_max_bytes":              {"512MiB", "1GiB"},
	"segment_max_age":                {"2s", "500ms"},
	"segment_preallocate_bytes":      {"0", "1MiB"},
	"drain_retry_base":               {"10ms", "1s"},
	"drain_retry_max":                {"1m", "30s"},
	"drain_max_retries":              {"0", "17"},
	"drain_open_segments":            {"false", "true"},
	"drain_linger":                   {"0s", "20ms"},
	"dead_letter_max_bytes":          {"1MiB", "2GiB"},
	"dead_letter_check_interval":     {"10ms", "1m"},
	"sink_health_interval":           {"100ms", "2s"},
	"debug_pprof":                    {"true", "false"},
	"sink.type":                      {"postgres", "mysql"},
	"sink.file.dir":                  {"/out/a", "out-b"},
	"sink.file.max_bytes":            {"4KiB", "1GiB"},
	"sink.file.max_age":              {"1h", "10s"},
	"sink.file.batch_records":        {"1", "100000"},
	"sink.parquet.dir":               {"/lake/a", "lake-b"},
	"sink.parquet.max_bytes":         {"64KiB", "2GiB"},
	"sink.parquet.max_age":           {"1h", "10s"},
	"sink.parquet.batch_records":     {"1", "100000"},
	"sink.parquet.max_payload_bytes": {"1KiB", "64MiB"},
	"sink.parquet.compression":       {"fastest", "best"},
	"sink.postgres.dsn":              {"postgres://a@h/db", "host=h user=b"},
	"sink.postgres.table":            {"events", "ingest.events"},
	"sink.postgres.payload_type":     {"jsonb", "jsonb"},
	"sink.postgres.batch_records":    {"1", "65536"},
	"sink.postgres.create_table":     {"false", "false"},
	"sink.postgres.timeout":          {"1s", "5m"},
	"sink.mysql.dsn":                 {"root@tcp(h:3306)/db", "u:p@tcp(h:3306)/x"},
	"sink.mysql.table":               {"events", "db.events"},
	"sink.mysql.payload_type":        {"json", "json"},
	"sink.mysql.batch_records":       {"1", "65536"},
	"sink.mysql.timeout":             {"1s", "5m"},
	"sink.postgres.metadata_columns": {"true", "true"},
	"sink.postgres.insert_method":    {"unnest", "unnest"},
	"sink.mysql.metadata_columns":    {"true", "true"},
	"sink.kafka.brokers":             {"k1:9092", "k1:9092,k2:9092"},
	"sink.kafka.topic":               {"events", "orders"},
	"sink.kafka.client_id":           {"weir-a", "weir-b"},
	"sink.kafka.delivery_timeout":    {"1s", "5m"},
	"sink.kafka.batch_records":       {"1", "65536"},
	"sink.kafka.max_message_bytes":   {"1KiB", "64MiB"},
	"sink.kafka.compression":         {"zstd", "lz4"},
	"sink.flight.endpoint":           {"grpc://127.0.0.1:8815", "grpc+tls://flight.example:443"},
	"sink.flight.path":               {"weir", "weir,events"},
	"sink.flight.batch_records":      {"1", "65536"},
	"sink.flight.max_message_bytes":  {"256KiB", "256MiB"},
	"sink.flight.commit_timeout":     {"1s", "1h"},
	"sink.flight.compression":        {"zstd", "lz4"},
	"sink.flight.columns":            {"arrow", "generic"},
	"sink.flight.json_schema_file":   {"/etc/weir/orders.schema.json", "/etc/weir/orders-2.schema.json"},
	"sink.flight.token_file":         {"/etc/weir/flight-a.token", "/etc/weir/flight-b.token"},
	"sink.flight.token_env":          {"FLIGHT_TOKEN", "WEIR_FLIGHT_TOKEN_2"},
	"sink.flight.tls_ca_file":        {"/etc/weir/tls/flight-ca.crt", "/etc/weir/tls/flight-ca2.crt"},
	"sink.flight.tls_cert_file":      {"/etc/weir/tls/flight.crt", "/etc/weir/tls/flight2.crt"},
	"sink.flight.tls_key_file":       {"/etc/weir/tls/flight.key", "/etc/weir/tls/flight2.key"},
	"sink.flight.tls_server_name":    {"flight.example", "flight2.example"},
	"metrics_bind":                   {"0.0.0.0", "metrics.internal"},
	"metrics_port":                   {"0", "19185"},
	"metrics_tls":                    {"true", "false"},
	"metrics_allow_unauthenticated":  {"true", "false"},
	"live_stall_timeout":             {"30s", "5m"},
	"memory_budget":                  {"64MiB", "1GiB"},
	"record_size_estimate":           {"512B", "4KiB"},
	"flow.admission":                 {"false", "true"},
	"flow.admission_wait":            {"50ms", "1s"},
	"flow.retry_after":               {"20ms", "2s"},
	"flow.warmup_percent":            {"50", "100"},
	"flow.warmup_acks":               {"10", "20"},
	"flow.warmup_timeout":            {"1s", "2s"},
	"flow.degraded_memory_percent":   {"60", "70"},
	"flow.critical_memory_percent":   {"95", "99"},
	"flow.degraded_queue_percent":    {"50", "60"},
	"flow.critical_queue_percent":    {"80", "85"},
	"flow.idle_queue_percent":        {"2", "10"},
	"flow.failures":                  {"0", "5"},
	"flow.critical_hold":             {"1s", "2s"},
	"flow.recovery_hold":             {"0s", "10s"},
	"flow.recovery_time":             {"0s", "20s"},
	"flow.sample_interval":           {"100ms", "1s"},
	"flow.stuck_memory_percent":      {"30", "90"},
	"flow.stuck_warn_after":          {"1s", "2s"},
	"flow.stuck_fail_after":          {"3m", "4m"},
	"flow.stuck_exit_after":          {"5s", "6s"},
	"flow.stuck_clear_after":         {"7s", "8s"},
	"flow.profile":                   {"quorum", "default"},
	"flow.quorum_budget_percent":     {"25", "75"},
	"flow.quorum_batch_percent":      {"30", "40"},
	"dq_audit.dir":                   {"/tmp/dq-a", "/tmp/dq-b"},
	"dq_audit.postgres_url":          {"postgres://a@127.0.0.1/x", "postgres://b@127.0.0.1/y"},
	"dq_audit.table":                 {"dq_a", "public.dq_b"},
	"dq_audit.window":                {"30s", "5m"},
	"dq_audit.sample":                {"4", "32"},
	"coordination.mode":              {"1", "3"},
	"coordination.node":              {"weir-0", "weir-1"},
	"coordination.data_dir":          {"/tmp/coord-a", "/tmp/coord-b"},
	"coordination.peer_listen":       {"127.0.0.1:12380", "127.0.0.1:22380"},
	"coordination.client_listen":     {"127.0.0.1:12379", "127.0.0.1:22379"},
	"coordination.join":              {"127.0.0.1:2379", "127.0.0.1:2379,127.0.0.2:2379"},
	"coordination.endpoints":         {"10.0.0.1:2379", "10.0.0.1:2379,10.0.0.2:2379"},
	"coordination.backup_url":        {"file:///tmp/bk", "s3://bucket/weir?region=us-east-1"},
	"coordination.backup_interval":   {"1m", "10m"},
	"coordination.backup_keep":       {"2", "9"},
	"coordination.backup_key_file":   {"/etc/weir/backup.key", "/run/secrets/backup-key"},
	"coordination.backup_key":        {"0000000000000000000000000000000000000000000000000000000000000000", "1111111111111111111111111111111111111111111111111111111111111111"},
	"coordination.ready_timeout":     {"5s", "1m"},
	"coordination.handoff_grace":     {"3s", "40s"},
	"coordination.session_ttl":       {"4s", "20s"},
	"coordination.recovery_leases":   {"false", "false"}, // true needs coordination.mode: TestCoordinationValidation
	"coordination.lease_ttl":         {"3s", "30s"},
	"coordination.claim_positions":   {"4096", "1048576"},
	"log_level":                      {"debug", "error"},
	"log_format":                     {"json", "text"},
	"sink.durable":                   {"true", "true"},
	"gate":                           {"buffer", "buffer"}, // "raw" needs [[source]] tables (TOML only): TestGateThroughTheLayers
	"role":                           {"ingest", "both"},   // "recovery" needs [[secondary]] tables (TOML only): TestRecoveryNodeConfig,
	"recovery_mode":                  {"skip-quarantine", "skip-quarantine"},
	"recovery_window_records":        {"1", "100000"},
	"recovery_window_time":           {"1s", "1m"},
	"coverage_flush_interval":        {"10ms", "5s"},
	"http.enabled":                   {"false", "true"},
	"http.listen":                    {"127.0.0.1:19186", "[::1]:9443"},
	"http.stream":                    {"webhooks", "http.orders"},
	"http.token_file":                {"/etc/weir/http-tokens", "tokens"},
	"http.allow_unauthenticated":     {"true", "false"},
	"http.tls_cert_file":             {"/etc/weir/tls/http-a.crt", "tls/http-b.crt"},
	"http.tls_key_file":              {"/etc/weir/tls/http-a.key", "tls/http-b.key"},
	"http.tls_client_ca_file":        {"/etc/weir/tls/ca-a.crt", "tls/ca-b.crt"},
	"http.tls_allowed_identities":    {"spiffe://weir.test/web", "web.weir.test, ops@weir.test"},
	"http.h2c":                       {"true", "false"},
	"http.max_body_bytes":            {"1MiB", "64MiB"},
	"http.max_decoded_bytes":         {"2MiB", "128MiB"},
	"http.max_records":               {"1", "50000"},
	"http.max_concurrent":            {"8", "4096"},
	"http.max_connections":           {"16", "10000"},
	"http.stream_inflight_bytes":     {"1MiB", "64MiB"},
	"http.max_header_bytes":          {"8KiB", "1MiB"},
	"http.read_header_timeout":       {"1s", "10s"},
	"http.read_timeout":              {"5s", "2m"},
	"http.write_timeout":             {"10s", "5m"},
	"http.idle_timeout":              {"30s", "10m"},
}

// httpTLSCompanions are the HTTP door's TLS files, set all together.
var httpTLSCompanions = map[string]string{
	"http.tls_cert_file":      "/etc/weir/tls/http.crt",
	"http.tls_key_file":       "/etc/weir/tls/http.key",
	"http.tls_client_ca_file": "/etc/weir/tls/http-ca.crt",
}

// tlsCompanions are settings that must accompany one another: TCP is
// served only with its TLS files, and TLS settings need TCP.
var tlsCompanions = map[string]string{
	"tcp_listen":         "127.0.0.1:9443",
	"tls_cert_file":      "/etc/weir/tls/server.crt",
	"tls_key_file":       "/etc/weir/tls/server.key",
	"tls_client_ca_file": "/etc/weir/tls/client-ca.crt",
}

// companionFlags are the flags a sample of key needs to be valid.
func companionFlags(key string) []string {
	if key == "sink.type" {
		return []string{"--sink-postgres-dsn=postgres://a@h/db", "--sink-mysql-dsn=root@tcp(h:3306)/db"}
	}
	if key == "metrics_bind" { // beyond loopback, the admin routes need a word
		return []string{"--metrics-allow-unauthenticated=true"}
	}
	companions := tlsCompanions
	if _, ok := httpTLSCompanions[key]; ok || key == "http.tls_allowed_identities" || key == "metrics_tls" {
		companions = httpTLSCompanions
	} else if _, ok := tlsCompanions[key]; !ok && key != "tls_allowed_identities" {
		return nil
	}
	var out []string
	for k, v := range companions {
		if k != key {
			out = append(out, "--"+knobByKey(knobs(), k).Flag()+"="+v)
		}
	}
	return out
}

// tomlFor renders one knob setting as a TOML document.
func tomlFor(k *knob, v string) string {
	lit := fmt.Sprintf("%q", v)
	switch k.Kind {
	case setting.KindInt:
		lit = v
	case setting.KindList:
		lit = "[" + strings.Join(setting.QuoteAll(setting.SplitList(v)), ", ") + "]"
	}
	parts := strings.Split(k.Key, ".")
	if len(parts) == 1 {
		return fmt.Sprintf("%s = %s\n", k.Key, lit)
	}
	return fmt.Sprintf("[%s]\n%s = %s\n", strings.Join(parts[:len(parts)-1], "."), parts[len(parts)-1], lit)
}

// TestEveryKnobThroughEveryLayer sets each knob in each layer and checks
// the mapping and the precedence: flag over env over file over default.
func TestEveryKnobThroughEveryLayer(t *testing.T) {
	ks := knobs()
	if len(samples) != len(ks) {
		t.Errorf("samples has %d entries, table has %d knobs", len(samples), len(ks))
	}
	for i := range ks {
		k := &ks[i]
		s, ok := samples[k.Key]
		if !ok {
			t.Errorf("no sample for %s", k.Key)
			continue
		}
		t.Run(k.Key, func(t *testing.T) {
			a, b := s[0], s[1]
			extra := companionFlags(k.Key)
			withExtra := func(args []string) []string { return append(args, extra...) }
			// "--flag value" for every kind but booleans, which (like Go's
			// own boolean flags) take "--flag" or "--flag=value".
			argsA := []string{"--" + k.Flag(), a}
			if k.Kind == kindBool {
				argsA = []string{"--" + k.Flag() + "=" + a}
			}
			flagA := mustLoad(t, withExtra(argsA), nil)
			flagB := mustLoad(t, withExtra([]string{"--" + k.Flag() + "=" + b}), nil)
			// With its companions but without itself, a TLS knob is
			// incomplete (an error), so it cannot equal its default.
			def, defErr := load(withExtra(nil), nil, nil, wd)
			if a != b && reflect.DeepEqual(flagA, flagB) {
				t.Fatalf("samples %q and %q give the same config", a, b)
			}
			if defErr == nil && reflect.DeepEqual(flagA, def) && a != b {
				t.Fatalf("sample %q is the default", a)
			}
			fileA := writeFile(t, tomlFor(k, a))
			fileB := writeFile(t, tomlFor(k, b))
			envA := k.Env() + "=" + a
			envB := k.Env() + "=" + b
			cases := []struct {
				name string
				args []string
				env  []string
				want *Config
			}{
				{"file", []string{"--config", fileA}, nil, flagA},
				{"env", nil, []string{envA}, flagA},
				{"env names file", nil, []string{ConfigEnv + "=" + fileA}, flagA},
				{"env over file", []string{"--config", fileA}, []string{envB}, flagB},
				{"flag over env", []string{"--" + k.Flag() + "=" + b}, []string{envA}, flagB},
				{"flag over env over file", []string{"--config", fileA, "--" + k.Flag() + "=" + b}, []string{envA}, flagB},
				{"flag config over env config", []string{"--config", fileB}, []string{ConfigEnv + "=" + fileA}, flagB},
				{"empty env is unset", []string{"--config", fileA}, []string{k.Env() + "="}, flagA},
				{"last env wins", nil, []string{envB, envA}, flagA},
			}
			for _, tc := range cases {
				got, err := load(withExtra(tc.args), tc.env, nil, wd)
				if err != nil {
					t.Errorf("%s: %v", tc.name, err)
					continue
				}
				got.File = "" // where it came from, not what it says
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
				}
			}
		})
	}
}

// TestPrecedenceMixed spreads settings over all four layers at once.
func TestPrecedenceMixed(t *testing.T) {
	file := writeFile(t, `
shards = 2
idle_timeout = "1m"
queue_timeout = "3s"
[sink.file]
max_bytes = 8192
max_age = "10s"
`)
	c := mustLoad(t,
		[]string{"--config=" + file, "--shards", "16", "--sink-file-max-age=5s"},
		[]string{"WEIR_SHARDS=8", "WEIR_IDLE_TIMEOUT=2m", "WEIR_SINK_FILE_MAX_AGE=7s", "PATH=/bin"})
	checks := []struct {
		name      string
		got, want any
	}{
		{"shards: flag over env over file", c.Shards, 16},
		{"idle_timeout: env over file", c.IdleTimeout, 2 * time.Minute},
		{"queue_timeout: file over default", c.QueueTimeout, 3 * time.Second},
		{"sink.file.max_bytes: file", fileSink(c.Sink).MaxBytes, int64(8192)},
		{"sink.file.max_age: flag", fileSink(c.Sink).MaxAge, 5 * time.Second},
		{"write_timeout: default", c.WriteTimeout, DefaultWriteTimeout},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: got %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestDerivedPathsFollowDataDir(t *testing.T) {
	c := mustLoad(t, nil, []string{"WEIR_DATA_DIR=/var/lib/weir"})
	if c.SocketPath != "/var/lib/weir/weir.sock" || c.WABDir != "/var/lib/weir/wab" || fileSink(c.Sink).Dir != "/var/lib/weir/out" {
		t.Errorf("derived paths: %q %q %q", c.SocketPath, c.WABDir, fileSink(c.Sink).Dir)
	}
	c = mustLoad(t, []string{"--data-dir=/d", "--wab-dir=/elsewhere/wab"}, nil)
	if c.WABDir != "/elsewhere/wab" || c.SocketPath != "/d/weir.sock" {
		t.Errorf("explicit wab_dir: %q %q", c.WABDir, c.SocketPath)
	}
}

func TestPreallocateFollowsSmallSegments(t *testing.T) {
	c := mustLoad(t, []string{"--segment-max-bytes=16MiB"}, nil)
	if c.PreallocateBytes != 16<<20 {
		t.Errorf("PreallocateBytes = %d, want 16MiB when unset and segments are smaller", c.PreallocateBytes)
	}
}

func TestValidationErrors(t *testing.T) {
	long := "/" + strings.Repeat("s", 110)
	cases := []struct {
		name string
		args []string
		env  []string
		want []string // substrings, each must appear
	}{
		{"shards negative", []string{"--shards=-1"}, nil,
			[]string{"config: shards = -1: must be between 0 and 256 (flag --shards, env WEIR_SHARDS)"}},
		{"shards high", nil, []string{"WEIR_SHARDS=257"},
			[]string{"config: shards = 257: must be between 0 and 256"}},
		{"max_connections", []string{"--max-connections=0"}, nil, []string{"max_connections = 0: must be between 1 and 65536"}},
		{"frame too small", []string{"--max-frame-bytes=63"}, nil,
			[]string{"config: max_frame_bytes = 63: must be between 64 and 256MiB (flag --max-frame-bytes, env WEIR_MAX_FRAME_BYTES)"}},
		{"frame too big", []string{"--max-frame-bytes=257MiB"}, nil, []string{"max_frame_bytes = 257MiB: must be between 64 and 256MiB"}},
		{"frame_read_timeout", []string{"--frame-read-timeout=0s"}, nil, []string{"frame_read_timeout = 0s: must be between 1ms and 1h"}},
		{"idle_timeout", []string{"--idle-timeout=25h"}, nil, []string{"idle_timeout = 25h: must be between 1s and 24h"}},
		{"write_timeout negative", []string{"--write-timeout=-1s"}, nil, []string{"write_timeout = -1s: must be between 1ms and 1h"}},
		{"conn_max_inflight", []string{"--conn-max-inflight=0"}, nil, []string{"conn_max_inflight = 0: must be between"}},
		{"queue_capacity", []string{"--queue-capacity=0"}, nil, []string{"queue_capacity = 0: must be between"}},
		{"conn_max_inflight_bytes", []string{"--conn-max-inflight-bytes=1KiB"}, nil, []string{"conn_max_inflight_bytes = 1KiB: must be between 64KiB and 1024GiB"}},
		{"queue_capacity_bytes", []string{"--queue-capacity-bytes=0"}, nil, []string{"queue_capacity_bytes = 0: must be between 64KiB and 1024GiB"}},
		{"budget below four frames", []string{"--memory-budget=15MiB"}, nil,
			[]string{"memory_budget = 15MiB: must be at least 4 × max_frame_bytes (16MiB) (flag --memory-budget, env WEIR_MEMORY_BUDGET)"}},
		{"quorum budget below four frames", []string{"--memory-budget=20MiB", "--flow-profile=quorum"}, nil,
			[]string{"memory_budget = 20MiB: must be at least 4 × max_frame_bytes (16MiB), after flow.quorum_budget_percent"}},
		{"queue_timeout", []string{"--queue-timeout=2m"}, nil, []string{"queue_timeout = 2m: must be between 1ms and 1m"}},
		{"shutdown_timeout", []string{"--shutdown-timeout=1ms"}, nil, []string{"shutdown_timeout = 1ms: must be between 100ms and 1h"}},
		{"batch_max_records", []string{"--batch-max-records=0"}, nil, []string{"batch_max_records = 0: must be between 1 and 1048576"}},
		{"batch_deadline", []string{"--batch-deadline=11s"}, nil, []string{"batch_deadline = 11s: must be between 0s and 10s"}},
		{"segment_max_bytes small", []string{"--segment-max-bytes=1000"}, nil, []string{"segment_max_bytes = 1000: must be between 1MiB and 4GiB"}},
		{"segment_max_bytes big", []string{"--segment-max-bytes=5GiB"}, nil, []string{"segment_max_bytes = 5GiB: must be between 1MiB and 4GiB"}},
		{"segment_max_age", []string{"--segment-max-age=0s"}, nil, []string{"segment_max_age = 0s: must be between"}},
		{"preallocate over segment", []string{"--segment-max-bytes=8MiB", "--segment-preallocate-bytes=16MiB"}, nil,
			[]string{"segment_preallocate_bytes = 16MiB: must not exceed segment_max_bytes (8MiB)"}},
		{"retry base", []string{"--drain-retry-base=0s"}, nil, []string{"drain_retry_base = 0s: must be between 1ms and 1m"}},
		{"dead letter cap", []string{"--dead-letter-max-bytes=1KiB"}, nil, []string{"dead_letter_max_bytes = 1KiB: must be between 1MiB and 1024GiB"}},
		{"max retries", []string{"--drain-max-retries=-1"}, nil, []string{"drain_max_retries = -1: must be between 0 and 1000"}},
		{"retry max below base", []string{"--drain-retry-base=1s", "--drain-retry-max=500ms"}, nil,
			[]string{"drain_retry_max = 500ms: must be at least drain_retry_base (1s) (flag --drain-retry-max, env WEIR_DRAIN_RETRY_MAX)"}},
		{"postgres without dsn", []string{"--sink-type=postgres"}, nil,
			[]string{`config: sink.postgres.dsn = "": is required because sink.type is "postgres" (flag --sink-postgres-dsn, env WEIR_SINK_POSTGRES_DSN)`}},
		{"mysql without dsn", []string{"--sink-type=mysql"}, nil,
			[]string{`config: sink.mysql.dsn = "": is required because sink.type is "mysql" (flag --sink-mysql-dsn, env WEIR_SINK_MYSQL_DSN)`}},
		{"dsn never echoed", []string{"--sink-type=postgres", "--sink-postgres-dsn=postgres://u:secret@h/db", "--sink-postgres-timeout=1ms"}, nil,
			[]string{"sink.postgres.timeout = 1ms"}},
		{"sink type", []string{"--sink-type=redis"}, nil,
			[]string{`config: sink.type = "redis": must be one of "file", "parquet", "postgres", "mysql", "kafka", "flight" (flag --sink-type, env WEIR_SINK_TYPE)`}},
		{"kafka without brokers", []string{"--sink-type=kafka", "--sink-kafka-topic=t"}, nil,
			[]string{`config: sink.kafka.brokers = "": is required because sink.type is "kafka" (flag --sink-kafka-brokers, env WEIR_SINK_KAFKA_BROKERS)`}},
		{"kafka broker without port", []string{"--sink-type=kafka", "--sink-kafka-topic=t", "--sink-kafka-brokers=k1:9092,k2"}, nil,
			[]string{`sink.kafka.brokers = ["k1:9092", "k2"]: broker "k2": want host:port`}},
		{"file max_bytes", []string{"--sink-file-max-bytes=1"}, nil, []string{"sink.file.max_bytes = 1: must be between 4KiB and 64GiB (flag --sink-file-max-bytes, env WEIR_SINK_FILE_MAX_BYTES)"}},
		{"file max_age", []string{"--sink-file-max-age=1ms"}, nil, []string{"sink.file.max_age = 1ms: must be between 10ms and 24h"}},
		{"file batch", []string{"--sink-file-batch-records=0"}, nil, []string{"sink.file.batch_records = 0: must be between"}},
		{"log level", []string{"--log-level=trace"}, nil, []string{`log_level = "trace": must be one of "debug", "info", "warn", "error"`}},
		{"log format", []string{"--log-format=xml"}, nil, []string{`log_format = "xml": must be one of "text", "json"`}},
		{"metrics_port", []string{"--metrics-port=65536"}, nil,
			[]string{"config: metrics_port = 65536: must be between 0 and 65535 (flag --metrics-port, env WEIR_METRICS_PORT)"}},
		{"metrics_bind with port", []string{"--metrics-bind=127.0.0.1:9185"}, nil,
			[]string{`metrics_bind = "127.0.0.1:9185": must be an IP address or a host name, without a port`}},
		{"metrics_bind empty", nil, []string{"WEIR_METRICS_BIND= "}, []string{`metrics_bind = " ": must be an IP address or a host name`}},
		{"live_stall_timeout", []string{"--live-stall-timeout=10ms"}, nil, []string{"live_stall_timeout = 10ms: must be between 1s and 1h"}},
		{"sink dir equals wab", []string{"--wab-dir=/x", "--sink-file-dir=/x/"}, nil, []string{`sink.file.dir = "/x": must differ from wab_dir`}},
		{"all errors reported", []string{"--shards=-1", "--log-format=xml"}, []string{"WEIR_QUEUE_TIMEOUT=0s"},
			[]string{"shards = -1", "log_format = \"xml\"", "queue_timeout = 0s"}},
		// TCP with mutual TLS.
		{"tcp without tls", []string{"--tcp-listen=:9443"}, nil, []string{
			`config: tls_cert_file = "": is required because tcp_listen is set (":9443"): TCP is served only with mutual TLS (flag --tls-cert-file, env WEIR_TLS_CERT_FILE)`,
			`config: tls_key_file = "": is required because tcp_listen is set`,
			`config: tls_client_ca_file = "": is required because tcp_listen is set`}},
		{"tcp missing ca", []string{"--tcp-listen=:9443", "--tls-cert-file=/c", "--tls-key-file=/k"}, nil,
			[]string{`tls_client_ca_file = "": is required because tcp_listen is set`}},
		{"tls without tcp", []string{"--tls-cert-file=/c", "--tls-allowed-identities=a.example"}, nil, []string{
			`config: tls_cert_file = "/c": has no effect while tcp_listen is empty`,
			`config: tls_allowed_identities = ["a.example"]: has no effect while tcp_listen is empty`}},
		{"tcp bad address", []string{"--tcp-listen=9443"}, nil, []string{`config: tcp_listen = "9443": must be host:port`}},
		{"tcp bad port", nil, []string{"WEIR_TCP_LISTEN=localhost:https"}, []string{`tcp_listen = "localhost:https": port "https" must be a number`}},
		{"tcp port too big", []string{"--tcp-listen=:70000"}, nil, []string{`port "70000" must be a number from 0 to 65535`}},
		{"tls path dotdot", []string{"--tcp-listen=:1", "--tls-cert-file=../c", "--tls-key-file=/k", "--tls-client-ca-file=/ca"}, nil,
			[]string{`tls_cert_file = "../c": must not contain a ".." element`}},
		{"bad identities", []string{"--tcp-listen=:1", "--tls-cert-file=/c", "--tls-key-file=/k", "--tls-client-ca-file=/ca",
			"--tls-allowed-identities=*.weir.test,ok.weir.test,host:1"}, nil,
			[]string{`tls_allowed_identities = ["*.weir.test", "ok.weir.test", "host:1"]: identity "*.weir.test": wildcards are not supported`,
				`identity "host:1": a URI needs a scheme`}},
		{"reload interval", []string{"--tls-reload-interval=10ms"}, nil, []string{"tls_reload_interval = 10ms: must be between 1s and 24h"}},
		// Paths.
		{"dotdot relative", []string{"--data-dir=../up"}, nil,
			[]string{`config: data_dir = "../up": must not contain a ".." element (flag --data-dir, env WEIR_DATA_DIR)`}},
		{"dotdot escaping", []string{"--sink-file-dir=a/../../b"}, nil, []string{`sink.file.dir = "a/../../b": must not contain a ".." element`}},
		{"nul", nil, []string{"WEIR_SOCKET_PATH=/run/a\x00b"}, []string{`socket_path = "/run/a\x00b": contains a NUL byte`}},
		{"empty path", []string{"--data-dir="}, nil, []string{"data_dir: empty path"}},
		{"socket too long", []string{"--socket-path=" + long}, nil,
			[]string{"socket_path = \"" + long + "\": is 111 bytes long; a Unix socket path may be at most 107 bytes"}},
		{"derived socket too long", []string{"--data-dir=" + long[:100]}, nil,
			[]string{"socket_path = \"" + long[:100] + "/weir.sock\": is 110 bytes long"}},
		// Parse errors name their source.
		{"bad flag value", []string{"--idle-timeout=5x"}, nil,
			[]string{`config: command line: invalid value "5x" for flag -idle-timeout: idle_timeout: "5x" is not a duration`}},
		{"bad env duration", nil, []string{"WEIR_IDLE_TIMEOUT=soon"},
			[]string{`config: env WEIR_IDLE_TIMEOUT: idle_timeout: "soon" is not a duration`}},
		{"bad env size", nil, []string{"WEIR_SEGMENT_MAX_BYTES=12MB"},
			[]string{`config: env WEIR_SEGMENT_MAX_BYTES: segment_max_bytes: "12MB" is not a size`}},
		{"bad env int", nil, []string{"WEIR_SHARDS=four"}, []string{`config: env WEIR_SHARDS: shards: "four" is not an integer`}},
		{"unknown flag", []string{"--shard=3"}, nil, []string{"config: command line: flag provided but not defined: -shard"}},
		{"stray argument", []string{"extra"}, nil, []string{`unexpected argument "extra"`}},
		{"missing named file", []string{"--config=/nonexistent/weir.toml"}, nil,
			[]string{"config: file /nonexistent/weir.toml: open /nonexistent/weir.toml: no such file or directory"}},
		{"missing file via env", nil, []string{"WEIR_CONFIG=/nonexistent/w.toml"}, []string{"config: file /nonexistent/w.toml"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(tc.args, tc.env, nil, wd)
			if err == nil {
				t.Fatalf("no error; config %+v", c)
			}
			if c != nil {
				t.Errorf("config returned with error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n  %v\nlacks\n  %s", err, w)
				}
			}
		})
	}
}

func TestPathsResolved(t *testing.T) {
	c := mustLoad(t, []string{
		"--data-dir=state//x/./y/",
		"--wab-dir=/a/b/../c",
		"--sink-file-dir=out/../files",
	}, nil)
	if fileSink(c.Sink).Dir != "/srv/weir/files" {
		t.Errorf("Sink.File.Dir = %q", fileSink(c.Sink).Dir)
	}
	// Cleaning a rooted path drops the leading "..": nothing is left to escape.
	c = mustLoad(t, []string{
		"--data-dir=state//x/./y/",
		"--wab-dir=/../a/b/../c",
		"--socket-path=/" + strings.Repeat("s", 106),
	}, nil)
	if c.DataDir != "/srv/weir/state/x/y" {
		t.Errorf("DataDir = %q", c.DataDir)
	}
	if c.WABDir != "/a/c" {
		t.Errorf("WABDir = %q", c.WABDir)
	}
	if len(c.SocketPath) != MaxSocketPathBytes {
		t.Errorf("socket path of %d bytes", len(c.SocketPath))
	}
}

func TestFileErrors(t *testing.T) {
	cases := []struct {
		name, body string
		want       []string
	}{
		{"bad duration", "shards = 2\nidle_timeout = \"5 minutes\"\n",
			[]string{`:2: idle_timeout: "5 minutes" is not a duration`}},
		{"integer duration", "queue_timeout = 5\n", []string{`:1: queue_timeout: want a duration string`}},
		{"wrong type", "shards = \"many\"\n", []string{`:1: shards: "many" is not an integer`}},
		{"bool for int", "shards = true\n", []string{`:1: shards: want an integer, got the boolean true`}},
		{"nested bad size", "[sink.file]\nmax_bytes = \"lots\"\n", []string{`:2: sink.file.max_bytes: "lots" is not a size`}},
		{"syntax", "shards = 4\nidle_timeout = \n", []string{`:2:`}},
		{"two errors", "shards = \"x\"\nlog_level = 3\n", []string{`:1: shards:`, `:2: log_level: want a string`}},
		{"valid but out of range", "shards = 1000\n", []string{"config: shards = 1000: must be between 0 and 256"}},
		{"list of numbers", "tls_allowed_identities = [\"a.example\", 3]\n", []string{`:1: tls_allowed_identities: want an array of strings, element 2 is the integer 3`}},
		{"list as table", "[tls_allowed_identities]\nx = 1\n", []string{`tls_allowed_identities: want an array of strings, got a table`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.body)
			_, err := load([]string{"--config", path}, nil, nil, wd)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n  %v\nlacks\n  %s", err, w)
				}
			}
			if tc.name != "valid but out of range" && !strings.Contains(err.Error(), "config: file "+path) {
				t.Errorf("error does not name the file: %v", err)
			}
		})
	}
}

func TestUnknownKeysWarn(t *testing.T) {
	path := writeFile(t, `
shards = 2
shrads = 3
[sink]
typo = "x"
[sink.file]
max_bytes = "1MiB"
maxage = "1s"
[metrics]
port = 9185
`)
	h := &capture{}
	c, err := load([]string{"--config", path}, []string{"WEIR_SHRADS=1", "WEIR_CONFIG_X=1", "HOME=/root"}, slog.New(h), wd)
	if err != nil {
		t.Fatal(err)
	}
	if c.Shards != 2 || fileSink(c.Sink).MaxBytes != 1<<20 {
		t.Errorf("known keys not applied: %+v", c)
	}
	got := strings.Join(h.warnings(), "\n")
	for _, key := range []string{"key=shrads", "key=sink.typo", "key=sink.file.maxage", "key=metrics", "key=metrics.port", "env=WEIR_SHRADS", "env=WEIR_CONFIG_X"} {
		if !strings.Contains(got, key) {
			t.Errorf("no warning for %s in:\n%s", key, got)
		}
	}
	for _, key := range []string{"key=shards", "key=sink.file.max_bytes", "key=sink ", "HOME"} {
		if strings.Contains(got+" ", key) {
			t.Errorf("unexpected warning %s in:\n%s", key, got)
		}
	}
}

func TestExampleFile(t *testing.T) {
	path, err := filepath.Abs("../../examples/weir.toml")
	if err != nil {
		t.Fatal(err)
	}
	h := &capture{}
	c, err := load([]string{"--config", path}, nil, slog.New(h), wd)
	if err != nil {
		t.Fatalf("examples/weir.toml: %v", err)
	}
	if w := h.warnings(); len(w) > 0 {
		t.Errorf("warnings: %q", w)
	}
	if c.File != path {
		t.Errorf("File %q, want %q", c.File, path)
	}
	c.File = ""
	// The example sets every key to its default.
	if def := mustLoad(t, nil, nil); !reflect.DeepEqual(c, def) {
		t.Errorf("example differs from defaults:\n got %+v\nwant %+v", c, def)
	}
	var doc map[string]any
	md, err := toml.DecodeFile(path, &doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range knobs() {
		if !md.IsDefined(strings.Split(k.Key, ".")...) {
			t.Errorf("examples/weir.toml does not set %s", k.Key)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "-help"} {
		_, err := load([]string{"--shards=3", arg}, nil, nil, wd)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s: err = %v, want flag.ErrHelp", arg, err)
		}
	}
	u := Usage()
	if !strings.Contains(u, "--config FILE") || !strings.Contains(u, ConfigEnv) {
		t.Errorf("usage lacks --config:\n%s", u)
	}
	for _, k := range knobs() {
		for _, s := range []string{"--" + k.Flag() + " ", "default " + k.Default + ";", k.Env()} {
			if !strings.Contains(u, s) {
				t.Errorf("usage lacks %q", s)
			}
		}
	}
}

func TestFlagEnvMapping(t *testing.T) {
	k := knobByKey(knobs(), "sink.file.max_bytes")
	if k.Flag() != "sink-file-max-bytes" || k.Env() != "WEIR_SINK_FILE_MAX_BYTES" {
		t.Errorf("mapping: %s %s", k.Flag(), k.Env())
	}
	k = knobByKey(knobs(), "socket_path")
	if k.Flag() != "socket-path" || k.Env() != "WEIR_SOCKET_PATH" {
		t.Errorf("mapping: %s %s", k.Flag(), k.Env())
	}
}

func TestLevel(t *testing.T) {
	for s, want := range map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError} {
		c := mustLoad(t, []string{"--log-level", s}, nil)
		if c.Level() != want {
			t.Errorf("%s: %v", s, c.Level())
		}
	}
}

func TestTLSSettings(t *testing.T) {
	file := writeFile(t, `
tcp_listen = "[::1]:9443"
tls_cert_file = "tls/server.crt"
tls_key_file = "/etc/weir/server.key"
tls_client_ca_file = "tls/../tls/ca.crt"
tls_allowed_identities = ["spiffe://weir.test/producer", " ingest.weir.test ", ""]
tls_reload_interval = "1m"
`)
	c := mustLoad(t, []string{"--config", file}, nil)
	want := []any{"[::1]:9443", "/srv/weir/tls/server.crt", "/etc/weir/server.key", "/srv/weir/tls/ca.crt", time.Minute}
	got := []any{c.TCPListen, c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile, c.TLSReloadInterval}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if ids := []string{"spiffe://weir.test/producer", "ingest.weir.test"}; !reflect.DeepEqual(c.TLSAllowedIdentities, ids) {
		t.Errorf("identities %q, want %q", c.TLSAllowedIdentities, ids)
	}
	// A flag replaces the file's list; an empty one clears it.
	c = mustLoad(t, []string{"--config", file, "--tls-allowed-identities", "a.weir.test,b.weir.test"}, nil)
	if ids := []string{"a.weir.test", "b.weir.test"}; !reflect.DeepEqual(c.TLSAllowedIdentities, ids) {
		t.Errorf("flag identities %q, want %q", c.TLSAllowedIdentities, ids)
	}
	c = mustLoad(t, []string{"--config", file, "--tls-allowed-identities="}, nil)
	if c.TLSAllowedIdentities != nil {
		t.Errorf("empty flag left identities %q", c.TLSAllowedIdentities)
	}
	// An empty tcp_listen flag turns TCP off over the file (and then the
	// file's TLS settings are reported as having no effect).
	if _, err := load([]string{"--config", file, "--tcp-listen="}, nil, nil, wd); err == nil ||
		!strings.Contains(err.Error(), "has no effect while tcp_listen is empty") {
		t.Errorf("err = %v", err)
	}
}

// TestCoordinationValidation: coordination.mode takes 0, 1, 3, 5 or 7;
// 2 and the other even sizes are refused with the reason; features that
// need coordination refuse to start without it.
func TestCoordinationValidation(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" is valid
	}{
		{[]string{"--coordination-mode=0"}, ""},
		{[]string{"--coordination-mode=1"}, ""},
		{[]string{"--coordination-mode=3"}, ""},
		{[]string{"--coordination-mode=5"}, ""},
		{[]string{"--coordination-mode=7"}, ""},
		{[]string{"--coordination-mode=2"}, "losing either member halts every write"},
		{[]string{"--coordination-mode=4"}, "an even size adds a voter without adding failure tolerance; use 3 or 5"},
		{[]string{"--coordination-mode=6"}, "use 5 or 7"},
		{[]string{"--coordination-mode=9"}, "coordination.mode"},
		{[]string{"--coordination-mode=-1"}, "coordination.mode"},
		{[]string{"--coordination-recovery-leases=true"}, "needs coordination: set coordination.mode"},
		{[]string{"--coordination-mode=1", "--coordination-recovery-leases=true"}, ""},
		{[]string{"--coordination-mode=1", "--coordination-peer-listen=127.0.0.1:2379"}, "must differ from coordination.peer_listen"},
		{[]string{"--coordination-join=nohostport"}, "not host:port"},
		{[]string{"--coordination-backup-key-file=/k", "--coordination-backup-key=" + strings.Repeat("ab", 32)}, "not both"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			c, err := load(append([]string{"--data-dir=/srv/weir/data"}, tc.args...), nil, nil, "/")
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted; want an error containing %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
			if err == nil && c.Coordination.On() && c.Coordination.Node == "" {
				t.Fatal("coordination on with no node name: want the host name")
			}
		})
	}
}

func TestAutoShards(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, tc := range []struct{ procs, want int }{{1, 1}, {2, 2}, {3, 3}, {4, 4}, {8, MaxAutoShards}, {64, MaxAutoShards}} {
		runtime.GOMAXPROCS(tc.procs)
		if got := mustLoad(t, nil, nil).Shards; got != tc.want {
			t.Errorf("GOMAXPROCS %d: shards = 0 resolved to %d, want %d", tc.procs, got, tc.want)
		}
		if got := mustLoad(t, []string{"--shards=3"}, nil).Shards; got != 3 {
			t.Errorf("GOMAXPROCS %d: shards = 3 became %d", tc.procs, got)
		}
	}
}
