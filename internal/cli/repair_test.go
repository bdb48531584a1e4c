package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

// firstSealed returns a new WAB directory and the path of the first
// sealed segment of its shard 0, whose directory it creates.
func firstSealed(t *testing.T) (dir, seg string) {
	dir = t.TempDir()
	seg = filepath.Join(dir, wab.ShardDirName(0), wab.SegmentName(1)+".sealed")
	if err := os.MkdirAll(filepath.Dir(seg), 0o700); err != nil {
		t.Fatal(err)
	}
	return dir, seg
}

// damagedWAB makes a WAB directory whose only segment is sealed and has a
// bad second record among four.
func damagedWAB(t *testing.T) (dir, seg string) {
	t.Helper()
	dir, seg = firstSealed(t)
	recs := make([]wab.Record, 4)
	for i := range recs {
		recs[i] = wab.Record{Received: int64(i + 1), Payload: []byte("0123456789")}
	}
	if err := wab.WriteSealed(nil, seg, wab.Header{Shard: 0, Seq: 1}, recs); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[wab.HeaderSize+wab.RecordSize(0, 10)+wab.FrameOverhead+2] ^= 0x10
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, seg
}

func runMain(args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	code := Main(args, strings.NewReader(""), &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestRepair(t *testing.T) {
	dir, seg := damagedWAB(t)
	before, _ := os.ReadFile(seg)
	out, _, code := runMain("repair", dir)
	if code != 1 || !strings.Contains(out, filepath.Base(seg)) || !strings.Contains(out, "report only") ||
		!strings.Contains(out, "2 valid records after the damage") {
		t.Fatalf("repair without --cut: exit %d\n%s", code, out)
	}
	if after, _ := os.ReadFile(seg); !bytes.Equal(before, after) {
		t.Fatal("repair without --cut changed the segment")
	}
	out, _, code = runMain("repair", "--cut", "--wab-dir", dir)
	if code != 0 || !strings.Contains(out, "cut") {
		t.Fatalf("repair --cut: exit %d\n%s", code, out)
	}
	out, _, code = runMain("repair", dir)
	if code != 0 || !strings.Contains(out, "no damaged segments") {
		t.Fatalf("repair after the cut: exit %d\n%s", code, out)
	}
	if _, _, code := runMain("verify", dir); code != 0 {
		t.Fatalf("verify after the cut: exit %d", code)
	}
}

func TestRepairRefusesRunningDaemon(t *testing.T) {
	dir, _ := damagedWAB(t)
	l, err := wab.Open(context.Background(), wab.Options{Dir: dir, Shards: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	_, errOut, code := runMain("repair", "--cut", dir)
	if code != 1 || !strings.Contains(errOut, "is weir serve running?") {
		t.Fatalf("repair beside a live WAB: exit %d\n%s", code, errOut)
	}
}

// salvageWAB makes a WAB directory whose only segment is sealed and holds
// six records of an idempotent producer, the third of them damaged. It
// returns the segment's path and the sink records (ids included) the drain
// made of the six before the damage.
func salvageWAB(t *testing.T) (dir, seg string, want []sink.Record, frame int64) {
	t.Helper()
	dir, seg = firstSealed(t)
	recs := make([]wab.Record, 6)
	for i := range recs {
		m := record.Meta{Producer: record.ProducerID{9}, Seq: uint64(i), HasProducer: true, Key: []byte{byte(i)}}
		recs[i] = wab.Record{Received: int64(i + 1), Meta: record.Encode(&m), Payload: fmt.Appendf(nil, "payload-%d", i)}
	}
	h := wab.Header{Shard: 0, Seq: 1, Flags: wab.FlagSyncMarks | wab.FlagTimeOrderedIDs}
	if err := wab.WriteSealed(nil, seg, h, recs); err != nil {
		t.Fatal(err)
	}
	want = sinkRecords(t, seg)
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	frame = wab.RecordSize(len(recs[0].Meta), len(recs[0].Payload))
	third := wab.HeaderSize + 2*frame
	b[third+wab.FrameOverhead+int64(len(recs[0].Meta))+1] ^= 0x10
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, seg, want, frame
}

// sinkRecords reads a clean segment as the drain hands it to sinks.
func sinkRecords(t *testing.T, seg string) []sink.Record {
	t.Helper()
	r, err := wab.OpenSegment(vfs.OS, seg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []sink.Record
	for i := uint64(0); ; i++ {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		sr, err := drain.SinkRecord(r.Header(), i, rec)
		if err != nil {
			t.Fatal(err)
		}
		sr.Payload = slices.Clone(sr.Payload)
		sr.Key = slices.Clone(sr.Key)
		out = append(out, sr)
	}
}

func TestRepairSalvage(t *testing.T) {
	dir, seg, want, frame := salvageWAB(t)
	damaged, _ := os.ReadFile(seg)
	out, errOut, code := runMain("repair", "--salvage", dir)
	if code != 0 {
		t.Fatalf("repair --salvage: exit %d\n%s\n%s", code, out, errOut)
	}
	rel, _ := filepath.Rel(dir, seg)
	aside := filepath.Join(wab.DamagedDirName, rel)
	third := wab.HeaderSize + 2*frame
	for _, s := range []string{
		fmt.Sprintf("%s (sealed): damage at offset %d", rel, third),
		fmt.Sprintf("kept  [64, %d)  2 records", third),
		fmt.Sprintf("lost  [%d, %d)  %d bytes, 1 frames", third, third+frame, frame),
		fmt.Sprintf("kept  [%d, %d)  3 records", third+frame, third+4*frame),
		fmt.Sprintf("5 records kept, %d bytes in 1 ranges lost", frame),
		"the damaged original is kept at " + aside,
		fmt.Sprintf("1 damaged files, 1 salvaged: 5 records kept, %d bytes lost", frame),
	} {
		if !strings.Contains(out, s) {
			t.Fatalf("repair --salvage output lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "derived from their position") {
		t.Fatalf("records of an idempotent producer said to change id:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, aside)); err != nil || !bytes.Equal(b, damaged) {
		t.Fatalf("the damaged original is not kept at %s: %v", aside, err)
	}
	// The five valid records survive with their ids, keys and payloads.
	got := sinkRecords(t, seg)
	want = slices.Delete(want, 2, 3)
	if len(got) != len(want) {
		t.Fatalf("%d records after salvage, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].ID != want[i].ID || !bytes.Equal(got[i].Payload, want[i].Payload) || !bytes.Equal(got[i].Key, want[i].Key) {
			t.Fatalf("record %d after salvage: %+v, want %+v", i, got[i], want[i])
		}
	}
	if out, _, code := runMain("verify", dir); code != 0 {
		t.Fatalf("verify after salvage: exit %d\n%s", code, out)
	}
	if out, _, code := runMain("repair", dir); code != 0 || !strings.Contains(out, "no damaged segments") {
		t.Fatalf("repair after salvage: exit %d\n%s", code, out)
	}
}

// TestRepairSalvageDiskFull: an fdatasync that fails with ENOSPC while the
// salvaged segment is written stops the command with exit 1 and leaves the
// damaged segment as it was.
func TestRepairSalvageDiskFull(t *testing.T) {
	dir, seg, _, _ := salvageWAB(t)
	damaged, _ := os.ReadFile(seg)
	fsys := errorfs.New(vfs.OS, errorfs.Rule{Op: errorfs.OpSync, Path: "*.sealed.tmp", Errno: syscall.ENOSPC})
	var out, errOut bytes.Buffer
	code := repairOn(fsys, []string{"--salvage", "--wab-dir", dir}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "disk full") || !strings.Contains(out.String(), "not salvaged") {
		t.Fatalf("repair --salvage on a full disk: exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	if b, _ := os.ReadFile(seg); !bytes.Equal(b, damaged) {
		t.Fatal("the damaged segment changed")
	}
	if n := fsys.CallsOn(errorfs.OpSync, seg+".tmp"); n != 1 {
		t.Fatalf("fdatasync of the new segment called %d times, want 1 (never retried)", n)
	}
	if _, err := os.Stat(seg + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temporary file left behind: %v", err)
	}
}

func TestRepairSalvageUsage(t *testing.T) {
	dir, _, _, _ := salvageWAB(t)
	if _, errOut, code := runMain("repair", "--cut", "--salvage", dir); code != 2 || !strings.Contains(errOut, "exclude") {
		t.Fatalf("repair --cut --salvage: exit %d\n%s", code, errOut)
	}
	if _, errOut, code := runMain("repair", "--help"); code != 0 || !strings.Contains(errOut, "[--cut | --salvage]") ||
		!strings.Contains(errOut, "DIR/"+wab.DamagedDirName+"/shard-NNN/") {
		t.Fatalf("repair --help: exit %d\n%s", code, errOut)
	}
	if _, errOut, _ := runMain(); !strings.Contains(errOut, "weir repair [--cut | --salvage]") {
		t.Fatal("the command list does not mention --salvage")
	}
}

// TestRepairSalvagePositionIDs: records without an id of their own that
// follow lost bytes are counted as getting a new id.
func TestRepairSalvagePositionIDs(t *testing.T) {
	dir, _ := damagedWAB(t)
	out, _, code := runMain("repair", "--salvage", dir)
	if code != 0 || !strings.Contains(out, "2 kept records follow lost bytes, 2 of them with an id derived from their position") {
		t.Fatalf("repair --salvage: exit %d\n%s", code, out)
	}
}
