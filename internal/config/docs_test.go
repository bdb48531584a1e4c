package config

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the knob table in docs/configuration.md")

const (
	docPath    = "../../docs/configuration.md"
	tableBegin = "<!-- knob table: generated from internal/config; go test ./internal/config -update -->"
	tableEnd   = "<!-- end of knob table -->"
)

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

// TestDocsListEveryKnob keeps docs/configuration.md in step with the table:
// the generated section must match exactly, and every knob's key, default,
// flag and environment variable must appear in it.
func TestDocsListEveryKnob(t *testing.T) {
	raw, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i := strings.Index(doc, tableBegin)
	j := strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: markers %q … %q not found", docPath, tableBegin, tableEnd)
	}
	got := strings.TrimSpace(doc[i+len(tableBegin) : j])
	want := strings.TrimSpace(referenceTable())
	if got != want {
		if *update {
			doc = doc[:i+len(tableBegin)] + "\n\n" + want + "\n\n" + doc[j:]
			if err := os.WriteFile(docPath, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s: knob table is out of date; run go test ./internal/config -run TestDocs -update\nwant:\n%s", docPath, want)
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
