package config

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/internal/contract"
)

// Defaults of a [[contract]] (docs/data_quality.md).
const (
	DefaultContractVersion   = "1"
	DefaultContractWindow    = time.Minute
	DefaultContractMinRecs   = 100
	DefaultBreakerCooldown   = 5 * time.Minute
	DefaultDedupWindow       = 10 * time.Minute
	DefaultDedupMaxBytes     = 256 * mib
	DefaultDedupTimeout      = 250 * time.Millisecond
	DefaultDedupRedisPrefix  = "weir:dedup:"
	SocketStream             = "socket"
	contractField            = "TopologyContract"
	dedupStoreMemory         = "memory"
	dedupStoreRedis          = "redis"
	probabilisticRefusalWhy  = "probabilistic membership (Bloom, cuckoo and kin) is refused: its false positives would drop legitimate records as duplicates; dedup here is exact with eviction (store = \"memory\" or \"redis\"), whose only error is a missed duplicate"
	contractPercentRangeText = "0 – 100 (0: off)"
)

// ContractConfig is one [[contract]]: a stream's data contract, its
// quality rules and, optionally, content dedup.
type ContractConfig struct {
	// Source is the stream: a [[source]]'s name, or "socket" (source).
	Source string
	// Header narrows a socket contract to records carrying a header
	// (header = "name=value").
	Header        string
	Version       string   // version
	SchemaFile    string   // schema_file: a JSON Schema, path
	NaturalKey    []string // natural_key: JSON pointers
	EventTime     string   // event_time: a JSON pointer
	Unique        bool     // unique
	PayloadUnique bool     // payload_unique
	// DegradedPercent: the stream's reject share over Window above which
	// its sinks report Degraded; 0 off (degraded_percent).
	DegradedPercent int
	Window          time.Duration // window
	MinRecords      int           // min_records
	// BreakerPercent: reject share above which the source is paused for
	// BreakerCooldown; 0 off (breaker_percent, breaker_cooldown).
	BreakerPercent  int
	BreakerCooldown time.Duration
	Rules           []RuleConfig // [[contract.rule]]
	Dedup           *DedupConfig // [contract.dedup]; nil: off
	// Schema is schema_file's content, read at load.
	Schema []byte
}

// RuleConfig is one [[contract.rule]].
type RuleConfig struct {
	Name, Expr, Severity string
}

// DedupConfig is a [contract.dedup].
type DedupConfig struct {
	Store    string        // store: memory|redis
	RedisURL string        // redis_url
	Prefix   string        // redis_prefix
	Window   time.Duration // window
	MaxBytes int64         // max_bytes (memory)
	Timeout  time.Duration // timeout (redis round trip)
}

// Spec is the contract package's view of the configuration.
func (cc *ContractConfig) Spec() contract.Spec {
	s := contract.Spec{Stream: cc.Source, Version: cc.Version, Schema: cc.Schema, SchemaPath: cc.SchemaFile,
		NaturalKey: cc.NaturalKey, EventTime: cc.EventTime, Unique: cc.Unique, PayloadUnique: cc.PayloadUnique}
	if name, value, ok := strings.Cut(cc.Header, "="); ok {
		s.Header, s.HeaderValue = name, value
	}
	for _, r := range cc.Rules {
		sev := contract.Fail
		if r.Severity == "warn" {
			sev = contract.Warn
		}
		s.Rules = append(s.Rules, contract.Rule{Name: r.Name, Expr: r.Expr, Severity: sev})
	}
	return s
}

