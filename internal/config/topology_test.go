package config

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/sink/pgsink"
	"github.com/weir-io/weir/internal/source/filesrc"
	"github.com/weir-io/weir/internal/source/kafkasrc"
	"github.com/weir-io/weir/internal/source/natssrc"
)

func loadTOML(t *testing.T, body string) (*Config, error, []string) {
	t.Helper()
	h := &capture{}
	c, err := load([]string{"--config", writeFile(t, body)}, nil, slog.New(h), wd)
	return c, err, h.warnings()
}

// loadClean loads body, failing the test on an error and reporting any
// warning.
func loadClean(t *testing.T, body string) *Config {
	t.Helper()
	c, err, warns := loadTOML(t, body)
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 0 {
		t.Errorf("warnings: %v", warns)
	}
	return c
}

// wantLoadError loads body and fails the test unless loading fails with
// an error holding every text of want.
func wantLoadError(t *testing.T, body string, want []string) {
	t.Helper()
	_, err, _ := loadTOML(t, body)
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
}

func TestTopologyTables(t *testing.T) {
	c := loadClean(t, `
role = "ingest"
recovery_mode = "skip-quarantine"
recovery_window_records = 100
coverage_flush_interval = "50ms"
[sink]
type = "file"

[[secondary]]
name = "pg"
type = "postgres"
queue_batches = 8
quarantine_buffer = 100
quarantine_dir = "q/pg"
quarantine_max_bytes = 1048576
start_at_end = true
[secondary.postgres]
dsn = "postgres://u@h/db"
table = "events"
batch_records = 100

[[secondary]]
name = "copy"
type = "file"
[secondary.file]
max_age = "5s"

[[source]]
name = "orders"
type = "kafka"
[source.kafka]
brokers = ["k1:9092", "k2:9092"]
topics = ["orders"]
group = "weir"
cluster = "prod"
commit_timeout = "3s"

[[source]]
name = "ev"
type = "nats"
[source.nats]
stream = "EV"
consumer = "weir"
ack_wait = "30s"

[[source]]
name = "logs"
type = "file"
[source.file]
glob = "logs/*.log"
`)
	if c.Role != "ingest" || c.RecoveryMode != "skip-quarantine" || c.RecoveryWindowRecords != 100 || c.CoverageFlushInterval != 50*time.Millisecond {
		t.Errorf("scalars: %+v", c)
	}
	if len(c.Secondaries) != 2 {
		t.Fatalf("secondaries: %+v", c.Secondaries)
	}
	pg := c.Secondaries[0]
	pgc, ok := pg.Sink.Settings().(*pgsink.Config)
	if !ok || len(pg.Sink.Kinds) != 1 {
		t.Fatalf("pg settings: %+v", pg.Sink)
	}
	if pg.Name != "pg" || pg.QueueBatches != 8 || pg.QuarantineBuffer != 100 || !pg.StartAtEnd || pg.Sink.Type != "postgres" || pgc.DSN != "postgres://u@h/db" ||
		pgc.Table != "events" || pgc.BatchRecords != 100 || pgc.Timeout != pgsink.DefaultTimeout ||
		pg.QuarantineDir != "/srv/weir/q/pg" || pg.QuarantineMaxBytes != 1<<20 {
		t.Errorf("pg: %+v %+v", pg, pgc)
	}
	cp := c.Secondaries[1]
	if cp.QueueBatches != DefaultQueueBatches || cp.QuarantineBuffer != DefaultQuarantineBuffer || cp.StartAtEnd ||
		cp.QuarantineDir != "/srv/weir/data/quarantine/copy" || cp.QuarantineMaxBytes != DefaultQuarantineMaxBytes ||
		fileSink(cp.Sink).Dir != "/srv/weir/data/secondary/copy" || fileSink(cp.Sink).MaxAge != 5*time.Second || c.SinkDir(cp.Sink) != "/srv/weir/data/secondary/copy" {
		t.Errorf("copy: %+v %+v", cp, fileSink(cp.Sink))
	}
	if len(c.Sources) != 3 {
		t.Fatalf("sources: %+v", c.Sources)
	}
	k := c.Sources[0].Settings.(*kafkasrc.Config)
	if c.Sources[0].Type != "kafka" || len(k.Brokers) != 2 || k.Group != "weir" || k.Cluster != "prod" || k.CommitTimeout != 3*time.Second ||
		k.MaxPollRecords != kafkasrc.DefaultMaxPollRecords {
		t.Errorf("kafka: %+v", k)
	}
	if n := c.Sources[1].Settings.(*natssrc.Config); n.Stream != "EV" || n.AckWait != 30*time.Second {
		t.Errorf("nats: %+v", n)
	}
	if f := c.Sources[2].Settings.(*filesrc.Config); f.Glob != "/srv/weir/logs/*.log" {
		t.Errorf("file: %+v", f)
	}
}

