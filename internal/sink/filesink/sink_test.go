package filesink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)

func rec(i int, payload string) sink.Record {
	var id sink.RecordID
	id[0], id[15] = byte(i>>8), byte(i)
	return sink.Record{
		ID:         id,
		Payload:    []byte(payload),
		Durability: sink.Durability(i % 2),
		Received:   t0.Add(time.Duration(i) * time.Microsecond),
		Source:     "socket",
	}
}

func batch(from, n int, size int) sink.Batch {
	rs := make([]sink.Record, n)
	for i := range rs {
		rs[i] = rec(from+i, strings.Repeat("x", size))
	}
	return sink.NewBatch(rs)
}

func open(t *testing.T, opts Options) *Sink {
	t.Helper()
	s, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func commit(t *testing.T, s *Sink, b sink.Batch) {
	t.Helper()
	res, err := s.Commit(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rejected) != 0 {
		t.Fatalf("rejected: %v", res.Rejected)
	}
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func sameRecords(t *testing.T, got []Line, want []sink.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ID != w.ID || !bytes.Equal(g.Payload, w.Payload) || g.Durability != w.Durability ||
			!g.Received.Equal(w.Received) || g.Source != w.Source {
			t.Errorf("record %d: got %+v, want %+v", i, g, w)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir})
	payloads := []string{
		"", "plain", `{"json":"inside"}`, "quote \" backslash \\ slash /",
		"ctl \x00\x01\x07\b\f\n\r\t\x1f\x7f end", "line\u2028sep\u2029para", "héllo wörld ✓ 🚀",
		"<script>&amp;</script>", "\xff\xfe binary", "\xc3\x28", "ok then \xed\xa0\x80 surrogate",
		string([]byte{0, 1, 2, 3, 250, 251, 252, 253, 254, 255}),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		b := make([]byte, r.IntN(64))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		payloads = append(payloads, string(b))
	}
	var want []sink.Record
	for i, p := range payloads {
		rr := rec(i, p)
		if i == 3 {
			rr.Source = "odd \"source\"\n"
		}
		rr.Received = time.Date(2025, 1, 2, 3, 4, 5, i, time.FixedZone("x", 3600))
		want = append(want, rr)
	}
	commit(t, s, sink.NewBatch(want[:10]))
	commit(t, s, sink.NewBatch(want[10:]))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, got, want)

	// Every line is valid JSON with exactly the documented fields.
	raw, err := os.ReadFile(filepath.Join(dir, got[0].File))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	if len(lines) != len(want) {
		t.Fatalf("%d lines", len(lines))
	}
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if fmt.Sprint(keys) != "[durability payload payload_encoding received_at source weir_record_id]" {
			t.Errorf("line %d keys %v", i, keys)
		}
		if bytes.ContainsAny(l, "\u2028\u2029") {
			t.Errorf("line %d holds a raw U+2028/U+2029", i)
		}
	}
	if !bytes.Contains(lines[5], []byte(`line\u2028sep\u2029para`)) {
		t.Errorf("U+2028 not escaped: %s", lines[5])
	}
	if want := `{"weir_record_id":"00000000000000000000000000000001","durability":"buffered","received_at":"2025-01-02T02:04:05.000000001Z","source":"socket","payload":"plain","payload_encoding":"utf8"}`; string(lines[1]) != want {
		t.Errorf("line 1:\n got %s\nwant %s", lines[1], want)
	}
	if !bytes.Contains(lines[8], []byte(`"payload_encoding":"base64"`)) || !bytes.Contains(lines[2], []byte(`"payload":"{\"json\":\"inside\"}"`)) {
		t.Errorf("encodings: %s / %s", lines[8], lines[2])
	}
}

var nameRE = regexp.MustCompile(`^weir-\d{20}-\d{6}\.ndjson(\.open)?$`)

