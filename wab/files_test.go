package wab

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
)

func TestSidecarRoundTrip(t *testing.T) {
	dir := t.TempDir()
	seg := filepath.Join(dir, SegmentName(3)+".sealed")
	if err := WriteSealed(vfs.OS, seg, Header{Shard: 0, Seq: 3}, []Record{{Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if got := ConfirmedPath(seg); got != filepath.Join(dir, SegmentName(3)+".confirmed") {
		t.Fatalf("ConfirmedPath = %s", got)
	}
	if n, err := ReadConfirmed(vfs.OS, seg); err != nil || n != 0 {
		t.Fatalf("no sidecar: %d, %v", n, err)
	}
	efs := errorfs.New(vfs.OS)
	for _, n := range []uint64{5, 7, 1 << 40} {
		if err := WriteConfirmed(efs, seg, n); err != nil {
			t.Fatal(err)
		}
		if got, err := ReadConfirmed(vfs.OS, seg); err != nil || got != n {
			t.Fatalf("ReadConfirmed = %d, %v; want %d", got, err, n)
		}
	}
	// Written through temp+fdatasync+rename+dirsync.
	if efs.CallsOn(errorfs.OpSync, ConfirmedPath(seg)+".tmp") != 3 || efs.CallsOn(errorfs.OpSyncDir, dir) != 3 || efs.Calls(errorfs.OpRename) != 3 {
		t.Fatal("sidecar not written durably")
	}
	// A failed write leaves the previous value.
	efs.Add(errorfs.Rule{Op: errorfs.OpSync, Path: "*.tmp"})
	if err := WriteConfirmed(efs, seg, 9); err == nil {
		t.Fatal("failed sidecar write reported success")
	}
	if got, _ := ReadConfirmed(vfs.OS, seg); got != 1<<40 {
		t.Fatalf("sidecar changed by a failed write: %d", got)
	}
	// Corrupt sidecar is an error, not zero.
	side := ConfirmedPath(seg)
	b, _ := os.ReadFile(side)
	b[10] ^= 1
	os.WriteFile(side, b, 0o600)
	var ce *CorruptionError
	if _, err := ReadConfirmed(vfs.OS, seg); !errors.As(err, &ce) {
		t.Fatalf("corrupt sidecar: %v", err)
	}
	os.WriteFile(side, b[:5], 0o600)
	if _, err := ReadConfirmed(vfs.OS, seg); !errors.As(err, &ce) {
		t.Fatalf("short sidecar: %v", err)
	}
	// RemoveSegment removes both, durably, and tolerates a missing sidecar.
	efs.Clear()
	if err := RemoveSegment(efs, seg); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{seg, side} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s still exists", p)
		}
	}
	if err := RemoveSegment(vfs.OS, seg); err != nil {
		t.Fatalf("removing twice: %v", err)
	}
}

func TestWriteSealedDeadLetter(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dl_00000001.wab.sealed")
	recs := []Record{
		{Durability: Durable, Received: 10, Meta: []byte("reason: bad json"), Payload: []byte("{")},
		{Durability: Buffered, Received: 20, Meta: nil, Payload: []byte("")},
		{Durability: Durable, Received: 30, Meta: []byte("m"), Payload: bytes.Repeat([]byte("p"), 5000)},
	}
	h := Header{Shard: DeadLetterShard, Seq: 1, Instance: [16]byte{1, 2, 3}}
	if err := WriteSealed(vfs.OS, path, h, recs); err != nil {
		t.Fatal(err)
	}
	if err := WriteSealed(vfs.OS, path, h, recs); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("overwrite: %v", err)
	}
	r, err := OpenSegment(vfs.OS, path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := r.Header()
	if got.Shard != DeadLetterShard || got.Seq != 1 || got.Version != Version || got.UID == 0 || got.Created == 0 || got.Instance != h.Instance {
		t.Fatalf("header %+v", got)
	}
	for i, want := range recs {
		rec, err := r.Next()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if rec.Durability != want.Durability || rec.Received != want.Received || !bytes.Equal(rec.Meta, want.Meta) || !bytes.Equal(rec.Payload, want.Payload) {
			t.Fatalf("record %d: %+v", i, rec)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after last: %v", err)
	}
	ft, ok := r.Footer()
	if !ok || ft != (Footer{Records: 3, FirstReceived: 10, LastReceived: 30}) {
		t.Fatalf("footer %+v %v", ft, ok)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("Next after EOF: %v", err)
	}
	info, err := InspectSegment(vfs.OS, path)
	if err != nil || !info.OK() || info.Records != 3 || !info.HasFooter || info.TornTail() {
		t.Fatalf("inspect: %+v %v", info, err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(m) != 0 {
		t.Fatalf("temp files left: %v", m)
	}
}

func TestRecordID(t *testing.T) {
	h := Header{Shard: 2, UID: 77, Instance: [16]byte{9}}
	a := RecordID(h, 0, []byte("p"))
	if a != RecordID(h, 0, []byte("p")) {
		t.Fatal("not deterministic")
	}
	variants := []struct {
		h   Header
		idx uint64
		p   string
	}{
		{Header{Shard: 3, UID: 77, Instance: [16]byte{9}}, 0, "p"},
		{Header{Shard: 2, UID: 78, Instance: [16]byte{9}}, 0, "p"},
		{Header{Shard: 2, UID: 77, Instance: [16]byte{8}}, 0, "p"},
		{h, 1, "p"},
		{h, 0, "q"},
	}
	for _, v := range variants {
		if RecordID(v.h, v.idx, []byte(v.p)) == a {
			t.Fatalf("id collision for %+v", v)
		}
	}
	// Seq, Created and Version do not enter the id: a replay is stable.
	h2 := h
	h2.Seq, h2.Created = 5, 12345
	if RecordID(h2, 0, []byte("p")) != a {
		t.Fatal("id depends on fields outside its definition")
	}
}

func TestInspectOpenSegment(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, testOpts(dir))
	for i := range 3 {
		if err := submit(t, l, 0, Durable, int64(100+i), []byte("abc")); err != nil {
			t.Fatal(err)
		}
	}
	crash(t, l)
	path := filepath.Join(dir, "shard-000", SegmentName(1))
	info, err := InspectSegment(vfs.OS, path)
	if err != nil || !info.OK() || info.Records != 3 || info.HasFooter || info.FirstReceived != 100 || info.LastReceived != 102 {
		t.Fatalf("clean open segment: %+v %v", info, err)
	}
	size, end := info.Size, info.RecordsEnd // a sync mark may follow the records
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{0, 0, 0, 40, 1, 2})
	f.Close()
	before, _ := os.ReadFile(path)
	info, err = InspectSegment(vfs.OS, path)
	if err != nil || !info.TornTail() || info.Records != 3 || info.RecordsEnd != end || info.Corruption.Offset != size {
		t.Fatalf("torn open segment: %+v %v", info, err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("InspectSegment modified the file")
	}
}
