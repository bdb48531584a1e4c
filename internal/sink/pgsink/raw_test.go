package pgsink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
	"github.com/weir-io/weir/source"
)

func rawRecords(prefix string, n int) []sink.Record {
	out := make([]sink.Record, n)
	for i := range out {
		p := fmt.Sprintf("%s-%04d", prefix, i)
		out[i] = sink.Record{ID: source.ID([]byte("t"), []byte(p)), Payload: []byte(p), Source: "test",
			Received: time.Unix(1700000000, int64(i)*1000).UTC()}
	}
	out[n/2].Durability = sink.Buffered
	return out
}

// readAll reads every record of raw through ReadFrom in windows of w.
func readAll(t *testing.T, s *Sink, w int) []sink.Positioned {
	t.Helper()
	var out []sink.Positioned
	from := uint64(0)
	for {
		got, err := s.ReadFrom(context.Background(), from, w, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			return out
		}
		out = append(out, got...)
		from = got[len(got)-1].Pos + 1
	}
}

func commitRaw(t *testing.T, s *Sink, recs []sink.Record) (sink.CommitResult, uint64) {
	t.Helper()
	res, first, err := s.CommitRaw(context.Background(), sink.NewBatch(recs))
	if err != nil {
		t.Fatalf("CommitRaw: %v", err)
	}
	return res, first
}

func TestRawPositionsAndRestart(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, e.dsn, Options{Positions: true})
	var want []sink.Record
	next := uint64(0)
	for i, n := range []int{1, 7, 30} {
		recs := rawRecords(fmt.Sprintf("b%d", i), n)
		res, first := commitRaw(t, s, recs)
		if len(res.Rejected) != 0 || first != next {
			t.Fatalf("batch %d: first %d rejected %v, want first %d", i, first, res.Rejected, next)
		}
		next += uint64(n)
		want = append(want, recs...)
	}
	check := func(s *Sink) {
		t.Helper()
		end, err := s.End(context.Background())
		if err != nil || end != next {
			t.Fatalf("End = %d, %v; want %d", end, err, next)
		}
		got := readAll(t, s, 4)
		if len(got) != len(want) {
			t.Fatalf("read %d records, want %d", len(got), len(want))
		}
		for i, p := range got {
			w := want[i]
			if p.Pos != uint64(i) || p.Record.ID != w.ID || string(p.Record.Payload) != string(w.Payload) ||
				p.Record.Source != w.Source || p.Record.Durability != w.Durability || !p.Record.Received.Equal(w.Received) {
				t.Fatalf("position %d: got %+v, want %+v", i, p, w)
			}
		}
	}
	check(s)
	s.Close()
	r := e.open(t, e.dsn, Options{Positions: true})
	check(r)
	recs := rawRecords("after", 3)
	if _, first := commitRaw(t, r, recs); first != next {
		t.Fatalf("after reopening: first %d, want %d", first, next)
	}
}

// A replayed batch is kept again at new positions (raw is a log; readers
// deduplicate on the id), so no position below the end holds nothing and
// a read from any position below the end returns a record.
func TestRawReplayKeepsDuplicates(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, e.dsn, Options{Positions: true})
	a := rawRecords("a", 5)
	commitRaw(t, s, a)
	res, first := commitRaw(t, s, a)
	if first != 5 || res.Committed(len(a)) != 5 {
		t.Fatalf("replay: first %d committed %d", first, res.Committed(len(a)))
	}
	_, first = commitRaw(t, s, rawRecords("b", 2))
	if first != 10 {
		t.Fatalf("after the replay: first %d, want 10", first)
	}
	got := readAll(t, s, 100)
	if len(got) != 12 {
		t.Fatalf("read %d records, want 12", len(got))
	}
	for i, p := range got {
		if p.Pos != uint64(i) {
			t.Fatalf("record %d at position %d", i, p.Pos)
		}
		if i >= 5 && i < 10 && p.Record.ID != a[i-5].ID {
			t.Fatalf("position %d holds %x, want the replayed %x", i, p.Record.ID, a[i-5].ID)
		}
	}
	// The tail after a replay is readable (it used to hold nothing).
	commitRaw(t, s, a)
	if got, err := s.ReadFrom(context.Background(), 12, 10, 0); err != nil || len(got) != 5 {
		t.Fatalf("ReadFrom(12) after a replay at the tail: %d records, %v", len(got), err)
	}
}

