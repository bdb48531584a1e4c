package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestKinds(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string // in stdout, or stderr for a failure
	}{
		{"list", nil, 0, []string{
			"sink kind", "file (default)", "postgres", "mysql", "primary raw",
			"source kind", "kafka", "broker-managed", "store-managed", "own raw", "per-record commit",
		}},
		{"a sink", []string{"postgres"}, 0, []string{"keys of [sink.postgres]", "[secondary.postgres]", "dsn", "required", "batch_records", "1 – 65536"}},
		{"a source", []string{"kafka"}, 0, []string{"keys of [source.kafka]", "brokers", "max_poll_records", "0 (the default) or 1 – 1048576"}},
		{"both", []string{"file"}, 0, []string{"sink file:", "source file:", "glob"}},
		{"unknown", []string{"nope"}, 2, []string{`no sink or source kind "nope"`, "sinks file, parquet, postgres, mysql, kafka"}},
		{"help", []string{"--help"}, 0, []string{"Usage: weir kinds"}},
		{"too many", []string{"a", "b"}, 2, []string{"Usage: weir kinds"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(append([]string{"kinds"}, tc.args...), nil, &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tc.code, errb.String())
			}
			got := out.String()
			if code != 0 {
				got = errb.String()
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
		})
	}
	// The mysql row: not primary raw, durable, no durable = false,
	// idempotent, no FS seam; the parquet row may be durable = false; the
	// kafka sink is durable and nothing else.
	var out bytes.Buffer
	Main([]string{"kinds"}, nil, &out, &out)
	want := map[string]string{"mysql": "no yes no yes no", "parquet": "yes yes yes no yes", "kafka": "no yes no no no"}
	sinks, _, _ := strings.Cut(out.String(), "\n\n") // the sink table; the source kafka follows
	for _, line := range strings.Split(sinks, "\n") {
		f := strings.Fields(line)
		if len(f) <= 5 {
			continue
		}
		if w, ok := want[f[0]]; ok && strings.Join(f[1:6], " ") != w {
			t.Errorf("%s capabilities: %q, want %q", f[0], line, w)
		}
	}
}
