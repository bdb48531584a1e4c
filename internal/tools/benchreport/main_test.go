package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHistoryRow: the history row takes the median of each headline field
// and writes "–" for a benchmark that did not run, with one cell per column
// of the header.
func TestHistoryRow(t *testing.T) {
	in := filepath.Join(t.TempDir(), "bench.out")
	lines := []string{
		`BENCH: {"name":"disk_baseline","fdatasync_per_s":5000}`,
		`BenchmarkX-2   BENCH: {"name":"e2e/kafka_raw_postgres","records_per_s":100,"e2e_vs_copy_pk":0.30}`,
		`BENCH: {"name":"e2e/kafka_raw_postgres","records_per_s":100,"e2e_vs_copy_pk":0.50}`,
		`BENCH: {"name":"e2e/kafka_raw_postgres","records_per_s":100,"e2e_vs_copy_pk":0.40}`,
		`BENCH: {"name":"pgsink/ids=time","sink_copy_ratio_pk":0.92}`,
		`BENCH: {"name":"pgsink/ids=random","sink_copy_ratio_pk":0.11}`,
		`BENCH: {"name":"kafkasink","records_per_s":1,"ratio":1.004}`,
	}
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hist := filepath.Join(t.TempDir(), "history.md")
	if err := run(in, filepath.Join(t.TempDir(), "latest.md"), hist, "cmd"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(hist)
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(string(b)), "\n")
	row := rows[len(rows)-1]
	cells := strings.Split(strings.Trim(row, "|"), "|")
	header := strings.Split(strings.Trim(strings.SplitN(historyHeader, "\n", 2)[0], "|"), "|")
	if len(cells) != len(header) {
		t.Fatalf("row has %d cells, header %d:\n%s", len(cells), len(header), row)
	}
	want := []string{"5000", "–", "–", "–", "–", "0.40", "–", "0.92", "–", "1.00"}
	for i, w := range want {
		if got := strings.TrimSpace(cells[i+1]); got != w {
			t.Errorf("column %q = %q, want %q", strings.TrimSpace(header[i+1]), got, w)
		}
	}
}