func TestRollBySize(t *testing.T) {
	dir := t.TempDir()
	clk := testenv.NewClock(t0)
	s := open(t, Options{Dir: dir, MaxBytes: 4096, MaxAge: time.Hour, Now: clk.Now})
	var want []sink.Record
	for i := 0; i < 40; i++ {
		b := batch(i*10, 10, 20) // ~1.6 KiB per batch
		want = append(want, b.Records...)
		commit(t, s, b)
	}
	names := files(t, dir)
	if len(names) < 10 {
		t.Fatalf("only %d files: %v", len(names), names)
	}
	for i, n := range names {
		if !nameRE.MatchString(n) {
			t.Errorf("bad name %q", n)
		}
		if strings.HasSuffix(n, SuffixOpen) != (i == len(names)-1) {
			t.Errorf("only the last file may be open: %v", names)
		}
		if fi, _ := os.Stat(filepath.Join(dir, n)); fi.Size() > 4096 {
			t.Errorf("%s is %d bytes, over MaxBytes", n, fi.Size())
		}
	}
	if !slices.IsSorted(names) {
		t.Errorf("names not sorted: %v", names)
	}
	got, err := ReadDirFS(s.fs, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, got, want)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ = ReadDir(dir)
	sameRecords(t, got, want)
}

func TestOversizedBatchGetsItsOwnFile(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir, MaxBytes: 4096})
	commit(t, s, batch(0, 1, 10))
	commit(t, s, batch(1, 10, 1000)) // larger than MaxBytes on its own
	commit(t, s, batch(11, 1, 10))
	s.Close()
	names := files(t, dir)
	if len(names) != 3 {
		t.Fatalf("files %v", names)
	}
	got, _ := ReadDir(dir)
	if len(got) != 12 || got[1].File != names[1] || got[10].File != names[1] {
		t.Errorf("batch split across files")
	}
}

func TestRollByAge(t *testing.T) {
	dir := t.TempDir()
	clk := testenv.NewClock(t0)
	s := open(t, Options{Dir: dir, MaxAge: time.Minute, Now: clk.Now})
	commit(t, s, batch(0, 3, 10))
	clk.Advance(30 * time.Second)
	commit(t, s, batch(3, 3, 10))
	if n := files(t, dir); len(n) != 1 {
		t.Fatalf("rolled too early: %v", n)
	}
	clk.Advance(31 * time.Second)
	// An empty commit still checks the age.
	commit(t, s, sink.NewBatch(nil))
	names := files(t, dir)
	if len(names) != 1 || !strings.HasSuffix(names[0], SuffixDone) {
		t.Fatalf("not rolled by age: %v", names)
	}
	commit(t, s, batch(6, 3, 10))
	clk.Advance(2 * time.Minute)
	commit(t, s, batch(9, 3, 10))
	names = files(t, dir)
	if len(names) != 3 || !strings.HasSuffix(names[1], SuffixDone) || !strings.HasSuffix(names[2], SuffixOpen) {
		t.Fatalf("files %v", names)
	}
	want := fmt.Sprintf("weir-%020d-000000.ndjson", t0.UnixNano())
	if names[0] != want {
		t.Errorf("first file %q, want %q", names[0], want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range files(t, dir) {
		if !strings.HasSuffix(n, SuffixDone) {
			t.Errorf("Close left %s", n)
		}
	}
	got, _ := ReadDir(dir)
	if len(got) != 12 {
		t.Errorf("%d records", len(got))
	}
}

func TestNamesStayUniqueAcrossRestartsAndClockSteps(t *testing.T) {
	dir := t.TempDir()
	clk := testenv.NewClock(t0)
	for range 3 {
		s := open(t, Options{Dir: dir, Now: clk.Now})
		commit(t, s, batch(0, 1, 1))
		s.Close()
		clk.Advance(-time.Hour) // the clock goes backwards
	}
	names := files(t, dir)
	if len(names) != 3 {
		t.Fatalf("files %v", names)
	}
	for i, n := range names {
		if want := fmt.Sprintf("weir-%020d-%06d.ndjson", t0.UnixNano(), i); n != want {
			t.Errorf("file %d = %s, want %s", i, n, want)
		}
	}
}

func TestRecoverTornTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		tail string
	}{
		{"partial line", `{"weir_record_id":"0000`},
		{"zeros", "\x00\x00\x00\x00"},
		{"zeros with newline", "\x00\x00\n\x00\n"},
		{"half object", `{"weir_record_id":"00000000000000000000000000000001","dur` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, Options{Dir: dir})
			want := batch(0, 5, 30)
			commit(t, s, want)
			// Simulate a crash: the sink is never closed, and a later
			// write was torn.
			openName := files(t, dir)[0]
			path := filepath.Join(dir, openName)
			good, _ := os.ReadFile(path)
			f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			f.WriteString(tc.tail)
			f.Close()

			fs := newFaultFS()
			s2 := open(t, Options{Dir: dir, FS: fs})
			defer s2.Close()
			names := files(t, dir)
			done := strings.TrimSuffix(openName, SuffixOpen) + SuffixDone
			if len(names) != 1 || names[0] != done {
				t.Fatalf("after recovery: %v", names)
			}
			after, _ := os.ReadFile(filepath.Join(dir, done))
			if !bytes.Equal(after, good) {
				t.Errorf("recovered file:\n%q\nwant\n%q", after, good)
			}
			ops := strings.Join(fs.opList(), "\n")
			if !strings.Contains(ops, "sync "+openName+"\nrename "+openName+" -> "+done+"\nsyncdir") {
				t.Errorf("recovery not durable; ops:\n%s", ops)
			}
			got, err := ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			sameRecords(t, got, want.Records)
			// New files continue the sequence.
			commit(t, s2, batch(5, 1, 1))
			if n := files(t, dir); len(n) != 2 || n[1] <= n[0] {
				t.Errorf("files %v", n)
			}
		})
	}
}

