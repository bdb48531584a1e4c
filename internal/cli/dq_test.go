package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/dqaudit"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// writeTrail writes two windows of a trail with w, as the daemon would:
// through a Trail on a fake clock.
func writeTrail(t *testing.T, w dqaudit.Writer) {
	t.Helper()
	clock := testenv.NewClock(time.Date(2026, 3, 4, 5, 6, 10, 0, time.UTC))
	tr := dqaudit.New(dqaudit.Options{Writer: w, Now: clock.Now})
	id := func(n byte) sink.RecordID { return sink.RecordID{15: n} }
	add := func(stream, contract string, obs ...dqaudit.Obs) {
		if err := tr.Append(context.Background(), []dqaudit.Batch{{Stream: stream, Sink: "pg", Contract: contract, Obs: obs}}); err != nil {
			t.Fatal(err)
		}
	}
	add("orders", "orders@3",
		dqaudit.Obs{Outcome: dqaudit.Passed, ID: id(10)}, dqaudit.Obs{Outcome: dqaudit.Passed, ID: id(11)},
		dqaudit.Obs{Outcome: dqaudit.Warned, Warned: []string{"has_currency"}, ID: id(12)},
		dqaudit.Obs{Outcome: dqaudit.Rejected, Code: "dq", Rule: "positive_amount", ID: id(1)},
		dqaudit.Obs{Outcome: dqaudit.Rejected, Code: "contract", Rule: "schema", ID: id(2)},
		dqaudit.Obs{Outcome: dqaudit.Duplicate, ID: id(13)},
	)
	tr.Recovered("pg", 100, 200, "skip-quarantine")
	tr.Recovered("pg", 200, 300, "skip-quarantine")
	tr.Recovered("pg", 300, 400, "rehydrate")
	clock.Advance(time.Minute) // the next window
	add("orders", "orders@3",
		dqaudit.Obs{Outcome: dqaudit.Passed, ID: id(14)},
		dqaudit.Obs{Outcome: dqaudit.Rejected, Code: "dq", Rule: "positive_amount", ID: id(3)})
	add("clicks", "clicks@1", dqaudit.Obs{Outcome: dqaudit.Rejected, Code: "decode", Rule: "decode", ID: id(4)})
	if err := tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func dirTrail(t *testing.T, dir string) {
	t.Helper()
	w, err := dqaudit.OpenDir(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	writeTrail(t, w)
}

const dqWant = `dq-audit: 5 entries, windows 2026-03-04T05:06:00Z to 2026-03-04T05:08:00Z

stream clicks, contract clicks@1: 1 windows, 2026-03-04T05:07:00Z to 2026-03-04T05:08:00Z, sinks pg
  outcomes:  pass 0, warn 0, reject 1, duplicate 0
  rejected by code:  decode 1
  top rules:  decode 1
  sample rejected ids:  00000000000000000000000000000004

stream orders, contract orders@3: 2 windows, 2026-03-04T05:06:00Z to 2026-03-04T05:08:00Z, sinks pg
  outcomes:  pass 3, warn 1, reject 3, duplicate 1
  rejected by code:  dq 2, contract 1
  top rules:  positive_amount 2, has_currency 1, schema 1
  sample rejected ids:  00000000000000000000000000000001 00000000000000000000000000000002 00000000000000000000000000000003

recovered in skip-quarantine mode (their rejects are not in the quarantine view; raw keeps them):
  sink pg: positions [100, 300), 200 in all, 2026-03-04T05:06:00Z to 2026-03-04T05:07:00Z
`

func runDQ(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(append([]string{"dq"}, args...), nil, &out, &errb)
	return code, out.String(), errb.String()
}

func TestDQFromDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "trail")
	dirTrail(t, dir)
	code, out, errs := runDQ(t, "--dir", dir)
	if code != 0 || out != dqWant {
		t.Fatalf("exit %d, stderr %q, output\n%s\nwant\n%s", code, errs, out, dqWant)
	}

	code, out, errs = runDQ(t, "--dir", dir, "--json")
	var s dqaudit.Summary
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
		t.Fatalf("--json: exit %d, stderr %q, output %s", code, errs, out)
	}
	if s.Entries != 5 || len(s.Streams) != 2 || s.Streams[1].Outcomes[dqaudit.Rejected] != 3 ||
		len(s.SkipQuarantine) != 1 || s.SkipQuarantine[0].Positions != 200 {
		t.Fatalf("--json summary %+v", s)
	}

	// --since: only the second window.
	code, out, errs = runDQ(t, "--dir", dir, "--since", "2026-03-04T05:07:00Z")
	if code != 0 || !strings.HasPrefix(out, "dq-audit: 2 entries, windows 2026-03-04T05:07:00Z") ||
		!strings.Contains(out, "outcomes:  pass 1, warn 0, reject 1, duplicate 0") || strings.Contains(out, "skip-quarantine") {
		t.Fatalf("--since: exit %d, stderr %q, output\n%s", code, errs, out)
	}
}

// With --config and no --dir, the trail is <data_dir>/dq-audit.
func TestDQFromConfigDataDir(t *testing.T) {
	data := t.TempDir()
	dirTrail(t, filepath.Join(data, dqaudit.DefaultDirName))
	cfg := filepath.Join(t.TempDir(), "weir.toml")
	if err := os.WriteFile(cfg, []byte("data_dir = "+tomlString(data)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runDQ(t, "--config", cfg)
	if code != 0 || out != dqWant {
		t.Fatalf("exit %d, stderr %q, output\n%s", code, errs, out)
	}
}

func tomlString(s string) string {
	b, _ := json.Marshal(s) // a TOML basic string accepts JSON's escapes
	return string(b)
}

func TestDQFromPostgres(t *testing.T) {
	dsn := testenv.Postgres(t)
	table := testenv.PostgresTable(t, dsn, "dq_audit_cli")
	w, err := dqaudit.OpenPostgres(context.Background(), dsn, table)
	if err != nil {
		t.Fatal(err)
	}
	writeTrail(t, w)
	code, out, errs := runDQ(t, "--postgres", dsn, "--table", table)
	if code != 0 || out != dqWant {
		t.Fatalf("exit %d, stderr %q, output\n%s\nwant\n%s", code, errs, out, dqWant)
	}
}

func TestDQErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--dir", "a", "--postgres", "b"}, 2, "not both"},
		{[]string{"extra"}, 2, "unexpected argument"},
		{[]string{"--dir", missing}, 1, missing},
		{[]string{"--dir", missing, "--since", "yesterday"}, 2, "--since"},
		{[]string{"--config", filepath.Join(missing, "weir.toml")}, 2, "weir.toml"},
		{[]string{"--postgres", "postgres://127.0.0.1:1/x", "--timeout", "2s"}, 1, "connect"},
	} {
		code, out, errs := runDQ(t, tc.args...)
		if code != tc.code || out != "" || !strings.Contains(errs, tc.msg) {
			t.Errorf("%v: exit %d, output %q, stderr %q; want exit %d and %q", tc.args, code, out, errs, tc.code, tc.msg)
		}
	}
	if code, _, errs := runDQ(t, "--help"); code != 0 || !strings.Contains(errs, "Usage:") {
		t.Errorf("--help: exit %d, %q", code, errs)
	}
}
