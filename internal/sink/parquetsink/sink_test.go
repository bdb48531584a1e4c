package parquetsink

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/sink"
)

var t0 = time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)

// mkRecords makes n records tagged by tag, with binary payloads.
func mkRecords(tag string, n int) []sink.Record {
	out := make([]sink.Record, n)
	for i := range out {
		sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", tag, i))
		p := append([]byte{0, 0xff, byte(i)}, sum[:i%32]...)
		out[i] = sink.Record{ID: sink.RecordID(sum[:16]), Payload: p, Durability: sink.Durability(i % 2),
			Received: t0.Add(time.Duration(i) * time.Nanosecond), Source: "socket"}
	}
	return out
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time         { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration)    { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func newClock() *clock                  { return &clock{t: t0} }
func ctxT(t *testing.T) context.Context { return t.Context() }

func open(t *testing.T, o Options) *Sink {
	t.Helper()
	s, err := New(ctxT(t), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func commit(t *testing.T, s *Sink, recs []sink.Record) {
	t.Helper()
	res, err := s.Commit(ctxT(t), sink.NewBatch(recs))
	if err != nil || len(res.Rejected) != 0 {
		t.Fatalf("Commit: %v %v", res, err)
	}
}

func names(t *testing.T, dir, suffix string) []string {
	t.Helper()
	all, err := vfs.OS.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range all {
		if strings.HasSuffix(n, suffix) {
			out = append(out, n)
		}
	}
	return out
}

// checkAll reads dir back and wants exactly want, in order.
func checkAll(t *testing.T, dir string, want []sink.Record) []Record {
	t.Helper()
	got, err := ReadDir(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i, g := range got {
		w := want[i]
		if g.ID != w.ID || !bytes.Equal(g.Payload, w.Payload) || g.Source != w.Source ||
			g.Durability != w.Durability || !g.Received.Equal(w.Received) {
			t.Fatalf("record %d at %v: got %+v, want %+v", i, g.Pos, g, w)
		}
		if i > 0 && !got[i-1].Pos.Before(g.Pos) {
			t.Fatalf("positions out of order: %v then %v", got[i-1].Pos, g.Pos)
		}
	}
	return got
}

func TestRoundTripAndPositions(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir})
	a, b := mkRecords("a", 300), mkRecords("b", 5)
	b[0].Payload = bytes.Repeat([]byte{0xc3}, 3)
	b[1].Payload = nil
	b[2].Source = "test-é"
	commit(t, s, a)
	commit(t, s, b)
	want := append(append([]sink.Record(nil), a...), b...)
	checkAll(t, dir, want) // from the stage
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := names(t, dir, SuffixStage); len(n) != 0 {
		t.Fatalf("stages left after Close: %v", n)
	}
	got := checkAll(t, dir, want) // from Parquet: same rows, same positions
	if got[0].Pos.Row != 0 || got[304].Pos.Row != 304 || got[0].Pos.File != got[304].Pos.File {
		t.Fatalf("positions %v .. %v", got[0].Pos, got[304].Pos)
	}
	if got[0].Committed.Before(t0) {
		t.Fatalf("committed_at %v", got[0].Committed)
	}
	// Read from a position.
	var rest []Record
	for r, err := range Records(vfs.OS, dir, Position{File: got[0].Pos.File, Row: 299}) {
		if err != nil {
			t.Fatal(err)
		}
		rest = append(rest, r)
	}
	if len(rest) != 6 || rest[0].ID != a[299].ID || rest[1].ID != b[0].ID {
		t.Fatalf("from row 299: %d records", len(rest))
	}
	// Stopping early is fine.
	for range Records(vfs.OS, dir, Position{}) {
		break
	}
}

func TestRollBySizeAndAge(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	s := open(t, Options{Dir: dir, MaxBytes: 32 << 10, MaxAge: time.Minute, Now: clk.Now})
	var all []sink.Record
	for i := range 10 {
		recs := mkRecords(fmt.Sprint("size", i), 200) // ~12 KiB per batch
		commit(t, s, recs)
		all = append(all, recs...)
	}
	if n := len(names(t, dir, SuffixParquet)); n < 2 {
		t.Fatalf("%d Parquet files after ~115 KiB with max_bytes 32 KiB", n)
	}
	before := len(names(t, dir, SuffixParquet))
	recs := mkRecords("age", 3)
	commit(t, s, recs)
	all = append(all, recs...)
	clk.Add(time.Minute)
	commit(t, s, nil) // age is checked at every commit, even an empty one
	if n := len(names(t, dir, SuffixParquet)); n != before+1 {
		t.Fatalf("%d Parquet files after the age limit, want %d", n, before+1)
	}
	if n := names(t, dir, SuffixStage); len(n) != 0 {
		t.Fatalf("stage not rolled by age: %v", n)
	}
	checkAll(t, dir, all)
	// Names sort in creation order and carry the writer id.
	files := names(t, dir, SuffixParquet)
	for i, f := range files {
		p, ok := parseName(f)
		if !ok || p.writer != s.WriterID() {
			t.Fatalf("file %q: parsed %+v", f, p)
		}
		if i > 0 && files[i-1] >= f {
			t.Fatalf("names out of order: %v", files)
		}
	}
}

// TestGenericReader reads the files with parquet-go's own untyped reader:
// the schema, zstd compression and the values.
func TestGenericReader(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir})
	recs := mkRecords("generic", 50)
	recs[0].Key = []byte("k0")
	recs[0].EventTime = t0.Add(-time.Hour)
	recs[1].Headers = []sink.Header{{Key: "h", Value: []byte("v")}, {Key: "h", Value: []byte("w")}}
	commit(t, s, recs)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	files := names(t, dir, SuffixParquet)
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	raw, err := os.ReadFile(filepath.Join(dir, files[0]))
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if f.NumRows() != 50 {
		t.Fatalf("%d rows", f.NumRows())
	}
	want := map[string]string{
		"weir_record_id": "FIXED_LEN_BYTE_ARRAY", "payload": "BYTE_ARRAY", "source": "BYTE_ARRAY",
		"durability": "BYTE_ARRAY", "received_at": "INT64", "committed_at": "INT64",
		"key": "BYTE_ARRAY", "headers": "LIST", "event_time": "INT64",
	}
	fields := f.Schema().Fields()
	if len(fields) != len(want) {
		t.Fatalf("schema %v", f.Schema())
	}
	for _, fl := range fields {
		if fl.Name() == "headers" {
			if fl.Leaf() || fl.Type().LogicalType() == nil || fl.Type().LogicalType().List == nil {
				t.Errorf("column headers: %v, want a LIST", fl.Type())
			}
			continue
		}
		if got := fl.Type().Kind().String(); got != want[fl.Name()] {
			t.Errorf("column %s: %s, want %s", fl.Name(), got, want[fl.Name()])
		}
	}
	if !strings.Contains(f.Schema().String(), "TIMESTAMP(isAdjustedToUTC=true,unit=NANOS)") ||
		!strings.Contains(f.Schema().String(), "source (STRING)") {
		t.Errorf("schema:\n%s", f.Schema())
	}
	for _, rg := range f.Metadata().RowGroups {
		for _, c := range rg.Columns {
			if c.MetaData.Codec != format.Zstd {
				t.Errorf("column %v: codec %v, want ZSTD", c.MetaData.PathInSchema, c.MetaData.Codec)
			}
		}
	}
	rows := make([]parquet.Row, 60)
	rd := parquet.NewReader(f)
	defer rd.Close()
	n, _ := rd.ReadRows(rows)
	if n != 50 {
		t.Fatalf("generic reader: %d rows", n)
	}
	col := func(name ...string) int {
		leaf, ok := f.Schema().Lookup(name...)
		if !ok {
			t.Fatalf("no column %s", name)
		}
		return leaf.ColumnIndex
	}
	// values is a row's values of one column (a repeated one has several).
	values := func(r parquet.Row, c int) (out []parquet.Value) {
		for _, v := range r {
			if v.Column() == c {
				out = append(out, v)
			}
		}
		return out
	}
	if got := values(rows[0], col("key")); len(got) != 1 || string(got[0].ByteArray()) != "k0" {
		t.Errorf("key %v", got)
	}
	if got := values(rows[0], col("event_time")); len(got) != 1 || got[0].Int64() != recs[0].EventTime.UnixNano() {
		t.Errorf("event_time %v", got)
	}
	if got := values(rows[1], col("key")); len(got) != 1 || !got[0].IsNull() {
		t.Errorf("key of a record without one: %v, want null", got)
	}
	if got := values(rows[1], col("headers", "list", "element", "value")); len(got) != 2 || string(got[0].ByteArray()) != "v" || string(got[1].ByteArray()) != "w" {
		t.Errorf("header values %v", got)
	}
	r0 := rows[0]
	if got := values(r0, col("source"))[0].String(); got != "socket" {
		t.Errorf("source %q", got)
	}
	if got := values(r0, col("durability"))[0].String(); got != "durable" {
		t.Errorf("durability %q", got)
	}
	if got := values(r0, col("weir_record_id"))[0].ByteArray(); !bytes.Equal(got, recs[0].ID[:]) {
		t.Errorf("weir_record_id %x", got)
	}
	if got := values(r0, col("payload"))[0].ByteArray(); !bytes.Equal(got, recs[0].Payload) {
		t.Errorf("payload %x", got)
	}
	if got := values(r0, col("received_at"))[0].Int64(); got != recs[0].Received.UnixNano() {
		t.Errorf("received_at %d", got)
	}
}

func TestRecoveryOfLeftovers(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir})
	a := mkRecords("crash", 40)
	commit(t, s, a)
	b := mkRecords("crash2", 7)
	commit(t, s, b)
	st := s.cur
	stageFile := filepath.Join(dir, st.base+SuffixStage)
	// Simulate a crash: the descriptor dies, nothing is finished; a torn
	// frame follows the committed ones, and a half-written Parquet file
	// of another base lies next to it.
	_ = st.f.Close()
	s.cur = nil
	_ = s.lock.Close()
	s.lock = nil
	s.closed = true
	fr := appendFrame(nil, t0, sink.DedupToken{}, mkRecords("torn", 3), nil)
	f, err := os.OpenFile(stageFile, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(fr[:len(fr)-5])
	f.Close()
	tmp := filepath.Join(dir, baseName(1, 0, st.base[len(st.base)-8:])+SuffixTemp)
	os.WriteFile(tmp, []byte("PAR1 half"), 0o640)

	s2 := open(t, Options{Dir: dir})
	if n := names(t, dir, SuffixStage); len(n) != 0 {
		t.Fatalf("stage left after recovery: %v", n)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("temporary Parquet file not removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, lockName(st.base[len(st.base)-8:]))); !os.IsNotExist(err) {
		t.Fatalf("dead writer's lock file not removed: %v", err)
	}
	all := append(append([]sink.Record(nil), a...), b...)
	checkAll(t, dir, all)
	c := mkRecords("after", 5)
	commit(t, s2, c)
	checkAll(t, dir, append(all, c...))
}

func TestRecoveryStageAndParquetBoth(t *testing.T) {
	// A crash between the rename of the Parquet file and the removal of
	// its stage: the Parquet file is complete and wins.
	dir := t.TempDir()
	s := open(t, Options{Dir: dir})
	a := mkRecords("both", 10)
	commit(t, s, a)
	stageFile := filepath.Join(dir, s.cur.base+SuffixStage)
	saved, err := os.ReadFile(stageFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(stageFile, saved, 0o640)
	checkAll(t, dir, a) // a reader prefers the Parquet file
	open(t, Options{Dir: dir})
	if n := names(t, dir, SuffixStage); len(n) != 0 {
		t.Fatalf("stage left: %v", n)
	}
	checkAll(t, dir, a)
}

func TestRecoveryRefusesCorruption(t *testing.T) {
	dir := t.TempDir()
	w := "0123abcd"
	var data []byte
	data = append(data, stageMagic...)
	good := appendFrame(nil, t0, sink.DedupToken{}, mkRecords("c1", 3), nil)
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 0xff
	data = append(data, good...)
	off := len(data)
	data = append(data, bad...)
	data = append(data, good...)
	name := baseName(5, 0, w) + SuffixStage
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o640); err != nil {
		t.Fatal(err)
	}
	_, err := New(ctxT(t), Options{Dir: dir})
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.Offset != int64(off) || ce.File != name {
		t.Fatalf("New on a corrupt stage: %v", err)
	}
	// The file is left as it was, for an operator.
	if got, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(got, data) {
		t.Fatal("corrupt stage was changed")
	}
}

// TestSyncFailure fails the fdatasync of a stage: the commit is transient,
// that file is never synced again, its committed records survive in
// Parquet, and the retry goes to a fresh file.
func TestSyncFailure(t *testing.T) {
	dir := t.TempDir()
	efs := errorfs.New(vfs.OS)
	s := open(t, Options{Dir: dir, FS: efs})
	a := mkRecords("before", 20)
	commit(t, s, a)
	stage1 := filepath.Join(dir, s.cur.base+SuffixStage)
	efs.Add(errorfs.Rule{Op: errorfs.OpSync, Path: "*" + SuffixStage, Once: true})
	b := mkRecords("failing", 30)
	_, err := s.Commit(ctxT(t), sink.NewBatch(b))
	if err == nil || !sink.IsTransient(err) {
		t.Fatalf("Commit with a failing fdatasync: %v, want transient", err)
	}
	if h := s.Health(ctxT(t)); h.State != sink.Degraded || !strings.Contains(h.Reason, "fdatasync") {
		t.Fatalf("Health after the failure: %+v", h)
	}
	syncs := efs.CallsOn(errorfs.OpSync, stage1)
	commit(t, s, b) // the drain's retry
	if h := s.Health(ctxT(t)); h.State != sink.Healthy {
		t.Fatalf("Health after the retry: %+v", h)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := efs.CallsOn(errorfs.OpSync, stage1); got != syncs {
		t.Fatalf("failed stage synced again: %d syncs, %d before the retry", got, syncs)
	}
	got := checkAll(t, dir, append(append([]sink.Record(nil), a...), b...))
	if got[0].Pos.File == got[len(got)-1].Pos.File {
		t.Fatal("the retry went to the abandoned file")
	}
}

// TestConversionFailure fails the fdatasync of the Parquet file being
// written: the commit stands (its records are durable in the stage), the
// sink is degraded, and the next commit writes a fresh Parquet file.
func TestConversionFailure(t *testing.T) {
	dir := t.TempDir()
	efs := errorfs.New(vfs.OS)
	clk := newClock()
	s := open(t, Options{Dir: dir, FS: efs, Now: clk.Now})
	a := mkRecords("conv", 20)
	commit(t, s, a)
	efs.Add(errorfs.Rule{Op: errorfs.OpSync, Path: "*" + SuffixTemp, Once: true})
	clk.Add(2 * time.Minute)
	b := mkRecords("conv2", 4)
	commit(t, s, b) // rolls a by age; the conversion fails
	if h := s.Health(ctxT(t)); h.State != sink.Degraded {
		t.Fatalf("Health after a failed conversion: %+v", h)
	}
	if n := names(t, dir, SuffixTemp); len(n) != 0 {
		t.Fatalf("temporary file left visible: %v", n)
	}
	checkAll(t, dir, append(append([]sink.Record(nil), a...), b...)) // from stages
	c := mkRecords("conv3", 4)
	commit(t, s, c) // settles the pending stage
	if h := s.Health(ctxT(t)); h.State != sink.Healthy {
		t.Fatalf("Health after settling: %+v", h)
	}
	if n := len(names(t, dir, SuffixParquet)); n != 1 {
		t.Fatalf("%d Parquet files, want 1", n)
	}
	checkAll(t, dir, append(append(append([]sink.Record(nil), a...), b...), c...))
}

// TestTwoWriters runs two sinks on one directory: names never collide,
// neither touches the other's open stage at start, and a reader sees all.
func TestTwoWriters(t *testing.T) {
	dir := t.TempDir()
	clk := newClock() // the same clock: equal nanoseconds in both names
	s1 := open(t, Options{Dir: dir, Now: clk.Now, MaxBytes: 8 << 10})
	a := mkRecords("w1", 10)
	commit(t, s1, a)
	s2 := open(t, Options{Dir: dir, Now: clk.Now, MaxBytes: 8 << 10}) // recovery must leave s1's stage alone
	if s1.WriterID() == s2.WriterID() {
		t.Fatal("two writers share an id")
	}
	if n := names(t, dir, SuffixStage); len(n) != 1 {
		t.Fatalf("stages %v", n)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	want := map[sink.RecordID]bool{}
	for _, r := range a {
		want[r.ID] = true
	}
	for w, s := range []*Sink{s1, s2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				recs := mkRecords(fmt.Sprintf("w%d-%d", w, i), 50)
				if _, err := s.Commit(context.Background(), sink.NewBatch(recs)); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, r := range recs {
					want[r.ID] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(s1.Close(), s2.Close()); err != nil {
		t.Fatal(err)
	}
	got, err := ReadDir(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[sink.RecordID]bool{}
	for _, r := range got {
		seen[r.ID] = true
	}
	if len(got) != len(want) || len(seen) != len(want) {
		t.Fatalf("read %d records (%d distinct), want %d", len(got), len(seen), len(want))
	}
	writers := map[string]int{}
	for _, n := range names(t, dir, SuffixParquet) {
		p, _ := parseName(n)
		writers[p.writer]++
	}
	if len(writers) != 2 {
		t.Fatalf("files by writer: %v", writers)
	}
}

func TestReplayedBatchSkipped(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir, MaxPayloadBytes: 10})
	recs := mkRecords("dup", 5)
	recs[2].Payload = bytes.Repeat([]byte{1}, 11)
	b := sink.NewBatch(recs)
	for range 2 {
		res, err := s.Commit(ctxT(t), b)
		if err != nil || len(res.Rejected) != 1 || res.Rejected[0].Index != 2 || res.Rejected[0].Code != sink.CodeOversize {
			t.Fatalf("Commit: %+v %v", res, err)
		}
	}
	got, err := ReadDir(vfs.OS, dir)
	if err != nil || len(got) != 4 {
		t.Fatalf("read %d records, %v; want 4 (the replay skipped)", len(got), err)
	}
}

func TestBadOptions(t *testing.T) {
	if _, err := New(ctxT(t), Options{}); err == nil {
		t.Fatal("no directory accepted")
	}
	if _, err := New(ctxT(t), Options{Dir: t.TempDir(), Compression: "max"}); err == nil {
		t.Fatal("bad compression accepted")
	}
}

// TestConvertRefusesShortReadBack: a stage that reads back fewer rows than
// were committed (a frame damaged after its commit) is never replaced by a
// Parquet file lacking them.
func TestConvertRefusesShortReadBack(t *testing.T) {
	dir := t.TempDir()
	data := append([]byte(stageMagic), appendFrame(nil, t0, sink.DedupToken{}, mkRecords("short", 4), nil)...)
	c := converter{fs: vfs.OS, dir: dir}
	base := baseName(1, 0, "0123abcd")
	if _, err := c.convert(bytes.NewReader(data), base+SuffixStage, int64(len(data)), base, 5); err == nil {
		t.Fatal("conversion of 4 rows accepted when 5 were committed")
	}
	if n := names(t, dir, ""); len(n) != 0 {
		t.Fatalf("files left visible: %v", n)
	}
	if _, err := c.convert(bytes.NewReader(data), base+SuffixStage, int64(len(data)), base, 4); err != nil {
		t.Fatal(err)
	}
	checkAll(t, dir, mkRecords("short", 4))
}
