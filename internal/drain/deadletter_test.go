package drain

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// encodeV1 is the version-1 dead-letter meta as drains before reason codes
// wrote it: u8 1, id, u16 shard, u64 seq, u64 index, uvarint reason length,
// reason.
func encodeV1(id sink.RecordID, shard uint16, seq, index uint64, reason string) []byte {
	b := []byte{1}
	b = append(b, id[:]...)
	b = binary.BigEndian.AppendUint16(b, shard)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint64(b, index)
	b = binary.AppendUvarint(b, uint64(len(reason)))
	return append(b, reason...)
}

// Files written before reason codes existed still read: the reason becomes
// the error text, the code is unknown, the location is kept.
func TestDecodeMetaVersion1(t *testing.T) {
	id := sink.RecordID{1, 2, 3, 15: 0xff}
	m, err := DecodeMeta(encodeV1(id, 7, 1<<40, 12345, "bad json"))
	if err != nil {
		t.Fatal(err)
	}
	want := record.Meta{ID: id, HasID: true, Reject: &record.Rejection{
		Code: record.CodeUnknown, Error: "bad json", Shard: 7, Seq: 1 << 40, Index: 12345, HasLocation: true}}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("got %+v %+v, want %+v", m, m.Reject, want.Reject)
	}
}

func TestDecodeMetaVersion2(t *testing.T) {
	in := record.Meta{ID: sink.RecordID{9}, HasID: true, Source: "kafka:orders", Key: []byte("k"),
		Headers: []sink.Header{{Key: "h", Value: []byte("v")}}, EventTime: 42, OriginPos: "orders/3@1234",
		Reject: &record.Rejection{Code: record.CodeDecode, Stage: record.StageDrain, Component: "pg",
			Error: strings.Repeat("é", record.MaxErrorBytes), Attempts: 3, FirstSeen: 77}}
	m, err := DecodeMeta(record.Encode(&in))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Reject.Error) > record.MaxErrorBytes || !utf8.ValidString(m.Reject.Error) {
		t.Errorf("error text of %d bytes, valid %v", len(m.Reject.Error), utf8.ValidString(m.Reject.Error))
	}
	m.Reject.Error, in.Reject.Error = "", ""
	if !reflect.DeepEqual(m, in) {
		t.Errorf("got %+v %+v, want %+v", m, m.Reject, in.Reject)
	}
}

func TestDecodeMetaRejectsGarbage(t *testing.T) {
	good := record.Encode(&record.Meta{HasID: true, Reject: &record.Rejection{Error: "why"}})
	v1 := encodeV1(sink.RecordID{}, 0, 0, 0, "why")
	bad := map[string][]byte{
		"empty":       nil,
		"version":     append([]byte{9}, good[1:]...),
		"cut":         good[:len(good)-1],
		"v1 short":    v1[:10],
		"v1 trailing": append(append([]byte(nil), v1...), 'x'),
		"no id":       record.Encode(&record.Meta{Reject: &record.Rejection{Error: "why"}}),
		"no reject":   record.Encode(&record.Meta{HasID: true, Source: "x"}),
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

// The dead letter is a lane.Lane: what Reject writes reads back with its
// record, metadata and rejection, in the buffer's format.
func TestDeadLetterLane(t *testing.T) {
	dir := filepath.Join(t.TempDir(), DeadLetterDirName)
	dl, err := openDeadLetters(vfs.OS, dir, 1<<20, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	var l lane.Lane = dl
	if err := l.Reject(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if files, _ := dl.totals(); files != 0 {
		t.Fatalf("an empty batch wrote %d files", files)
	}
	in := []lane.Rejected{{
		Sink:      "pg",
		OriginPos: "orders/3@17",
		Record: sink.Record{ID: sink.RecordID{1, 2, 3}, Payload: []byte(`{"a":1}`), Durability: sink.Buffered,
			Received: time.Unix(0, 1234), Source: "kafka:orders", Key: []byte("k"),
			Headers: []sink.Header{{Key: "h", Value: []byte("v")}}, EventTime: time.Unix(0, 99)},
		Reject: record.Rejection{Code: record.CodeDecode, Stage: record.StageDrain, Component: "pg", Error: "not json",
			Attempts: 2, FirstSeen: 5678},
	}}
	if err := l.Reject(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	files, err := scanDeadLetters(vfs.OS, dir)
	if err != nil || len(files) != 1 {
		t.Fatalf("%v, %v", files, err)
	}
	if n, b := dl.totals(); n != 1 || b != files[0].Bytes || b != dl.size(in) {
		t.Fatalf("totals %d files %d bytes; file %d bytes, size() %d", n, b, files[0].Bytes, dl.size(in))
	}
	_, recs, err := ReadDeadLetter(vfs.OS, files[0].Path)
	if err != nil || len(recs) != 1 {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	r := recs[0]
	m := r.Meta
	if r.MetaErr != nil || string(r.Payload) != `{"a":1}` || r.Durability != 1 || r.Received.UnixNano() != 1234 ||
		m.ID != in[0].Record.ID || m.Source != "kafka:orders" || string(m.Key) != "k" || len(m.Headers) != 1 ||
		m.EventTime != 99 || m.OriginPos != "orders/3@17" || *m.Reject != in[0].Reject {
		t.Fatalf("read back %+v meta %+v reject %+v", r, m, m.Reject)
	}
}