func contractFields() []component.Field {
	type C = ContractConfig
	pointer := setting.Text("a JSON pointer (RFC 6901), such as /ts", func(s string) string {
		if err := contract.CheckPointer(s); err != nil {
			return err.Error()
		}
		return ""
	})
	percent := setting.Int(0, 100)
	return []component.Field{
		component.Key("source", setting.Text(`a [[source]] name, "socket", or the http.stream`, func(s string) string {
			if s == SocketStream {
				return ""
			}
			return validName(s)
		}), "", `The stream the contract covers: a [[source]]'s name, "socket" for the producer socket, or http.stream (default "http") for the HTTP door.`,
			func(c *C) *string { return &c.Source }, component.Required()),
		component.Key("header", setting.Text(`"name=value"`, func(s string) string {
			if s != "" && !strings.Contains(s, "=") {
				return `must be "name=value"`
			}
			return ""
		}), "", `Socket contracts only: the contract covers the records carrying this header with this value ("name=value"); several socket contracts may each take their own.`,
			func(c *C) *string { return &c.Header }),
		component.Key("version", setting.Text("1 – 32 bytes", func(s string) string {
			if s == "" || len(s) > 32 {
				return "must be 1 – 32 bytes"
			}
			return ""
		}), DefaultContractVersion, "The contract's version; rejections and the dq-audit trail name the contract <source>@<version>.",
			func(c *C) *string { return &c.Version }),
		component.Key("schema_file", setting.OptionalPath("a JSON Schema file (drafts 2019-09, 2020-12)"), "",
			"A JSON Schema the payloads must satisfy (drafts 2019-09 and 2020-12; 2020-12 unless $schema says otherwise); empty: payloads must only be JSON.",
			func(c *C) *string { return &c.SchemaFile }),
		component.Key("natural_key", setting.List("JSON pointers", contract.CheckPointer), []string(nil),
			"JSON pointers whose values identify a record; with unique = true they key content dedup.",
			func(c *C) *[]string { return &c.NaturalKey }),
		component.Key("event_time", pointer, "", "A JSON pointer to the record's own time; part of the dedup key when set.",
			func(c *C) *string { return &c.EventTime }),
		component.Key("unique", setting.Bool(), false, "The data promises one record per natural key (plus event time): needed, with natural_key, for content dedup.",
			func(c *C) *bool { return &c.Unique }),
		component.Key("payload_unique", setting.Bool(), false, "The payload itself is unique: content dedup may key on the whole payload. Prefer natural_key + unique.",
			func(c *C) *bool { return &c.PayloadUnique }),
		component.Key("degraded_percent", percent, 0, "Share of rejected records over window above which the stream's sinks report Degraded; 0 off.",
			func(c *C) *int { return &c.DegradedPercent }),
		component.Key("window", setting.Duration(time.Second, 24*time.Hour), DefaultContractWindow, "Sliding window of degraded_percent and breaker_percent.",
			func(c *C) *time.Duration { return &c.Window }),
		component.Key("min_records", setting.Int(1, 1<<30), DefaultContractMinRecs, "Records the window must hold before its reject share counts.",
			func(c *C) *int { return &c.MinRecords }),
		component.Key("breaker_percent", percent, 0, "Share of rejected records over window above which the stream's source is paused for breaker_cooldown (a [[source]] stream only); 0 off.",
			func(c *C) *int { return &c.BreakerPercent }),
		component.Key("breaker_cooldown", setting.Duration(time.Second, 24*time.Hour), DefaultBreakerCooldown, "How long a tripped breaker keeps the source paused.",
			func(c *C) *time.Duration { return &c.BreakerCooldown }),
	}
}

func ruleFields() []component.Field {
	type R = RuleConfig
	return []component.Field{
		component.Key("name", setting.Text("1 – 64 bytes of letters, digits, '-', '_' and '.'; not decode or schema; unique in its contract", validName), "", "The rule's name, in rejections, metrics and the dq-audit trail.",
			func(r *R) *string { return &r.Name }, component.Required()),
		component.Key("expr", setting.Text("a CEL expression", func(s string) string {
			if strings.TrimSpace(s) == "" {
				return "must not be empty"
			}
			return ""
		}), "", "A CEL expression over record (the decoded payload), key, headers and source that must be true.",
			func(r *R) *string { return &r.Expr }, component.Required()),
		component.Key("severity", setting.Enum("fail", "warn"), "fail", "fail: a record failing the rule is quarantined (code dq); warn: counted and passed on.",
			func(r *R) *string { return &r.Severity }),
	}
}

