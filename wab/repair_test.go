package wab

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
)

func TestRepairOpenSegment(t *testing.T) {
	src, data, offs := openSegmentImage(t, slices.Repeat([]Durability{Durable}, 6), 1)
	img := slices.Clone(data)
	img[offs[2]+FrameOverhead+1] ^= 0x20
	path, _, err := reopen(t, src, img)
	if err == nil {
		t.Fatal("Open accepted the damaged segment")
	}
	dir := filepath.Dir(filepath.Dir(path))

	// Without cut: a report, nothing changed.
	got, err := Repair(context.Background(), nil, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	cut := offs[1] + RecordSize(0, len("record-01-")+30) // a sync mark may follow
	want := Damage{Path: path, Offset: cut, RecordsKept: 2, RecordsDropped: 3, BytesDropped: int64(len(img)) - cut}
	if len(got) != 1 || !sameDamage(got[0], want) {
		t.Fatalf("Repair reported %+v, want %+v", got, want)
	}
	if b, _ := os.ReadFile(path); !slices.Equal(b, img) {
		t.Fatal("Repair without cut modified the file")
	}

	// With cut: the file ends at the damage; Open then seals it.
	got, err = Repair(context.Background(), nil, dir, true)
	if err != nil || len(got) != 1 || !got[0].Cut || got[0].Removed {
		t.Fatalf("Repair cut: %+v, %v", got, err)
	}
	l := mustOpen(t, testOpts(dir))
	mustClose(t, l)
	if recs := payloads(readAllSealed(t, nil, dir)); len(recs) != 2 {
		t.Fatalf("after the cut: %d records, want 2", len(recs))
	}
	if got, err := Repair(context.Background(), nil, dir, true); err != nil || len(got) != 0 {
		t.Fatalf("second repair: %+v, %v", got, err)
	}
}

func TestRepairSealedSegment(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, testOpts(dir))
	for i := range 5 {
		if err := submit(t, l, 0, Durable, int64(i), []byte("sealed-record")); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, l)
	path := filepath.Join(dir, "shard-000", SegmentName(1)+".sealed")
	offs := frameOffsets(t, path)
	// The drain had delivered four records.
	if err := WriteProgress(vfs.OS, path, Progress{Records: 4, Offset: offs[4]}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	b[offs[1]+FrameOverhead] ^= 1
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Repair(context.Background(), nil, dir, true)
	if err != nil || len(got) != 1 || !got[0].Sealed || got[0].RecordsKept != 1 || got[0].RecordsDropped != 3 || !got[0].Cut {
		t.Fatalf("Repair: %+v, %v", got, err)
	}
	info, err := InspectSegment(vfs.OS, path)
	if err != nil || !info.OK() || info.Records != 1 || !info.HasFooter {
		t.Fatalf("after the cut: %+v, %v", info, err)
	}
	if p, err := ReadProgress(vfs.OS, path); err != nil || p != (Progress{Records: 1, Offset: offs[0] + RecordSize(0, len("sealed-record"))}) {
		t.Fatalf("sidecar after the cut: %+v, %v", p, err)
	}

	// A segment whose first record is damaged keeps nothing: removed.
	b, _ = os.ReadFile(path)
	b[HeaderSize+FrameOverhead] ^= 1
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = Repair(context.Background(), nil, dir, true)
	if err != nil || len(got) != 1 || !got[0].Removed {
		t.Fatalf("Repair: %+v, %v", got, err)
	}
	for _, p := range []string{path, ConfirmedPath(path)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s not removed: %v", p, err)
		}
	}
}

func TestRepairRefusesLiveDirectory(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, testOpts(dir))
	defer mustClose(t, l)
	if _, err := Repair(context.Background(), nil, dir, true); !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("Repair beside a live log: %v, want vfs.ErrLocked", err)
	}
}

func sameDamage(a, b Damage) bool {
	a.Reason, b.Reason = "", ""
	return a == b
}