func TestRecoverRefusesMidFileCorruption(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir})
	commit(t, s, batch(0, 5, 30))
	path := filepath.Join(dir, files(t, dir)[0])
	data, _ := os.ReadFile(path)
	data[40] = '\x00'
	os.WriteFile(path, data, 0o640)
	_, err := New(context.Background(), Options{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "corrupt line at offset 0") || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v", err)
	}
	if n := files(t, dir); !strings.HasSuffix(n[0], SuffixOpen) {
		t.Errorf("file touched: %v", n)
	}
}

func TestRecoverEmptyOpenFile(t *testing.T) {
	dir := t.TempDir()
	name := fmt.Sprintf("weir-%020d-%06d%s", t0.UnixNano(), 7, SuffixOpen)
	os.WriteFile(filepath.Join(dir, name), nil, 0o640)
	s := open(t, Options{Dir: dir, Now: func() time.Time { return t0 }})
	if n := files(t, dir); len(n) != 0 {
		t.Fatalf("empty file kept: %v", n)
	}
	commit(t, s, batch(0, 1, 1))
	s.Close()
	if n := files(t, dir); n[0] != fmt.Sprintf("weir-%020d-%06d%s", t0.UnixNano(), 8, SuffixDone) {
		t.Errorf("sequence not continued: %v", n)
	}
}

