package parquetsink

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

// withMeta gives records a key (an empty one for some), headers (a
// repeated name, a binary value) and an event time, leaving some bare.
func withMeta(recs []sink.Record) []sink.Record {
	for i := range recs {
		r := &recs[i]
		switch i % 3 {
		case 0:
			r.Key = []byte{'k', byte(i)}
			r.Headers = []sink.Header{{Key: "z", Value: []byte{byte(i)}}, {Key: "a", Value: []byte{0, 0xff}}, {Key: "z", Value: []byte("2")}}
			r.EventTime = t0.Add(-time.Duration(i) * time.Hour)
		case 1:
			r.Key = []byte{}
		}
	}
	return recs
}

func sameMeta(a, b sink.Record) bool { return sinktest.MetaDiff(b, a) == "" }

// TestRawMetadataThroughParquet: key, headers and event time survive the
// stage, the conversion to Parquet and every way of reading raw back —
// ReadDir, the sink's ReadFrom and a RawReader (what recovery reads).
func TestRawMetadataThroughParquet(t *testing.T) {
	dir := t.TempDir()
	s := open(t, rawOpts(nil, dir))
	want := withMeta(recsAt(0, 10))
	commit(t, s, want[:6])
	commit(t, s, want[6:])
	check := func(when string) {
		t.Helper()
		recs, err := ReadDir(vfs.OS, dir)
		if err != nil || len(recs) != len(want) {
			t.Fatalf("%s: ReadDir: %d records, %v", when, len(recs), err)
		}
		for i, r := range recs {
			if !sameMeta(r.sinkRecord(), want[i]) {
				t.Errorf("%s: ReadDir %d: key %q headers %q event %s; want %q %q %s", when, i, r.Key, r.Headers, r.EventTime, want[i].Key, want[i].Headers, want[i].EventTime)
			}
		}
		rr, err := OpenRawReader(vfs.OS, dir)
		if err != nil {
			t.Fatal(err)
		}
		defer rr.Close()
		got, err := rr.ReadFrom(context.Background(), 0, 100, 0)
		if err != nil || len(got) != len(want) {
			t.Fatalf("%s: RawReader: %d records, %v", when, len(got), err)
		}
		for i, p := range got {
			if !sameRecord(p.Record, want[i]) || !sameMeta(p.Record, want[i]) {
				t.Errorf("%s: RawReader %d: %+v, want %+v", when, i, p.Record, want[i])
			}
		}
	}
	check("staged")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*"+SuffixParquet)); len(m) != 1 {
		t.Fatalf("%d Parquet files after Close, want 1", len(m))
	}
	check("in Parquet")
	s = open(t, rawOpts(nil, dir))
	got, err := s.ReadFrom(context.Background(), 3, 4, 0)
	if err != nil || len(got) != 4 {
		t.Fatalf("ReadFrom: %d records, %v", len(got), err)
	}
	for _, p := range got {
		if !sameMeta(p.Record, want[p.Pos]) {
			t.Errorf("ReadFrom %d: %+v, want %+v", p.Pos, p.Record, want[p.Pos])
		}
	}
}

// oldRow is the schema of the files written before key, headers and
// event time existed.
type oldRow struct {
	ID          [16]byte `parquet:"weir_record_id"`
	Payload     []byte   `parquet:"payload"`
	Source      string   `parquet:"source,dict"`
	Durability  string   `parquet:"durability,dict"`
	ReceivedAt  int64    `parquet:"received_at,timestamp(nanosecond:utc)"`
	CommittedAt int64    `parquet:"committed_at,timestamp(nanosecond:utc)"`
}

// appendFrameV1 is how a stage frame was written before records had
// metadata (version 1).
func appendFrameV1(recs []sink.Record) []byte {
	le := binary.LittleEndian
	body := le.AppendUint64(nil, uint64(t0.UnixNano()))
	body = append(body, make([]byte, 32)...) // token
	body = le.AppendUint32(body, uint32(len(recs)))
	for _, r := range recs {
		body = append(body, r.ID[:]...)
		body = append(body, byte(r.Durability))
		body = le.AppendUint64(body, uint64(r.Received.UnixNano()))
		body = le.AppendUint32(body, uint32(len(r.Source)))
		body = append(body, r.Source...)
		body = le.AppendUint32(body, uint32(len(r.Payload)))
		body = append(body, r.Payload...)
	}
	fr := le.AppendUint32(nil, frameMarkerV1)
	fr = le.AppendUint32(fr, uint32(len(body)))
	fr = le.AppendUint32(fr, crc32.Checksum(body, castagnoli))
	return append(fr, body...)
}

// TestReadsVersion1Files: a Parquet file without the metadata columns and
// a version-1 stage (both written before record metadata existed) still
// read — through ReadDir, a RawReader and a sink that settles the stage
// at start — as records without key, headers or event time.
func TestReadsVersion1Files(t *testing.T) {
	dir := t.TempDir()
	old := recsAt(0, 5)
	rows := make([]oldRow, 3)
	for i := range rows {
		rows[i] = oldRow{ID: old[i].ID, Payload: old[i].Payload, Source: old[i].Source, Durability: old[i].Durability.String(),
			ReceivedAt: old[i].Received.UnixNano(), CommittedAt: t0.UnixNano()}
	}
	f, err := os.Create(filepath.Join(dir, rawBase(0)+SuffixParquet))
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[oldRow](f)
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	stage := append([]byte(stageMagicV1), appendFrameV1(old[3:])...)
	if err := os.WriteFile(filepath.Join(dir, rawBase(3)+SuffixStage), stage, 0o600); err != nil {
		t.Fatal(err)
	}
	checkOld := func(when string, got []sink.Record) {
		t.Helper()
		if len(got) != len(old) {
			t.Fatalf("%s: %d records, want %d", when, len(got), len(old))
		}
		for i := range got {
			if !sameRecord(got[i], old[i]) || got[i].Key != nil || got[i].Headers != nil || !got[i].EventTime.IsZero() {
				t.Errorf("%s: record %d: %+v, want %+v", when, i, got[i], old[i])
			}
		}
	}
	rr, err := OpenRawReader(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := rr.ReadFrom(context.Background(), 0, 100, 0)
	rr.Close()
	if err != nil {
		t.Fatal(err)
	}
	var got []sink.Record
	for _, p := range ps {
		got = append(got, p.Record)
	}
	checkOld("raw reader", got)
	s := open(t, rawOpts(nil, dir)) // settles the version-1 stage into Parquet
	more := withMeta(recsAt(5, 3))
	commit(t, s, more)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadDir(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, r := range recs {
		got = append(got, r.sinkRecord())
	}
	if len(got) != 8 {
		t.Fatalf("ReadDir after settling: %d records, want 8", len(got))
	}
	checkOld("settled", got[:5])
	for i, r := range got[5:] {
		if !sameMeta(r, more[i]) {
			t.Errorf("new record %d: %+v, want %+v", i, r, more[i])
		}
	}
}
