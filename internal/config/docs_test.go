package config

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/components"
)

var update = flag.Bool("update", false, "rewrite the generated sections of docs/configuration.md")

const docPath = "../../docs/configuration.md"

// generated is one section of docs/configuration.md made from code.
type generated struct {
	begin, end string
	body       func() string
}

var sections = []generated{
	{"<!-- knob table: generated from internal/config; go test ./internal/config -update -->", "<!-- end of knob table -->", referenceTable},
	{"<!-- kinds: generated from the component registry; go test ./internal/config -update -->", "<!-- end of kinds -->", kindsTables},
	{"<!-- table keys: generated from internal/config; go test ./internal/config -update -->", "<!-- end of table keys -->", tableKeyTables},
	{"<!-- source keys: generated from the component registry; go test ./internal/config -update -->", "<!-- end of source keys -->", sourceKeyTables},
}

// referenceTable renders the knob table as Markdown.
func referenceTable() string {
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Range | Flag | Environment | Meaning |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, k := range knobs() {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s | `--%s` | `%s` | %s |\n",
			k.Key, k.Kind, k.Default, strings.ReplaceAll(k.Range, "|", `\|`), k.Flag(), k.Env(), k.Help)
	}
	return b.String()
}

// kindsTables renders the kinds and their capabilities, as `weir kinds`.
func kindsTables() string {
	r := components.Registry()
	var b strings.Builder
	b.WriteString(r.SinkTable().Markdown())
	b.WriteString("\n")
	b.WriteString(r.SourceTable().Markdown())
	b.WriteString("\n")
	for _, l := range strings.Split(component.CapabilityLegend, "\n") {
		name, what, _ := strings.Cut(l, ": ")
		fmt.Fprintf(&b, "- **%s**: %s\n", name, what)
	}
	return b.String()
}

// tableKeyTables renders the keys of the [[secondary]], [[source]] and
// [[contract]] tables themselves.
func tableKeyTables() string {
	reg := components.Registry()
	var b strings.Builder
	b.WriteString("`[[secondary]]`:\n\n")
	b.WriteString(component.KeyTable("", secondaryFields(reg), true).Markdown())
	b.WriteString("\n`[[source]]`:\n\n")
	b.WriteString(component.KeyTable("", sourceFields(reg), true).Markdown())
	ck, rk, dk := ContractTableFields()
	b.WriteString("\n<a id=\"contracts\"></a>`[[contract]]` (docs/data_quality.md):\n\n")
	b.WriteString(component.KeyTable("", ck, true).Markdown())
	b.WriteString("\n`[[contract.rule]]`:\n\n")
	b.WriteString(component.KeyTable("", rk, true).Markdown())
	b.WriteString("\n`[contract.dedup]`:\n\n")
	b.WriteString(component.KeyTable("", dk, true).Markdown())
	return b.String()
}

// sourceKeyTables renders every source kind's keys.
func sourceKeyTables() string {
	var b strings.Builder
	for i, k := range components.Registry().Sources() {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "`[source.%s]` — %s:\n\n", k.Name(), k.Summary())
		b.WriteString(component.KeyTable("", k.Fields(), true).Markdown())
	}
	return b.String()
}

// TestDocsListEveryKnob keeps docs/configuration.md in step with the code:
// each generated section must match exactly, and every knob's key,
// default, flag and environment variable must appear in the knob table.
func TestDocsListEveryKnob(t *testing.T) {
	raw, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	var got string
	for _, s := range sections {
		i := strings.Index(doc, s.begin)
		j := strings.Index(doc, s.end)
		if i < 0 || j < i {
			t.Fatalf("%s: markers %q … %q not found", docPath, s.begin, s.end)
		}
		have := strings.TrimSpace(doc[i+len(s.begin) : j])
		want := strings.TrimSpace(s.body())
		if s.begin == sections[0].begin {
			got = have
		}
		if have == want {
			continue
		}
		if *update {
			doc = doc[:i+len(s.begin)] + "\n\n" + want + "\n\n" + doc[j:]
			continue
		}
		t.Errorf("%s: the section after %q is out of date; run go test ./internal/config -run TestDocs -update\nwant:\n%s", docPath, s.begin, want)
	}
	if *update {
		if err := os.WriteFile(docPath, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	rows := map[string]string{}
	for _, line := range strings.Split(got, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) > 2 {
			rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = line
		}
	}
	for _, k := range knobs() {
		row, ok := rows[k.Key]
		if !ok {
			t.Errorf("%s: no row for %s", docPath, k.Key)
			continue
		}
		for _, s := range []string{"`" + k.Default + "`", "`--" + k.Flag() + "`", "`" + k.Env() + "`"} {
			if !strings.Contains(row, s) {
				t.Errorf("%s: row for %s lacks %s", docPath, k.Key, s)
			}
		}
	}
	for _, s := range []string{"--" + ConfigFlag, ConfigEnv} {
		if !strings.Contains(doc, s) {
			t.Errorf("%s: does not mention %s", docPath, s)
		}
	}
}