func TestCommitIsDurableBeforeReturning(t *testing.T) {
	dir := t.TempDir()
	fs := newFaultFS()
	s := open(t, Options{Dir: filepath.Join(dir, "a", "b"), FS: fs, MaxBytes: 4096})
	commit(t, s, batch(0, 2, 10))
	ops := fs.opList()
	want := []string{"create", "write", "sync", "syncdir"}
	if len(ops) != 4 {
		t.Fatalf("ops %v", ops)
	}
	for i, op := range ops {
		if !strings.HasPrefix(op, want[i]) {
			t.Fatalf("ops %v, want %v", ops, want)
		}
	}
	// A fresh reader sees the data at once, before Close.
	got, err := ReadDirFS(fs, s.dir, true)
	if err != nil || len(got) != 2 {
		t.Fatalf("fresh read: %d records, %v", len(got), err)
	}
	// A later commit into the same file needs no directory sync; one that
	// fills the file renames it and syncs the directory before returning.
	commit(t, s, batch(2, 1, 10))
	if ops := fs.opList()[4:]; fmt.Sprint(ops) != fmt.Sprintf("[write %[1]s sync %[1]s]", filepath.Base(got[0].File)) {
		t.Errorf("ops %v", ops)
	}
	commit(t, s, batch(3, 1, 5000))
	tail := strings.Join(fs.opList()[6:], "\n")
	// The big batch does not fit: the old file is finished, a new one
	// written, synced and its name synced, then finished in turn.
	if !regexp.MustCompile(`^rename \S+ -> \S+\nsyncdir b\ncreate \S+\nwrite \S+\nsync \S+\nsyncdir b\nrename \S+ -> \S+\nsyncdir b$`).MatchString(tail) {
		t.Errorf("ops:\n%s", tail)
	}
}

func TestSyncFailure(t *testing.T) {
	dir := t.TempDir()
	fs := newFaultFS()
	s := open(t, Options{Dir: dir, FS: fs})
	defer s.Close()
	ctx := context.Background()

	b1 := batch(0, 10, 50)
	commit(t, s, b1)
	first := files(t, dir)[0]

	fs.failSync = 1
	b2 := batch(10, 10, 50)
	_, err := s.Commit(ctx, b2)
	if err == nil || !sink.IsTransient(err) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("err = %v, want transient EIO", err)
	}
	if h := s.Health(ctx); h.State != sink.Degraded || !strings.Contains(h.Reason, "fdatasync") {
		t.Errorf("health %+v", h)
	}
	failedName := strings.TrimSuffix(first, SuffixOpen) + SuffixFailed
	names := files(t, dir)
	if len(names) != 2 || names[0] != failedName || !strings.HasSuffix(names[1], SuffixOpen) {
		t.Fatalf("files after failure: %v", names)
	}
	// The committed batch b1 was copied to the new file: still readable.
	got, err := ReadDirFS(fs, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, got, b1.Records)

	// The drain retries the same batch: it goes to the new file.
	commit(t, s, b2)
	if h := s.Health(ctx); h.State != sink.Healthy {
		t.Errorf("health after recovery %+v", h)
	}
	b3 := batch(20, 5, 50)
	commit(t, s, b3)
	if fs.syncAfterFail != 0 {
		t.Errorf("a file was synced again after its sync failed (%d times)", fs.syncAfterFail)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got, err = ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Concat(b1.Records, b2.Records, b3.Records)
	sameRecords(t, got, want)
	if n := files(t, dir); len(n) != 2 || n[0] != failedName {
		t.Errorf("files %v", n)
	}
}

func TestSyncFailureOnFreshFile(t *testing.T) {
	dir := t.TempDir()
	fs := newFaultFS()
	s := open(t, Options{Dir: dir, FS: fs})
	fs.failSync = 1
	b := batch(0, 3, 10)
	if _, err := s.Commit(context.Background(), b); !sink.IsTransient(err) {
		t.Fatalf("err = %v", err)
	}
	// The file held nothing committed: it is removed, not kept as .failed.
	if n := files(t, dir); len(n) != 0 {
		t.Fatalf("files %v, want none", n)
	}
	commit(t, s, b)
	s.Close()
	got, _ := ReadDir(dir)
	sameRecords(t, got, b.Records)
	if fs.syncAfterFail != 0 {
		t.Errorf("synced again after failure")
	}
}

