package quarantine_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

func recs(sinkName string, from, n int, recovery bool) []lane.Rejected {
	out := make([]lane.Rejected, n)
	for i := range out {
		p := from + i
		var id sink.RecordID
		id[0], id[1] = byte(p), byte(p>>8)
		payload := fmt.Appendf(nil, `{"n":%d,"bad":"\u0000"}`, p)
		if p%3 == 0 {
			payload = []byte{0xff, 0xfe, byte(p)} // not UTF-8: base64 in the record
		}
		out[i] = lane.Rejected{Sink: sinkName, Pos: uint64(p), Recovery: recovery,
			Reject: record.Rejection{Code: record.Code(p % 7), Stage: record.StageSecondary, Component: sinkName, Attempts: p%3 + 1,
				FirstSeen: time.Unix(1_700_000_001, int64(p)).UnixNano(),
				Error:     fmt.Sprintf("pgsink: row %d: invalid input syntax for type json: \"quote\" and\nnewline", p)},
			Record: sink.Record{ID: id, Payload: payload, Received: time.Unix(1_700_000_000, 0), Source: "kafka:orders", Durability: sink.Durable}}
		if p%2 == 0 {
			r := &out[i].Record
			r.Key = fmt.Appendf(nil, "key-%d", p)
			r.Headers = []sink.Header{{Key: "trace", Value: []byte("abc")}, {Key: "bin", Value: []byte{0xff, byte(p)}}}
			r.EventTime = time.Unix(1_600_000_000, int64(p)*1000)
		}
	}
	return out
}

// checkRejection compares an entry's rejection and record metadata with
// the record written.
func checkRejection(t *testing.T, e quarantine.Entry, want lane.Rejected) {
	t.Helper()
	rj := want.Reject
	if e.ReasonCode != rj.Code.String() || e.Stage != string(rj.Stage) || e.Component != rj.Component || e.Error != rj.Error ||
		e.Reason != rj.Error || e.Attempts != rj.Attempts || e.FirstSeen != time.Unix(0, rj.FirstSeen).UTC().Format(time.RFC3339Nano) {
		t.Fatalf("entry %+v, want rejection %+v", e, rj)
	}
	r := want.Record
	if r.Key == nil {
		if e.Key != "" || e.KeyEncoding != "" || e.Headers != nil || e.EventTime != "" {
			t.Fatalf("entry %+v has record metadata the record lacks", e)
		}
		return
	}
	if e.Key != string(r.Key) || e.KeyEncoding != "utf8" || e.EventTime != r.EventTime.UTC().Format(time.RFC3339Nano) ||
		len(e.Headers) != 2 || e.Headers[0].Key != "trace" || e.Headers[0].Value != "abc" || e.Headers[0].ValueEncoding != "utf8" ||
		e.Headers[1].Key != "bin" || e.Headers[1].ValueEncoding != "base64" || e.Headers[1].Value != base64.StdEncoding.EncodeToString(r.Headers[1].Value) {
		t.Fatalf("entry %+v, want record metadata of %+v", e, r)
	}
}