// TestRecoveryNodeConfig: a recovery node shares the ingest node's raw
// directory under its own data_dir.
func TestRecoveryNodeConfig(t *testing.T) {
	c := loadClean(t, `
role = "recovery"
data_dir = "/srv/weir-recovery"
[sink.file]
dir = "/srv/weir/data/out"
[[secondary]]
name = "pg"
type = "postgres"
[secondary.postgres]
dsn = "postgres://u@h/db"
`)
	if c.Role != "recovery" || fileSink(c.Sink).Dir != "/srv/weir/data/out" || c.WABDir != "/srv/weir-recovery/wab" || len(c.Secondaries) != 1 {
		t.Errorf("recovery node: %+v", c)
	}
}

// TestOwnRawConfig: a file source that is its own raw keeps its index and
// offset store under data_dir/origin/<name> unless raw_dir says otherwise.
func TestOwnRawConfig(t *testing.T) {
	c := loadClean(t, `
data_dir = "/srv/weir"
[[source]]
name = "app"
type = "file"
own_raw = true
[source.file]
glob = "/var/log/app/*.log"
[[secondary]]
name = "pg"
type = "postgres"
[secondary.postgres]
dsn = "postgres://u@h/db"
`)
	sc, ok := c.OwnRawSource()
	if !ok || sc.Name != "app" || sc.RawDir != "/srv/weir/origin/app" {
		t.Errorf("own raw source: %+v, %v", sc, ok)
	}
}

// TestRawGateConfig: gate = "raw" with a source and a Postgres primary raw.
func TestRawGateConfig(t *testing.T) {
	c := loadClean(t, `
gate = "raw"
[sink]
type = "postgres"
[sink.postgres]
dsn = "postgres://u@h/db"
[[source]]
name = "orders"
type = "kafka"
[source.kafka]
brokers = ["k:9092"]
topics = ["orders"]
group = "weir"
`)
	if c.Gate != "raw" || len(c.Sources) != 1 {
		t.Errorf("gate %q, %d sources", c.Gate, len(c.Sources))
	}
}

// TestGateThroughTheLayers: gate = "raw" needs [[source]] tables, which
// only a file can hold, so TestEveryKnobThroughEveryLayer cannot try it;
// here the file holds a source and the precedence is checked: flag over
// env over file.
func TestGateThroughTheLayers(t *testing.T) {
	file := writeFile(t, `
gate = "buffer"
[[source]]
name = "f"
type = "file"
[source.file]
glob = "/x/*"
`)
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"file", nil, nil, "buffer"},
		{"env over file", nil, []string{"WEIR_GATE=raw"}, "raw"},
		{"flag over env", []string{"--gate", "buffer"}, []string{"WEIR_GATE=raw"}, "buffer"},
		{"flag over file", []string{"--gate=raw"}, nil, "raw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustLoad(t, append([]string{"--config", file}, tc.args...), tc.env)
			if c.Gate != tc.want {
				t.Fatalf("gate %q, want %q", c.Gate, tc.want)
			}
		})
	}
}

func TestTopologyUnknownKeysWarn(t *testing.T) {
	_, err, warns := loadTOML(t, `
[[secondary]]
name = "pg"
type = "postgres"
queue_batchez = 3
[secondary.postgres]
dsn = "postgres://u@h/db"
tabel = "x"

[[source]]
name = "k"
type = "kafka"
colour = "red"
[source.kafka]
brokers = ["k:9092"]
topics = ["t"]
group = "g"
brokerz = 1
`)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(warns, "\n")
	for _, key := range []string{"key=secondary.queue_batchez", "key=secondary.postgres.tabel", "key=source.colour", "key=source.kafka.brokerz"} {
		if !strings.Contains(got, key) {
			t.Errorf("no warning for %s in:\n%s", key, got)
		}
	}
	if strings.Contains(got, "key=secondary.name") || strings.Contains(got, "key=source.kafka.group") || strings.Contains(got, "key=source ") {
		t.Errorf("known topology keys warned about:\n%s", got)
	}
}

func TestTopologyErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"secondary without name", `
[[secondary]]
type = "file"`, []string{`[[secondary]] #1: name is required: 1 – 64 bytes`}},
		{"duplicate secondary", `
[[secondary]]
name = "a"
type = "file"
[[secondary]]
name = "a"
type = "file"
[secondary.file]
dir = "/x"`, []string{`[[secondary]] "a": name = "a": is already used by [[secondary]] #1`}},
		{"secondary without type", `
[[secondary]]
name = "a"`, []string{`[[secondary]] "a": type is required`}},
		{"secondary bad type", `
[[secondary]]
name = "a"
type = "nats"`, []string{`[[secondary]] "a": type = "nats": must be one of`}},
		{"secondary kafka without topic", `
[[secondary]]
name = "a"
type = "kafka"
[secondary.kafka]
brokers = ["k1:9092"]`, []string{`[[secondary]] "a": kafka.topic is required because type is "kafka"`}},
		{"secondary dsn", `
[[secondary]]
name = "a"
type = "postgres"`, []string{`[[secondary]] "a": postgres.dsn is required because type is "postgres"`}},
		{"secondary wrong table", `
[[secondary]]
name = "a"
type = "file"
[secondary.mysql]
dsn = "x"`, []string{`[secondary.mysql] is given but type is "file"`}},
		{"secondary range", `
[[secondary]]
name = "a"
type = "postgres"
queue_batches = 0
quarantine_buffer = 0
quarantine_max_bytes = -1
[secondary.postgres]
dsn = "x"
batch_records = 0`, []string{`queue_batches = 0: must be between 1 and 65536`, `quarantine_buffer = 0: must be between 1 and 16777216`,
			`quarantine_max_bytes = -1: must be between 0`, `postgres.batch_records = 0: must be between 1 and 65536`}},
		{"secondary same dir as raw", `
[sink.file]
dir = "/d"
[[secondary]]
name = "a"
type = "file"
[secondary.file]
dir = "/d"`, []string{`file.dir = "/d": must differ from sink.file.dir (primary raw)`}},
		{"secondary name chars", `
[[secondary]]
name = "a/b"
type = "file"`, []string{`name = "a/b": may hold only letters`}},
		{"primary raw not replayable", `
[sink]
type = "mysql"
[sink.mysql]
dsn = "x"
[[secondary]]
name = "a"
type = "file"`, []string{`sink.type = "mysql": must be one of ["file" "parquet" "postgres"] when [[secondary]] sinks are configured`}},
		{"postgres raw as jsonb", `
[sink]
type = "postgres"
[sink.postgres]
dsn = "x"
payload_type = "jsonb"
[[secondary]]
name = "a"
type = "file"`, []string{`sink.postgres.payload_type = "jsonb": must be "bytea" when the [sink] is primary raw`}},
		{"raw gate without sources", `
gate = "raw"`, []string{`gate = "raw": needs [[source]] tables`}},
		{"raw gate with tcp", `
gate = "raw"
tcp_listen = "127.0.0.1:7000"
[[source]]
name = "f"
type = "file"
[source.file]
glob = "/x/*"`, []string{`tcp_listen = "127.0.0.1:7000": must be empty with gate = "raw"`}},
		{"raw gate with own raw", `
gate = "raw"
[[source]]
name = "f"
type = "file"
own_raw = true
[source.file]
glob = "/x/*"
[[secondary]]
name = "a"
type = "file"`, []string{`gate = "raw": has no meaning with own_raw`}},
		{"own raw not replayable", `
[[source]]
name = "k"
type = "kafka"
own_raw = true
[source.kafka]
brokers = ["b"]
topics = ["t"]
group = "g"
[[secondary]]
name = "a"
type = "file"`, []string{`own_raw = true: is refused for a kafka source: its origin is not replayable`}},
		{"own raw flight stream", `
[[source]]
name = "fl"
type = "flight"
own_raw = true
[source.flight]
streams = ["orders"]
[[secondary]]
name = "a"
type = "file"`, []string{`own_raw = true: is refused for a flight source: its origin is a stream its producers cannot rewind`,
			`the primary raw is the only replay path of what it took. That holds only because its producers resume`}},
		{"flight on a public address without authentication", `
[[source]]
name = "fl"
type = "flight"
[source.flight]
listen = "0.0.0.0:8815"
streams = ["orders"]`, []string{`listen = "0.0.0.0:8815": is not a loopback address and the Flight source has no authentication`}},
		{"own raw with another source", `
[[source]]
name = "f"
type = "file"
own_raw = true
[source.file]
glob = "/x/*"
[[source]]
name = "g"
type = "file"
[source.file]
glob = "/y/*"
[[secondary]]
name = "a"
type = "file"`, []string{`own_raw = true: leaves no place for the other [[source]] tables`}},
		{"two own raws", `
[[source]]
name = "f"
type = "file"
own_raw = true
[source.file]
glob = "/x/*"
[[source]]
name = "g"
type = "file"
own_raw = true
[source.file]
glob = "/y/*"
[[secondary]]
name = "a"
type = "file"`, []string{`[[source]] "g": own_raw = true: is set on a second source`}},
		{"own raw without secondaries", `
[[source]]
name = "f"
type = "file"
own_raw = true
[source.file]
glob = "/x/*"`, []string{`own_raw = true: needs [[secondary]] tables`}},
		{"own raw with tcp", `
tcp_listen = "127.0.0.1:7000"
[[source]]
name = "f"
type = "file"
own_raw = true
[source.file]
glob = "/x/*"
[[secondary]]
name = "a"
type = "file"`, []string{`tcp_listen = "127.0.0.1:7000": must be empty when a source is its own raw`}},
		{"raw_dir without own_raw", `
[[source]]
name = "f"
type = "file"
raw_dir = "/r"
[source.file]
glob = "/x/*"`, []string{`raw_dir = "/r": is only used with own_raw = true`}},
		{"primary raw not durable", `
[sink]
durable = false`, []string{`sink.durable = false: the [sink] is the pipeline's primary raw`}},
		{"primary raw not durable, with a secondary that may be", `
[sink]
durable = false
[[secondary]]
name = "a"
type = "file"
durable = false`, []string{`sink.durable = false: the [sink] is the pipeline's primary raw`, `only a [[secondary]] may set durable = false`}},
		{"the raw gate's sink not durable", `
gate = "raw"
[sink]
durable = false
[[source]]
name = "f"
type = "file"
[source.file]
glob = "/x/*"`, []string{`sink.durable = false: the [sink] is the gate of the sources (gate = "raw")`}},
		{"secondary of a kind that cannot be non-durable", `
[[secondary]]
name = "my"
type = "mysql"
durable = false
[secondary.mysql]
dsn = "u@tcp(h)/db"`, []string{`[[secondary]] "my": durable = false: is not supported by a mysql sink`}},
		{"source without name", `
[[source]]
type = "file"
[source.file]
glob = "/x/*"`, []string{`[[source]] #1: name is required: 1 – 64 bytes`}},
		{"duplicate source", `
[[source]]
name = "s"
type = "file"
[source.file]
glob = "/x/*"
[[source]]
name = "s"
type = "file"
[source.file]
glob = "/y/*"`, []string{`[[source]] "s": name = "s": is already used by [[source]] #1`}},
		{"source type", `
[[source]]
name = "s"
type = "socket"`, []string{`[[source]] "s": type = "socket": must be one of "kafka", "nats", "file"`}},
		{"kafka required", `
[[source]]
name = "s"
type = "kafka"`, []string{`kafka.brokers is required`, `kafka.topics is required`, `kafka.group is required`}},
		{"nats required", `
[[source]]
name = "s"
type = "nats"
[source.nats]
fetch_max_wait = "5s"
ack_wait = "1s"`, []string{`nats.stream is required`, `nats.consumer is required`, `nats.ack_wait = 1s: must exceed fetch_max_wait (5s)`}},
		{"file glob", `
[[source]]
name = "s"
type = "file"
[source.file]
glob = "[x"`, []string{`file.glob = "[x": is not a valid pattern`}},
		{"source wrong table", `
[[source]]
name = "s"
type = "file"
[source.file]
glob = "/x/*"
[source.kafka]
group = "g"`, []string{`[source.kafka] is given but type is "file"`}},
		{"source bad duration", `
[[source]]
name = "s"
type = "file"
[source.file]
glob = "/x/*"
poll_interval = "soon"`, []string{`[[source]] "s" file.poll_interval`, `not a duration`}},
		{"source key ranges", `
[[source]]
name = "orders"
type = "kafka"
[source.kafka]
brokers = "k1:9092, k2:9092"
topics = ["t"]
group = "g"
max_poll_records = -1
session_timeout = "2h"`, []string{`[[source]] "orders": kafka.max_poll_records = -1: must be between 1 and 1048576 (or 0 for the default)`,
			`[[source]] "orders": kafka.session_timeout = 2h: must be between 1s and 1h`}},
		{"source key type", `
[[source]]
name = "ev"
type = "nats"
[source.nats]
stream = "S"
consumer = "c"
fetch_batch = "many"`, []string{`[[source]] "ev" nats.fetch_batch: "many" is not an integer`}},
		{"nats pending below batch", `
[[source]]
name = "ev"
type = "nats"
[source.nats]
stream = "S"
consumer = "c"
fetch_batch = 100
max_ack_pending = 10`, []string{`[[source]] "ev": nats.max_ack_pending = 10: must be at least fetch_batch (100)`}},
		{"source type names the kinds", `
[[source]]
name = "s"`, []string{`[[source]] "s": type is required: one of "kafka", "nats", "file"`}},
		{"secondary type names the kinds", `
[[secondary]]
name = "a"
type = "redis"`, []string{`[[secondary]] "a": type = "redis": must be one of "file", "parquet", "postgres", "mysql", "kafka"`}},
		{"secondary relative dir resolved", `
[[secondary]]
name = "a"
type = "file"
[secondary.file]
dir = "../x"`, []string{`[[secondary]] "a": file.dir = "../x": must not contain a ".." element`}},
		{"recovery node without secondaries", `
role = "recovery"`, []string{`role = "recovery": needs [[secondary]] tables`}},
		{"recovery node with a source and tcp", `
role = "recovery"
tcp_listen = "127.0.0.1:7000"
tls_cert_file = "/c"
tls_key_file = "/k"
tls_client_ca_file = "/ca"
[[secondary]]
name = "pg"
type = "postgres"
[secondary.postgres]
dsn = "x"
[[source]]
name = "s"
type = "file"
[source.file]
glob = "/x/*"`, []string{`[[source]] "s": table is not allowed with role = "recovery"`, `tcp_listen = "127.0.0.1:7000": must be empty with role = "recovery"`}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantLoadError(t, tc.body, tc.want) })
	}
}