// Rejected records get no position: the kept ones are numbered
// contiguously in batch order, whether Go or the server refused the bad
// ones.
func TestRawRejectionsKeepPositionsContiguous(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, e.dsn, Options{Positions: true})
	e.exec(context.Background(), fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT no_poison CHECK (payload <> '\x706f69736f6e'::bytea)`,
		pgx.Identifier{e.table}.Sanitize()))
	commitRaw(t, s, rawRecords("pre", 2))
	recs := rawRecords("mix", 8)
	recs[1].Source = "nul\x00" // refused in Go
	recs[4].Payload = []byte("poison")
	recs[4].ID = source.ID([]byte("t"), recs[4].Payload) // refused by the server
	recs[6].Payload = []byte("poison")
	recs[6].ID = source.ID([]byte("t"), []byte("poison-2"))
	res, first := commitRaw(t, s, recs)
	if len(res.Rejected) != 3 || first != 2 {
		t.Fatalf("rejected %v first %d; want 3 rejections, first 2", res.Rejected, first)
	}
	got := readAll(t, s, 100)
	wantIdx := []int{0, 2, 3, 5, 7}
	if len(got) != 2+len(wantIdx) {
		t.Fatalf("read %d records, want %d", len(got), 2+len(wantIdx))
	}
	for k, j := range wantIdx {
		p := got[2+k]
		if p.Pos != first+uint64(k) || p.Record.ID != recs[j].ID {
			t.Fatalf("kept record %d (batch index %d) at position %d, want %d", k, j, p.Pos, first+uint64(k))
		}
	}
	if end, _ := s.End(context.Background()); end != first+uint64(len(wantIdx)) {
		t.Fatalf("End %d, want %d", end, first+uint64(len(wantIdx)))
	}
}

// A commit that fails (the connection killed under it) hands out no
// positions: the raw end moves with the rows or not at all.
func TestRawFailedCommitTakesNoPositions(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, e.dsn, Options{Positions: true, Timeout: 5 * time.Second})
	commitRaw(t, s, rawRecords("a", 4))
	c := e.conn(context.Background())
	defer c.Close(context.Background())
	// Hold the raw end row so the next commit blocks, then kill it.
	tx, err := c.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), `SELECT 1 FROM `+OffsetsTable+` WHERE raw_table = $1 FOR UPDATE`, s.Table()); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, _, err := s.CommitRaw(context.Background(), sink.Batch{Records: rawRecords("lost", 3)})
		errc <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if n, err := e.terminate(context.Background()); err != nil || n == 0 {
		t.Fatalf("terminate: %d, %v", n, err)
	}
	if err := <-errc; err == nil || !sink.IsTransient(err) {
		t.Fatalf("commit under a killed connection: %v, want a transient error", err)
	}
	_ = tx.Rollback(context.Background())
	if end, err := s.End(context.Background()); err != nil || end != 4 {
		t.Fatalf("End after the failed commit = %d, %v; want 4", end, err)
	}
	if _, first := commitRaw(t, s, rawRecords("b", 2)); first != 4 {
		t.Fatalf("next first %d, want 4", first)
	}
}

// The raw end is raised past every position the table holds, even when
// the offsets row was lost.
func TestRawEndSurvivesALostOffsetsRow(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, e.dsn, Options{Positions: true})
	commitRaw(t, s, rawRecords("a", 6))
	s.Close()
	e.exec(context.Background(), `DELETE FROM `+OffsetsTable+` WHERE raw_table = $1`, s.Table())
	r := e.open(t, e.dsn, Options{Positions: true})
	if end, err := r.End(context.Background()); err != nil || end != 6 {
		t.Fatalf("End = %d, %v; want 6", end, err)
	}
}

func TestRawOptions(t *testing.T) {
	e := newEnv(t)
	_, err := New(context.Background(), Options{DSN: e.dsn, Table: e.table, CreateTable: true, Positions: true, PayloadType: PayloadJSONB})
	if err == nil || !strings.Contains(err.Error(), "bytea") {
		t.Fatalf("jsonb raw: %v", err)
	}
	s := e.open(t, e.dsn, Options{})
	if _, _, err := s.CommitRaw(context.Background(), sink.Batch{Records: rawRecords("x", 1)}); !errors.Is(err, ErrNotRaw) {
		t.Fatalf("CommitRaw outside raw mode: %v", err)
	}
	if _, err := s.ReadFrom(context.Background(), 0, 1, 0); !errors.Is(err, ErrNotRaw) {
		t.Fatalf("ReadFrom outside raw mode: %v", err)
	}
	if s.Replayable() {
		t.Fatal("a non-raw table claims to be replayable")
	}
	// A table made without weir_position is not a raw table.
	if _, err := New(context.Background(), Options{DSN: e.dsn, Table: e.table, Positions: true}); err == nil ||
		!strings.Contains(err.Error(), "weir_position") {
		t.Fatalf("raw on a table without weir_position: %v", err)
	}
}

func TestRawOffsetStore(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	s := e.open(t, e.dsn, Options{Positions: true})
	commitRaw(t, s, rawRecords("a", 9))
	a, err := s.OffsetStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a.RawEnd() != 9 {
		t.Fatalf("RawEnd %d, want the raw end row's 9", a.RawEnd())
	}
	a.Cover("pg", 0, 4)
	a.Cover("mysql", 0, 2)
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(ctx, "files", []byte("cursor-1")); err != nil {
		t.Fatal(err)
	}
	// A second writer (a recovery node) on the same raw table.
	r := e.open(t, e.dsn, Options{Positions: true})
	b, err := r.OffsetStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := b.Coverage("pg"); c.Prefix() != 4 {
		t.Fatalf("second store: pg coverage %v", &c)
	}
	if cur, _ := b.Load(ctx, "files"); string(cur) != "cursor-1" {
		t.Fatalf("second store: cursor %q", cur)
	}
	b.Cover("pg", 4, 7)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	a.Cover("mysql", 2, 3) // a never saw b's pg progress: merged, not erased
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := s.OffsetStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pg, my := c.Coverage("pg"), c.Coverage("mysql"); pg.Prefix() != 7 || my.Prefix() != 3 {
		t.Fatalf("merged coverage pg %v mysql %v", &pg, &my)
	}
	// Clamp replaces what is stored instead of merging with it.
	c.Clamp("pg", 5)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	d, _ := s.OffsetStore(ctx)
	if pg := d.Coverage("pg"); pg.Max() != 5 {
		t.Fatalf("after Clamp(5): %v", &pg)
	}
	var _ engine.CoverageStore = d
	// A removed cursor's row is deleted: b, which read it before, does
	// not write it back, and a new store does not see it.
	if err := d.RemoveCursor(ctx, "files"); err != nil {
		t.Fatal(err)
	}
	b.Cover("pg", 0, 1)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	f, _ := s.OffsetStore(ctx)
	if cur, _ := f.Load(ctx, "files"); cur != nil {
		t.Fatalf("removed cursor reads back as %q", cur)
	}
}

// ReadFrom's byte bound: the rows stop before the record past the bound,
// a first record larger than the bound comes alone, and a read from where
// one stopped goes on with the record it refused — with keys and headers,
// which the server's own bound does not count, in some records.
func TestRawReadFromByteBound(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, e.dsn, Options{Positions: true})
	recs := rawRecords("bound", 16)
	for i, size := range []int{100, 300, 50, 6000, 200, 200, 9000, 10} {
		for _, j := range []int{2 * i, 2*i + 1} {
			recs[j].Payload = make([]byte, size)
			if j%3 == 0 {
				recs[j].Key = []byte(strings.Repeat("k", size/2))
				recs[j].Headers = []sink.Header{{Key: "h", Value: make([]byte, size)}}
			}
		}
	}
	commitRaw(t, s, recs)
	for _, from := range []uint64{0, 5, 13} {
		sinktest.ReadBound(t, s, from)
	}
	// The server sends the rows under the bound, and at most the one
	// past it: not the rest of max.
	got, err := s.ReadFrom(context.Background(), 0, 16, 1000)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := s.pool.Query(context.Background(), s.readSQL, 0, 16, 1000, rowOverhead)
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	for rows.Next() {
		sent++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if sent > len(got)+1 {
		t.Errorf("the server sent %d rows for a read that took %d under its byte bound", sent, len(got))
	}
}

// TestRawTableStaysRaw: a table that has been primary raw, opened as a
// plain sink (a gate = "raw" node whose last secondary was removed), is
// written as raw — every row numbered, the raw end in step — and its
// cursors are found by the offset store opened on its own
// (OpenCursorStore), in the same rows as with the raw-mode sink.
func TestRawTableStaysRaw(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	raw := e.open(t, e.dsn, Options{Positions: true})
	commitRaw(t, raw, rawRecords("a", 5))
	st, err := raw.OffsetStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Save(ctx, "files", []byte("cursor-1")); err != nil {
		t.Fatal(err)
	}
	plain := e.open(t, e.dsn, Options{})
	if !plain.Replayable() {
		t.Fatal("a raw table opened as a plain sink is not written as raw")
	}
	if _, err := plain.Commit(ctx, sink.NewBatch(rawRecords("b", 3))); err != nil {
		t.Fatalf("Commit into a raw table opened as a plain sink: %v", err)
	}
	if end, err := raw.End(ctx); err != nil || end != 8 {
		t.Fatalf("raw end %d, %v; want 8", end, err)
	}
	if n := len(readAll(t, raw, 100)); n != 8 {
		t.Fatalf("%d rows read by position, want 8", n)
	}
	alone, pool, err := openCursorStore(ctx, Options{DSN: e.dsn, Table: e.table})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if c, _ := alone.Load(ctx, "files"); string(c) != "cursor-1" {
		t.Fatalf("the store opened alone holds cursor %q, want the raw store's", c)
	}
	if err := alone.Save(ctx, "files", []byte("cursor-2")); err != nil {
		t.Fatal(err)
	}
	if st, err = raw.OffsetStore(ctx); err != nil {
		t.Fatal(err)
	}
	if c, _ := st.Load(ctx, "files"); string(c) != "cursor-2" {
		t.Fatalf("the raw store holds cursor %q after the store opened alone saved cursor-2", c)
	}
	if _, err := New(ctx, Options{DSN: e.dsn, Table: e.table, AsyncCommit: true}); err == nil {
		t.Fatal("a raw table opened as a non-durable sink")
	}
}