func dedupFields() []component.Field {
	type D = DedupConfig
	return []component.Field{
		component.Key("store", setting.Text(`"memory" or "redis"`, func(s string) string {
			switch strings.ToLower(s) {
			case dedupStoreMemory, dedupStoreRedis:
				return ""
			case "bloom", "cuckoo", "probabilistic", "hyperloglog":
				return probabilisticRefusalWhy
			}
			return `must be "memory" or "redis"`
		}), dedupStoreMemory, "The seen-set: memory (this process; exact LRU with a TTL) or redis (shared by every node, one pipelined round trip per batch).",
			func(d *D) *string { return &d.Store }),
		component.Key("redis_url", setting.Text("a redis:// URL", nil), "", "With store = \"redis\": the server (redis://host:port/db).",
			func(d *D) *string { return &d.RedisURL }),
		component.Key("redis_prefix", setting.Text("a key prefix", nil), DefaultDedupRedisPrefix, "With store = \"redis\": the prefix of the seen-set's keys.",
			func(d *D) *string { return &d.Prefix }),
		component.Key("window", setting.Duration(time.Second, 24*time.Hour), DefaultDedupWindow, "How long a claim is held: size it to the upstream retry interval (minutes), not longer — memory grows with it.",
			func(d *D) *time.Duration { return &d.Window }),
		component.Key("max_bytes", setting.Size(1*mib, 1<<40), int64(DefaultDedupMaxBytes), "With store = \"memory\": the seen-set's bound; the least recently claimed keys are evicted past it.",
			func(d *D) *int64 { return &d.MaxBytes }),
		component.Key("timeout", setting.Duration(time.Millisecond, time.Minute), DefaultDedupTimeout, "With store = \"redis\": bound of one round trip; past it the batch passes without dedup.",
			func(d *D) *time.Duration { return &d.Timeout }),
	}
}

// contractTOML is one [[contract]] as read.
type contractTOML struct {
	keys  map[string]any
	rules []map[string]any
	dedup map[string]any // nil: no [contract.dedup]
	other []string       // probabilistic keys in [contract.dedup]
}

// decodeContracts reads each [[contract]] with its [[contract.rule]]s
// and [contract.dedup].
func decodeContracts(md toml.MetaData, doc reflect.Value, topo *topologyTOML) []error {
	var errs []error
	type nested struct {
		Rule  []toml.Primitive `toml:"rule"`
		Dedup *toml.Primitive  `toml:"dedup"`
	}
	for i, prim := range doc.FieldByName(contractField).Interface().([]toml.Primitive) {
		where := fmt.Sprintf("[[contract]] #%d", i+1)
		keys, err := readKeys(md, prim, contractFields())
		if err != nil {
			errs = append(errs, fileError(topo.path, where, err))
			continue
		}
		var n nested
		if err := md.PrimitiveDecode(prim, &n); err != nil {
			errs = append(errs, fileError(topo.path, where, err))
			continue
		}
		ct := contractTOML{keys: keys}
		for _, rp := range n.Rule {
			rk, err := readKeys(md, rp, ruleFields())
			if err != nil {
				errs = append(errs, fileError(topo.path, where+" [[contract.rule]]", err))
				continue
			}
			ct.rules = append(ct.rules, rk)
		}
		if n.Dedup != nil {
			if ct.dedup, err = readKeys(md, *n.Dedup, dedupFields()); err != nil {
				errs = append(errs, fileError(topo.path, where+" [contract.dedup]", err))
			}
			var all map[string]any
			if md.PrimitiveDecode(*n.Dedup, &all) == nil {
				for k := range all {
					if isProbabilisticKey(k) {
						ct.other = append(ct.other, k)
					}
				}
			}
		}
		topo.contracts = append(topo.contracts, ct)
	}
	return errs
}