func TestWriteFailure(t *testing.T) {
	dir := t.TempDir()
	fs := newFaultFS()
	s := open(t, Options{Dir: dir, FS: fs})
	b1, b2 := batch(0, 4, 10), batch(4, 4, 10)
	commit(t, s, b1)
	fs.failWrite = 1
	_, err := s.Commit(context.Background(), b2)
	if !sink.IsTransient(err) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("err = %v", err)
	}
	commit(t, s, b2)
	s.Close()
	got, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, got, slices.Concat(b1.Records, b2.Records))
}

func TestRescueFailureLeavesFileForRecovery(t *testing.T) {
	dir := t.TempDir()
	fs := newFaultFS()
	s := open(t, Options{Dir: dir, FS: fs})
	b1, b2 := batch(0, 4, 10), batch(4, 4, 10)
	commit(t, s, b1)
	fs.failSync = 2 // the batch's sync, then the rescue copy's
	if _, err := s.Commit(context.Background(), b2); !sink.IsTransient(err) {
		t.Fatalf("err = %v", err)
	}
	commit(t, s, b2)
	if h := s.Health(context.Background()); h.State != sink.Degraded || !strings.Contains(h.Reason, "could not be copied") {
		t.Errorf("health %+v", h)
	}
	s.Close()
	// A restart finishes the left-over file: b1 is readable again.
	s2 := open(t, Options{Dir: dir})
	s2.Close()
	got, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[sink.RecordID]int{}
	for _, l := range got {
		seen[l.ID]++
	}
	for _, r := range slices.Concat(b1.Records, b2.Records) {
		if seen[r.ID] == 0 {
			t.Errorf("record %s lost", r.ID)
		}
	}
}

func TestDirSyncFailureAfterCreate(t *testing.T) {
	dir := t.TempDir()
	fs := newFaultFS()
	s := open(t, Options{Dir: dir, FS: fs})
	fs.failDir = 1
	b := batch(0, 2, 10)
	if _, err := s.Commit(context.Background(), b); !sink.IsTransient(err) {
		t.Fatalf("err = %v", err)
	}
	commit(t, s, b)
	s.Close()
	got, _ := ReadDir(dir)
	sameRecords(t, got, b.Records)
}

func TestContextAndClose(t *testing.T) {
	s := open(t, Options{Dir: t.TempDir()})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Commit(ctx, batch(0, 1, 1)); !sink.IsTransient(err) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if s.Name() != "file" || s.MaxBatchSize() != DefaultMaxBatchSize {
		t.Errorf("name %q max %d", s.Name(), s.MaxBatchSize())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Commit(context.Background(), batch(0, 1, 1)); sink.IsTransient(err) || !errors.Is(err, ErrClosed) {
		t.Errorf("after close: %v", err)
	}
	s2 := open(t, Options{Dir: t.TempDir(), MaxBatchSize: 17})
	defer s2.Close()
	if s2.MaxBatchSize() != 17 {
		t.Errorf("MaxBatchSize %d", s2.MaxBatchSize())
	}
}

func TestHealthConcurrentWithCommit(t *testing.T) {
	s := open(t, Options{Dir: t.TempDir()})
	defer s.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			_ = s.Health(context.Background())
		}
	}()
	for i := range 20 {
		commit(t, s, batch(i, 5, 5))
	}
	<-done
}

func BenchmarkCommit4096x256(b *testing.B) {
	s, err := New(context.Background(), Options{Dir: b.TempDir(), MaxBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	bt := batch(0, 4096, 256)
	b.SetBytes(int64(4096 * 256))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Commit(context.Background(), bt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*4096/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkEncode4096x256(b *testing.B) {
	bt := batch(0, 4096, 256)
	var buf []byte
	b.SetBytes(int64(4096 * 256))
	b.ReportAllocs()
	for b.Loop() {
		buf = buf[:0]
		for i := range bt.Records {
			buf = appendRecord(buf, &bt.Records[i])
		}
	}
	b.ReportMetric(float64(b.N)*4096/b.Elapsed().Seconds(), "records/s")
}