// Lines written before reason codes existed still read, with the new
// fields empty.
func TestReadsLinesWithoutRejectionFields(t *testing.T) {
	dir := t.TempDir()
	line := `{"sink":"pg","raw_position":3,"found_by":"live","reason":"bad","quarantined_at":"2026-01-02T03:04:05Z",` +
		`"record":{"weir_record_id":"00","durability":"durable","received_at":"2026-01-02T03:04:05Z","source":"s","payload":"x","payload_encoding":"utf8"}}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "q-1-00.ndjson"), []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := quarantine.ReadDir(vfs.OS, dir)
	if err != nil || len(got) != 1 {
		t.Fatalf("%+v, %v", got, err)
	}
	if e := got[0]; e.Reason != "bad" || e.RawPosition != 3 || e.ReasonCode != "" || e.Record.Payload != "x" {
		t.Fatalf("entry %+v", e)
	}
}

func TestRoundTripAndRoll(t *testing.T) {
	dir := t.TempDir()
	w, err := quarantine.Open(quarantine.Options{Dir: dir, FileMaxBytes: 2048})
	if err != nil {
		t.Fatal(err)
	}
	for b := 0; b < 10; b++ {
		if err := w.Reject(context.Background(), recs("pg", b*5, 5, b%2 == 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "q-*.ndjson"))
	if len(names) < 3 {
		t.Fatalf("%d files, want the 2 KiB limit to roll several", len(names))
	}
	got, err := quarantine.ReadDir(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 50 {
		t.Fatalf("read %d entries, want 50", len(got))
	}
	for i, e := range got {
		want := recs("pg", i, 1, (i/5)%2 == 1)[0]
		foundBy := "live"
		if want.Recovery {
			foundBy = "recovery"
		}
		checkRejection(t, e, want)
		if e.Sink != "pg" || e.RawPosition != uint64(i) || e.FoundBy != foundBy ||
			e.Record.Source != "kafka:orders" || !strings.HasPrefix(e.Record.ID, fmt.Sprintf("%02x%02x", byte(i), byte(i>>8))) {
			t.Fatalf("entry %d = %+v", i, e)
		}
		wantEnc := "utf8"
		if i%3 == 0 {
			wantEnc = "base64"
		}
		if e.Record.PayloadEncoding != wantEnc {
			t.Fatalf("entry %d payload encoding %q, want %q", i, e.Record.PayloadEncoding, wantEnc)
		}
	}
	// Reopened, the writer counts what is there.
	w2, err := quarantine.Open(quarantine.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	var total int64
	for _, n := range names {
		fi, _ := os.Stat(n)
		total += fi.Size()
	}
	if w2.Bytes() != total {
		t.Fatalf("reopened writer counts %d bytes, files hold %d", w2.Bytes(), total)
	}
}

func TestFullRefusesWholeBatch(t *testing.T) {
	dir := t.TempDir()
	w, err := quarantine.Open(quarantine.Options{Dir: dir, MaxBytes: 1500})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	n := 0
	for ; n < 100; n++ {
		err := w.Reject(context.Background(), recs("pg", n, 1, false))
		if errors.Is(err, quarantine.ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 || n == 100 {
		t.Fatalf("full after %d records", n)
	}
	if w.Bytes() > 1500 {
		t.Fatalf("holds %d bytes past max 1500", w.Bytes())
	}
	got, _ := quarantine.ReadDir(vfs.OS, dir)
	if len(got) != n {
		t.Fatalf("read %d, wrote %d before full", len(got), n)
	}
}

// A failed fdatasync stops the writer: it is not retried, and every later
// batch is refused (the fan-out sheds it, counted).
func TestSyncFailureIsSticky(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule errorfs.Rule
	}{
		{"fdatasync EIO", errorfs.Rule{Op: errorfs.OpSync, After: 2}},
		{"write ENOSPC torn", errorfs.Rule{Op: errorfs.OpWrite, After: 1, Errno: 28, Torn: true}},
		{"directory fsync", errorfs.Rule{Op: errorfs.OpSyncDir}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			efs := errorfs.New(vfs.OS, tc.rule)
			w, err := quarantine.Open(quarantine.Options{FS: efs, Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			var failed error
			ok := 0
			for i := 0; i < 5 && failed == nil; i++ {
				if failed = w.Reject(context.Background(), recs("pg", i, 2, false)); failed == nil {
					ok++
				}
			}
			if !errors.Is(failed, quarantine.ErrStopped) {
				t.Fatalf("after %d good batches: %v, want ErrStopped", ok, failed)
			}
			syncs := efs.Calls(errorfs.OpSync)
			efs.Clear()
			if err := w.Reject(context.Background(), recs("pg", 100, 1, false)); !errors.Is(err, quarantine.ErrStopped) {
				t.Fatalf("after the failure: %v, want the writer stopped", err)
			}
			if efs.Calls(errorfs.OpSync) != syncs {
				t.Fatal("fdatasync called again after the failure")
			}
			// What was acknowledged before is intact; the torn batch is
			// at most a torn tail the reader skips.
			got, err := quarantine.ReadDir(vfs.OS, dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) < 2*ok {
				t.Fatalf("read %d, %d were acknowledged", len(got), 2*ok)
			}
		})
	}
}

// The quarantine lane is wired into the fan-out: a secondary's rejected
// records land in the directory with the sink's reason.
func TestFanoutQuarantinesToDir(t *testing.T) {
	rawDir, qDir := t.TempDir(), t.TempDir()
	w, err := quarantine.Open(quarantine.Options{Dir: qDir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	raw := mustRaw(t, rawDir)
	store, err := engine.OpenOffsetStore(ctx, vfs.OS, rawDir)
	if err != nil {
		t.Fatal(err)
	}
	rej := &rejectOdd{}
	f, err := engine.NewFanout(ctx, engine.FanoutOptions{Raw: raw, Store: store, FlushInterval: 10 * time.Millisecond,
		Secondaries: []engine.SecondaryConfig{{Sink: rej, Name: "odd", Quarantine: w}}})
	if err != nil {
		t.Fatal(err)
	}
	batch := make([]sink.Record, 20)
	for i := range batch {
		batch[i] = sink.Record{ID: sink.RecordID{byte(i), 1}, Payload: fmt.Appendf(nil, `{"i":%d}`, i), Received: time.Now(), Source: "t"}
	}
	if _, err := f.Commit(ctx, sink.NewBatch(batch)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var got []quarantine.Entry
	for len(got) < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d quarantined after 10s, want 10", len(got))
		}
		time.Sleep(10 * time.Millisecond)
		got, _ = quarantine.ReadDir(vfs.OS, qDir)
	}
	if err := f.Close(); err != nil { // closes the writer too
		t.Fatal(err)
	}
	if err := w.Reject(ctx, recs("odd", 0, 1, false)); err == nil {
		t.Fatal("the writer still accepts after the fan-out closed it")
	}
	for _, e := range got {
		if e.Sink != "odd" || e.RawPosition%2 != 1 || e.Reason != "odd record refused" || e.FoundBy != "live" ||
			e.ReasonCode != "sink-refused" || e.Stage != "secondary" || e.Component != "odd" || e.Attempts != 1 || e.FirstSeen == "" {
			t.Fatalf("entry %+v", e)
		}
	}
}
