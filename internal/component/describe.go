package component

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Table is a description of kinds or keys, to print for people (Text) or
// to put in the documentation (Markdown). `weir kinds` and the generated
// sections of docs/configuration.md are both made from it.
type Table struct {
	Header []string
	Rows   [][]string
}

// Text writes the table in aligned columns.
func (t Table) Text(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range append([][]string{t.Header}, t.Rows...) {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// Markdown renders the table as a Markdown table.
func (t Table) Markdown() string {
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + strings.ReplaceAll(c, "|", `\|`) + " |")
		}
		b.WriteString("\n")
	}
	line(t.Header)
	sep := make([]string, len(t.Header))
	for i := range sep {
		sep[i] = "---"
	}
	line(sep)
	for _, r := range t.Rows {
		line(r)
	}
	return b.String()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// SinkTable lists the sink kinds and their capabilities.
func (r *Registry) SinkTable() Table {
	t := Table{Header: []string{"sink kind", "primary raw", "durable", "durable = false", "idempotent", "fs seam", "what it is"}}
	for _, k := range r.sinks {
		c := k.Caps()
		name := k.Name()
		if name == r.defaultSink {
			name += " (default)"
		}
		t.Rows = append(t.Rows, []string{name, yesNo(k.PrimaryRaw()), yesNo(c.Durable), yesNo(c.NonDurable), yesNo(c.Idempotent), yesNo(c.FSSeam), k.Summary()})
	}
	return t
}

// SourceTable lists the source kinds and their capabilities.
func (r *Registry) SourceTable() Table {
	t := Table{Header: []string{"source kind", "position", "own raw", "per-record commit", "pausable", "fs seam", "what it is"}}
	for _, k := range r.sources {
		c := k.Caps()
		t.Rows = append(t.Rows, []string{k.Name(), c.Regime.String(), yesNo(k.Replayable()), yesNo(c.PerRecordCommit), yesNo(c.Pausable), yesNo(c.FSSeam), k.Summary()})
	}
	return t
}

// KeyTable lists keys with prefix before each ("source.kafka." gives
// source.kafka.brokers); literal wraps keys and defaults in backquotes,
// for Markdown.
func KeyTable(prefix string, fields []Field, literal bool) Table {
	q := func(s string) string { return s }
	if literal {
		q = func(s string) string { return "`" + s + "`" }
	}
	t := Table{Header: []string{"key", "type", "default", "range", "meaning"}}
	for _, f := range fields {
		def := q(f.Default)
		if f.Required {
			def = "required"
		}
		t.Rows = append(t.Rows, []string{q(prefix + f.Key), string(f.Kind), def, f.Range, f.Help})
	}
	return t
}

// CapabilityLegend says what the columns of SinkTable and SourceTable
// mean.
const CapabilityLegend = `primary raw: has a raw (position-numbered, replayable) mode, so may be the [sink] that [[secondary]] sinks are recovered from.
durable: acknowledges only what is on stable storage.
durable = false: as a [[secondary]] it can be told not to wait for stable storage (durable = false); refused for the others.
idempotent: a replayed record is absorbed by its weir_record_id; otherwise copies are kept and readers deduplicate on it.
fs seam: all its file I/O goes through weir's file-system seam (fault injection, crash simulation).
position: who keeps the source's position (broker-managed; store-managed: weir, beside the gate).
own raw: its origin can be read again by position, so it may be its own primary raw (own_raw = true).
per-record commit: can commit its position after every record instead of every batch.
pausable: flow control can stop it reading under memory pressure without losing its place (Kafka keeps its group membership).`
