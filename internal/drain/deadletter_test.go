package drain

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

func TestMetaRoundTrip(t *testing.T) {
	for _, m := range []DeadLetterMeta{
		{},
		{Reason: "bad json", ID: sink.RecordID{1, 2, 3, 15: 0xff}, Shard: 7, Seq: 1 << 40, Index: 12345},
		{Reason: strings.Repeat("r", 300), Shard: 0xffff, Seq: ^uint64(0), Index: ^uint64(0)},
	} {
		b := EncodeMeta(m)
		got, err := DecodeMeta(b)
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if got != m {
			t.Errorf("round trip: %+v, want %+v", got, m)
		}
		if b[0] != 1 || len(b) < metaFixedBytes+1 {
			t.Errorf("encoding %x", b)
		}
	}
}

func TestMetaTruncatesLongReason(t *testing.T) {
	long := strings.Repeat("é", MaxReasonBytes) // two bytes each
	got, err := DecodeMeta(EncodeMeta(DeadLetterMeta{Reason: "x" + long}))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Reason) > MaxReasonBytes || !utf8.ValidString(got.Reason) || len(got.Reason) < MaxReasonBytes-1 {
		t.Errorf("truncated reason: %d bytes, valid %v", len(got.Reason), utf8.ValidString(got.Reason))
	}
}

func TestDecodeMetaRejectsGarbage(t *testing.T) {
	good := EncodeMeta(DeadLetterMeta{Reason: "why"})
	bad := map[string][]byte{
		"empty":    nil,
		"short":    good[:10],
		"version":  append([]byte{9}, good[1:]...),
		"trailing": append(append([]byte(nil), good...), 'x'),
		"cut":      good[:len(good)-1],
	}
	for name, b := range bad {
		if _, err := DecodeMeta(b); !errors.Is(err, ErrBadMeta) {
			t.Errorf("%s: err %v, want ErrBadMeta", name, err)
		}
	}
}

func TestDeadLetterNames(t *testing.T) {
	if got := DeadLetterName(42); got != "dl_00000042.wab.sealed" {
		t.Errorf("name %q", got)
	}
	for name, want := range map[string]uint64{
		"dl_00000000.wab.sealed":  0,
		"dl_00000042.wab.sealed":  42,
		"dl_123456789.wab.sealed": 123456789,
	} {
		if got, ok := ParseDeadLetterName(name); !ok || got != want {
			t.Errorf("%s: %d %v", name, got, ok)
		}
	}
	for _, name := range []string{
		"dl_0042.wab.sealed", "dl_00000042.wab.sealed.tmp", "dl_0000004x.wab.sealed",
		"xx_00000042.wab.sealed", "dl_00000042.wab", "../dl_00000042.wab.sealed",
	} {
		if _, ok := ParseDeadLetterName(name); ok {
			t.Errorf("%s parsed", name)
		}
	}
}

// The lane's totals and next number are derived from disk, ignoring
// other files, and a rescan sees files removed behind the drain's back.
func TestDeadLetterScanAndRescan(t *testing.T) {
	dir := filepath.Join(t.TempDir(), DeadLetterDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int{
		DeadLetterName(3):            100,
		DeadLetterName(11):           50,
		"dl_00000099.wab.sealed.tmp": 1000,
		"README":                     7,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dl, err := openDeadLetters(vfs.OS, dir, 200, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if files, bytes := dl.totals(); files != 2 || bytes != 150 || dl.next != 12 {
		t.Errorf("totals %d files %d bytes, next %d", files, bytes, dl.next)
	}
	if dl.hasRoom(51) || !dl.hasRoom(50) {
		t.Error("cap check wrong")
	}
	if err := os.Remove(filepath.Join(dir, DeadLetterName(11))); err != nil {
		t.Fatal(err)
	}
	if err := dl.rescan(); err != nil {
		t.Fatal(err)
	}
	if files, bytes := dl.totals(); files != 1 || bytes != 100 || dl.next != 12 {
		t.Errorf("after rescan: %d files %d bytes, next %d (numbers must not be reused)", files, bytes, dl.next)
	}
	if err := os.Remove(filepath.Join(dir, DeadLetterName(3))); err != nil {
		t.Fatal(err)
	}
	if err := dl.rescan(); err != nil {
		t.Fatal(err)
	}
	if !dl.hasRoom(1 << 20) {
		t.Error("an empty lane must take a write larger than the cap")
	}
}

func TestRemoveDeadLetterRefusesOtherNames(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"../x", "shard-000/00000000000000000001.wab.sealed", "INSTANCE"} {
		if err := RemoveDeadLetter(vfs.OS, dir, name); err == nil {
			t.Errorf("%s removed", name)
		}
	}
}

func TestListDeadLettersMissingDir(t *testing.T) {
	files, err := ListDeadLetters(vfs.OS, t.TempDir())
	if err != nil || len(files) != 0 {
		t.Errorf("%v, %v", files, err)
	}
}
