package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// plantQuarantine writes two lanes under one parent, as a daemon's
// <data_dir>/quarantine holds them: pg with a decode and a
// retry-exhausted record, files with a sink-refused one.
func plantQuarantine(t *testing.T) string {
	t.Helper()
	parent := t.TempDir()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	rec := func(laneName string, id byte, payload string, code record.Code, at time.Duration) lane.Rejected {
		return lane.Rejected{Sink: laneName, Pos: uint64(id), OriginPos: "orders/0@" + string('0'+id),
			Record: sink.Record{ID: sink.RecordID{id}, Payload: []byte(payload), Source: "kafka:orders", Received: t0,
				Key: []byte("k"), Headers: []sink.Header{{Key: "h", Value: []byte{0xff}}}, EventTime: t0},
			Reject: record.Rejection{Code: code, Stage: record.StageSecondary, Component: laneName, Error: "no " + payload,
				Attempts: int(id), FirstSeen: t0.Add(at).UnixNano()}}
	}
	for name, recs := range map[string][]lane.Rejected{
		"pg":    {rec("pg", 1, "a-decode", record.CodeDecode, time.Hour), rec("pg", 2, "b-exhausted", record.CodeRetryExhausted, 2*time.Hour)},
		"files": {rec("files", 3, "c-refused", record.CodeSinkRefused, 3*time.Hour)},
	} {
		w, err := quarantine.Open(quarantine.Options{Dir: filepath.Join(parent, name)})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Reject(context.Background(), recs); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return parent
}

func runQ(args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	code := quarantineCmd(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestQuarantineListShow(t *testing.T) {
	dir := plantQuarantine(t)
	out, errOut, code := runQ("list", "--dir", dir)
	for _, want := range []string{"pg", "decode:1,retry-exhausted:1", "secondary/pg:2", "files", "sink-refused:1",
		"2026-03-01T01:00:00.000Z", "2 lanes, 3 records"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("list: exit %d, no %q in\n%s%s", code, want, out, errOut)
		}
	}
	out, _, code = runQ("show", "--dir", filepath.Join(dir, "pg"), "--code", "retry-exhausted")
	for _, want := range []string{
		"id=" + sink.RecordID{2}.String() + " source=kafka:orders lane=pg raw_position=2 origin_pos=orders/0@2",
		"code=retry-exhausted stage=secondary component=pg attempts=2 first_seen=2026-03-01T02:00:00.000Z",
		"reason: no b-exhausted", `key: "k"`, `header: "h"=ff (binary)`, `payload: "b-exhausted"`, "1 records",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("show: exit %d, no %q in\n%s", code, want, out)
		}
	}
	if strings.Contains(out, "a-decode") {
		t.Fatalf("show --code retry-exhausted shows a decode record:\n%s", out)
	}
	out, _, code = runQ("show", "--dir", dir, "--sink", "pg", "--since", "2026-03-01T01:30:00Z", "--until", "2026-03-01T03:00:00Z")
	if code != 0 || !strings.Contains(out, "b-exhausted") || strings.Contains(out, "a-decode") || strings.Contains(out, "c-refused") {
		t.Fatalf("show --sink --since --until: exit %d\n%s", code, out)
	}
	if _, _, code := runQ("show", "--dir", dir, "--postgres", "x"); code != 2 {
		t.Errorf("--dir with --postgres: exit %d, want 2", code)
	}
	if _, _, code := runQ("purge"); code != 2 {
		t.Errorf("unknown subcommand: exit %d, want 2", code)
	}
}

// Replay sends every selected record under its original id, source,
// origin position, key, headers and event time; --dry-run sends nothing.
func TestQuarantineReplayKeepsIDs(t *testing.T) {
	dir := plantQuarantine(t)
	srv := newPushServer(t)
	out, errOut, code := runQ("replay", "--dir", dir, "--socket-path", srv.path, "--dry-run", "--code", "decode")
	if code != 0 || !strings.Contains(out, "pg #0 id="+sink.RecordID{1}.String()+" code=decode") ||
		!strings.Contains(out, "dry run: would replay 1 records; nothing sent") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	if got, conns := srv.got(); conns != 0 || len(got) != 0 {
		t.Fatalf("dry run connected %d times and sent %v", conns, got)
	}
	for range 2 {
		out, errOut, code = runQ("replay", "--dir", dir, "--socket-path", srv.path)
		if code != 0 || !strings.Contains(out, "replayed 3 records, 0 refused") {
			t.Fatalf("replay: exit %d\n%s%s", code, out, errOut)
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for i, p := range []string{"a-decode", "b-exhausted", "c-refused"} {
		ms := srv.metas[p]
		if len(ms) != 2 {
			t.Fatalf("%s received %d times, want 2", p, len(ms))
		}
		for _, m := range ms {
			if !m.HasID || m.ID != (sink.RecordID{byte(i + 1)}) || m.Source != "kafka:orders" ||
				m.OriginPos != "orders/0@"+string(rune('1'+i)) || string(m.Key) != "k" || len(m.Headers) != 1 || m.EventTime == 0 {
				t.Errorf("%s replayed with %+v", p, m)
			}
		}
	}
}
