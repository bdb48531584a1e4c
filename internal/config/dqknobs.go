package config

import (
	"time"

	"github.com/weir-io/weir/internal/config/setting"
)

// The dq-audit trail's defaults (docs/data_quality.md).
const (
	DefaultDQAuditDirName = "dq-audit" // under data_dir
	DefaultDQAuditTable   = "weir_dq_audit"
	DefaultDQAuditWindow  = time.Minute
	DefaultDQAuditSample  = 16
)

// DQAuditConfig is [dq_audit]: where the durable trail of the contracts'
// outcomes is kept. It is written only when a [[contract]] exists.
type DQAuditConfig struct {
	Dir         string        // dq_audit.dir
	PostgresURL string        // dq_audit.postgres_url: a table there instead of Dir
	Table       string        // dq_audit.table
	Window      time.Duration // dq_audit.window
	Sample      int           // dq_audit.sample
}

type dqAuditPartial struct {
	Dir, PostgresURL, Table *string
	Window                  *time.Duration
	Sample                  *int
}

// dqAuditKnobs are [dq_audit]'s settings, in documentation order.
func dqAuditKnobs() []knob {
	return []knob{
		pathKnob("dq_audit.dir", "", "<data_dir>/"+DefaultDQAuditDirName, "Directory of the dq-audit trail (NDJSON, fdatasynced), when dq_audit.postgres_url is empty.",
			func(p *partial) **string { return &p.dqAudit.Dir }, func(c *Config) *string { return &c.DQAudit.Dir }),
		newKnob(spec[string]{key: "dq_audit.postgres_url", typ: setting.Secret("a Postgres connection string"), def: "",
			help:  "Keep the dq-audit trail in a Postgres table (dq_audit.table) instead of dq_audit.dir.",
			field: func(p *partial) **string { return &p.dqAudit.PostgresURL }, out: func(c *Config) *string { return &c.DQAudit.PostgresURL }}),
		newKnob(spec[string]{key: "dq_audit.table", typ: setting.Ident(), def: DefaultDQAuditTable,
			help:  "The dq-audit table, with dq_audit.postgres_url; created when missing.",
			field: func(p *partial) **string { return &p.dqAudit.Table }, out: func(c *Config) *string { return &c.DQAudit.Table }}),
		durationKnob("dq_audit.window", DefaultDQAuditWindow, time.Second, 24*time.Hour, "Trail entries are filed under windows this long (a judged batch's entries under the window it was judged in; recovery entries are gathered per window).",
			func(p *partial) **time.Duration { return &p.dqAudit.Window }, func(c *Config) *time.Duration { return &c.DQAudit.Window }),
		intKnob("dq_audit.sample", DefaultDQAuditSample, 0, 1024, "Rejected record ids kept per trail entry, as a sample to look up in raw or quarantine.",
			func(p *partial) **int { return &p.dqAudit.Sample }, func(c *Config) *int { return &c.DQAudit.Sample }),
	}
}
