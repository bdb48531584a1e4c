package config

import (
	"path/filepath"
	"testing"
	"time"
)

// contractBase is a topology a contract can name: raw with a secondary
// and a Kafka source called orders.
const contractBase = `
[sink]
type = "file"
[[secondary]]
name = "pg"
type = "file"
[secondary.file]
dir = "/tmp/weir-contract-test-secondary"
[[source]]
name = "orders"
type = "kafka"
[source.kafka]
brokers = ["127.0.0.1:9092"]
topics = ["orders"]
group = "g"
`

func schemaPath(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestContractTables(t *testing.T) {
	c := loadClean(t, contractBase+`
[[contract]]
source = "orders"
version = "3"
schema_file = "`+schemaPath(t, "orders.schema.json")+`"
natural_key = ["/order_id"]
event_time = "/ts"
unique = true
degraded_percent = 5
breaker_percent = 50
  [[contract.rule]]
  name = "positive_amount"
  expr = "record.amount > 0"
  [[contract.rule]]
  name = "small"
  expr = "record.amount < 1000"
  severity = "warn"
  [contract.dedup]
  store = "redis"
  redis_url = "redis://127.0.0.1:6379/0"
  window = "2m"

[[contract]]
source = "socket"
header = "type=order"
`)
	if len(c.Contracts) != 2 {
		t.Fatalf("contracts %+v", c.Contracts)
	}
	o := c.Contracts[0]
	if o.Version != "3" || len(o.Rules) != 2 || o.Rules[0].Severity != "fail" || o.Rules[1].Severity != "warn" ||
		o.Dedup == nil || o.Dedup.Store != "redis" || o.Dedup.Window != 2*time.Minute || o.Dedup.Timeout != DefaultDedupTimeout ||
		o.Window != DefaultContractWindow || o.MinRecords != DefaultContractMinRecs || len(o.Schema) == 0 {
		t.Errorf("orders contract %+v", o)
	}
	spec := o.Spec()
	if spec.Stream != "orders" || spec.Rules[1].Name != "small" || spec.NaturalKey[0] != "/order_id" {
		t.Errorf("spec %+v", spec)
	}
	s := c.Contracts[1].Spec()
	if s.Header != "type" || s.HeaderValue != "order" || c.Contracts[1].Version != DefaultContractVersion || c.Contracts[1].Dedup != nil {
		t.Errorf("socket contract %+v", c.Contracts[1])
	}
	if c.DQAudit.Dir != filepath.Join(c.DataDir, DefaultDQAuditDirName) || c.DQAudit.Window != DefaultDQAuditWindow {
		t.Errorf("dq_audit %+v", c.DQAudit)
	}
}

func TestContractRefusals(t *testing.T) {
	schema := schemaPath(t, "orders.schema.json")
	for _, tc := range []struct {
		name, topo, body string
		want             []string
	}{
		{"dedup without a key", contractBase, `
[[contract]]
source = "orders"
[contract.dedup]
store = "memory"`, []string{`[[contract]] "orders" [contract.dedup]`, "natural_key with unique = true", "would otherwise be dropped"}},
		{"dedup with a key but no uniqueness", contractBase, `
[[contract]]
source = "orders"
natural_key = ["/id"]
[contract.dedup]`, []string{`[[contract]] "orders" [contract.dedup]`, "needs a contract that declares what is unique"}},
		{"a Bloom store", contractBase, `
[[contract]]
source = "orders"
natural_key = ["/id"]
unique = true
[contract.dedup]
store = "bloom"`, []string{`[[contract]] "orders" [contract.dedup]: store = "bloom"`, "probabilistic membership", "false positives"}},
		{"a false-positive rate", contractBase, `
[[contract]]
source = "orders"
natural_key = ["/id"]
unique = true
[contract.dedup]
store = "memory"
false_positive_rate = 0.01`, []string{`[[contract]] "orders" [contract.dedup]: false_positive_rate`, "probabilistic membership"}},
		{"a CEL rule that does not compile", contractBase, `
[[contract]]
source = "orders"
[[contract.rule]]
name = "bad"
expr = "record.amount >"`, []string{`[[contract]] "orders"`, `stream "orders"`, `rule "bad"`}},
		{"a CEL rule that is not boolean", contractBase, `
[[contract]]
source = "orders"
[[contract.rule]]
name = "num"
expr = "1 + 2"`, []string{`stream "orders"`, `rule "num"`}},
		{"a schema that does not compile", contractBase, `
[[contract]]
source = "orders"
schema_file = "` + schemaPath(t, "broken.schema.json") + `"`, []string{`stream "orders"`, "schema", "broken.schema.json"}},
		{"a missing schema file", contractBase, `
[[contract]]
source = "orders"
schema_file = "/nonexistent/orders.json"`, []string{`[[contract]] "orders": schema_file`, "no such file"}},
		{"an unknown stream", contractBase, `
[[contract]]
source = "payments"`, []string{`[[contract]] "payments": source = "payments": names no [[source]]`}},
		{"a header on a source stream", contractBase, `
[[contract]]
source = "orders"
header = "a=b"`, []string{`header = "a=b": narrows a producer contract`}},
		{"a breaker on the socket", contractBase, `
[[contract]]
source = "socket"
breaker_percent = 50`, []string{`breaker_percent = 50: applies to a [[source]] stream only`}},
		{"dedup without raw", `
[sink]
type = "file"
`, `
[[contract]]
source = "socket"
natural_key = ["/id"]
unique = true
[contract.dedup]`, []string{"content dedup runs between primary raw and the secondaries"}},
		{"redis without a url", contractBase, `
[[contract]]
source = "orders"
natural_key = ["/id"]
unique = true
[contract.dedup]
store = "redis"`, []string{`redis_url = "": is required with store = "redis"`}},
		{"two contracts for a stream", contractBase, `
[[contract]]
source = "orders"
schema_file = "` + schema + `"
[[contract]]
source = "orders"`, []string{`already has a contract in [[contract]] "orders"`}},
		{"a bad pointer", contractBase, `
[[contract]]
source = "orders"
natural_key = ["order_id"]`, []string{`natural_key`, "JSON pointer"}},
		{"a rule without expr", contractBase, `
[[contract]]
source = "orders"
[[contract.rule]]
name = "x"`, []string{`[[contract]] "orders" rule #1: expr is required`}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantLoadError(t, tc.topo+tc.body, tc.want) })
	}
}

// A recovery node judges what an ingest node's sources wrote: its
// contracts name streams it does not read itself.
func TestContractOnRecoveryNode(t *testing.T) {
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
[[contract]]
source = "orders"
natural_key = ["/id"]
unique = true
[contract.dedup]
store = "memory"
`)
	if len(c.Contracts) != 1 || c.Contracts[0].Dedup == nil {
		t.Fatalf("contracts %+v", c.Contracts)
	}
}