// TestSourceKeysAsSettings: a source's keys read like any setting — a
// list as an array or one comma-separated string, a size with a unit, 0
// for a kind default — and unset keys take the kind's defaults.
func TestSourceKeysAsSettings(t *testing.T) {
	c := loadClean(t, `
[[source]]
name = "k"
type = "kafka"
[source.kafka]
brokers = "k1:9092, k2:9092"
topics = ["a", "b"]
group = "g"
max_poll_records = 0
[[source]]
name = "f"
type = "file"
[source.file]
glob = "/logs/*.log"
max_line_bytes = "64KiB"
`)
	k := c.Sources[0].Settings.(*kafkasrc.Config)
	if strings.Join(k.Brokers, ",") != "k1:9092,k2:9092" || strings.Join(k.Topics, ",") != "a,b" || k.MaxPollRecords != 0 ||
		k.SessionTimeout != kafkasrc.DefaultSessionTimeout {
		t.Errorf("kafka: %+v", k)
	}
	if f := c.Sources[1].Settings.(*filesrc.Config); f.MaxLineBytes != 64<<10 || f.PollInterval != filesrc.DefaultPollInterval {
		t.Errorf("file: %+v", f)
	}
}

// TestSecondaryNotDurable: durable = false is accepted for a secondary of
// a kind that can honour it, kept per secondary, and true by default.
func TestSecondaryNotDurable(t *testing.T) {
	c := loadClean(t, `
[[secondary]]
name = "files"
type = "file"
durable = false

[[secondary]]
name = "pq"
type = "parquet"
durable = false

[[secondary]]
name = "pg"
type = "postgres"
durable = false
[secondary.postgres]
dsn = "postgres://u@h/db"

[[secondary]]
name = "kept"
type = "file"
`)
	want := map[string]bool{"files": false, "pq": false, "pg": false, "kept": true}
	for _, sc := range c.Secondaries {
		if sc.Sink.Durable != want[sc.Name] {
			t.Errorf("secondary %q: durable %v, want %v", sc.Name, sc.Sink.Durable, want[sc.Name])
		}
	}
	if !c.Sink.Durable {
		t.Error("the [sink] is not durable")
	}
}