// isProbabilisticKey spots a setting of a probabilistic structure.
func isProbabilisticKey(k string) bool {
	k = strings.ToLower(k)
	for _, w := range []string{"bloom", "cuckoo", "false_positive", "fp_rate", "probabilistic", "hyperloglog"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// buildContracts builds and checks every [[contract]]: keys, the
// streams they name, the schema file, the rules and dedup.
func buildContracts(c *Config, topo *topologyTOML, wd string) []error {
	var errs []error
	seen := map[string]string{}
	for i, ct := range topo.contracts {
		cc, where, cerrs := buildContract(c, topo.path, i, ct, wd)
		errs = append(errs, cerrs...)
		key := cc.Source + "\x00" + cc.Header
		if prev, dup := seen[key]; dup && cc.Source != "" {
			errs = append(errs, topoErr(topo.path, where, "source", fmt.Sprintf("%q", cc.Source), "already has a contract in "+prev+" (a socket contract may be narrowed by its own header)"))
		}
		seen[key] = where
		if cc.Source != "" && (cc.SchemaFile == "" || cc.Schema != nil) {
			if _, err := contract.Compile(cc.Spec()); err != nil {
				errs = append(errs, &Problem{File: topo.path, Table: where, Why: err.Error(),
					msg: fmt.Sprintf("config: %s: %s: %v", topo.path, where, err)})
			}
		}
		c.Contracts = append(c.Contracts, cc)
	}
	return errs
}

func buildContract(c *Config, path string, i int, ct contractTOML, wd string) (ContractConfig, string, []error) {
	var cc ContractConfig
	where := fmt.Sprintf("[[contract]] #%d", i+1)
	if s, ok := ct.keys["source"].(string); ok {
		where = fmt.Sprintf("[[contract]] %q", s)
	}
	var errs []error
	report := func(key, value, why string) { errs = append(errs, topoErr(path, where, key, value, why)) }
	fields := contractFields()
	setKeys(fields, &cc, ct.keys, report)
	resolveFields(fields, &cc, wd, false, report)
	for j, rk := range ct.rules {
		var r RuleConfig
		rw := fmt.Sprintf("%s rule #%d", where, j+1)
		setKeys(ruleFields(), &r, rk, func(key, value, why string) { errs = append(errs, topoErr(path, rw, key, value, why)) })
		cc.Rules = append(cc.Rules, r)
	}
	errs = append(errs, checkContractStream(c, path, where, &cc)...)
	if cc.SchemaFile != "" {
		b, err := os.ReadFile(cc.SchemaFile)
		if err != nil {
			report("schema_file", fmt.Sprintf("%q", cc.SchemaFile), err.Error())
		}
		cc.Schema = b
	}
	if ct.dedup != nil || len(ct.other) > 0 {
		cc.Dedup = &DedupConfig{}
		dw := where + " [contract.dedup]"
		dreport := func(key, value, why string) { errs = append(errs, topoErr(path, dw, key, value, why)) }
		setKeys(dedupFields(), cc.Dedup, ct.dedup, dreport)
		for _, k := range ct.other {
			dreport(k, "", probabilisticRefusalWhy)
		}
		errs = append(errs, checkDedup(c, path, where, &cc)...)
	}
	return cc, where, errs
}

// checkContractStream refuses a contract for a stream the node does not
// run, and a header on a [[source]] stream.
func checkContractStream(c *Config, path, where string, cc *ContractConfig) []error {
	if cc.Source == SocketStream || (c.HTTP.Enabled && cc.Source == c.HTTP.Stream) {
		if cc.BreakerPercent > 0 {
			return []error{topoErr(path, where, "breaker_percent", fmt.Sprint(cc.BreakerPercent), "applies to a [[source]] stream only: producers (the socket, the HTTP door) cannot be paused for one stream (they are refused by flow control instead)")}
		}
		return nil
	}
	if cc.Header != "" {
		return []error{topoErr(path, where, "header", fmt.Sprintf("%q", cc.Header), `narrows a producer contract ("socket" or the HTTP stream) only`)}
	}
	if c.Role == "recovery" {
		// A recovery node reads what an ingest node's sources wrote: its
		// streams are named there.
		return nil
	}
	for _, s := range c.Sources {
		if s.Name == cc.Source {
			return nil
		}
	}
	return []error{topoErr(path, where, "source", fmt.Sprintf("%q", cc.Source), `names no [[source]] (a [[source]]'s name, "socket", or http.stream with the HTTP door on)`)}
}

// checkDedup refuses content dedup where it could drop a legitimate
// record: without a declared natural key and uniqueness, and without a
// primary raw to keep what it drops.
func checkDedup(c *Config, path, where string, cc *ContractConfig) []error {
	var errs []error
	dw := where + " [contract.dedup]"
	if !(len(cc.NaturalKey) > 0 && cc.Unique) && !cc.PayloadUnique {
		errs = append(errs, topoErr(path, dw, "store", fmt.Sprintf("%q", cc.Dedup.Store),
			"content dedup needs a contract that declares what is unique: natural_key with unique = true (or payload_unique = true); two distinct records with equal payloads would otherwise be dropped as duplicates"))
	}
	if len(c.Secondaries) == 0 {
		errs = append(errs, topoErr(path, dw, "store", fmt.Sprintf("%q", cc.Dedup.Store),
			"content dedup runs between primary raw and the secondaries (raw keeps every record it drops): this topology has no [[secondary]]"))
	}
	if strings.EqualFold(cc.Dedup.Store, dedupStoreRedis) && cc.Dedup.RedisURL == "" {
		errs = append(errs, topoErr(path, dw, "redis_url", `""`, `is required with store = "redis"`))
	}
	return errs
}

// ContractTableFields are the keys of [[contract]], [[contract.rule]]
// and [contract.dedup], for the configuration reference.
func ContractTableFields() (contractKeys, ruleKeys, dedupKeys []component.Field) {
	return contractFields(), ruleFields(), dedupFields()
}
