package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weir-io/weir/wab"
)

// damagedWAB makes a WAB directory whose only segment is sealed and has a
// bad second record among four.
func damagedWAB(t *testing.T) (dir, seg string) {
	t.Helper()
	dir = t.TempDir()
	seg = filepath.Join(dir, wab.ShardDirName(0), wab.SegmentName(1)+".sealed")
	if err := os.MkdirAll(filepath.Dir(seg), 0o700); err != nil {
		t.Fatal(err)
	}
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
