package outage

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/sink/pgsink"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// pgxpool wakes its health checker after dropping a broken connection,
// from a goroutine that ends by itself even after Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"))
}

var seq atomic.Uint64

func mkBatch(n int) sink.Batch {
	recs := make([]sink.Record, n)
	for i := range recs {
		k := seq.Add(1)
		var id sink.RecordID
		for j := 0; j < 8; j++ {
			id[j] = byte(k >> (8 * j))
		}
		id[8] = 0xee
		recs[i] = sink.Record{ID: id, Payload: fmt.Appendf(nil, "record %d", k), Received: time.Now(), Source: "outage-test"}
	}
	return sink.NewBatch(recs)
}

// TestSecondaryOutage cuts the Postgres secondary off while batches keep
// flowing into the fan-out. Commit (raw) must keep its pace during the
// outage, and afterwards recovery must make the table equal raw by
// weir_record_id.
func TestSecondaryOutage(t *testing.T) {
	o := newOutage(t)
	before, worstBefore := o.phase(time.Second)
	o.proxy.Cut()
	during, worstDuring := o.phase(2 * time.Second)
	if err := o.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	after, _ := o.phase(time.Second)
	st := o.f.Stats()
	t.Logf("Commit rate to raw: before %.0f/s (slowest %v), during outage %.0f/s (slowest %v), after %.0f/s",
		before, worstBefore, during, worstDuring, after)
	t.Logf("at end of load: raw end %d, backlog %d; sinks %+v", st.RawEnd, st.Backlog, st.Sinks)
	if during < before/2 {
		t.Fatalf("Commit slowed during the secondary's outage: %.0f/s before, %.0f/s during", before, during)
	}

	st = o.caughtUp()
	t.Logf("caught up: %+v", st.Sinks)
	if st.Sinks[0].LiveDropped == 0 && st.Sinks[0].CommitFailures == 0 {
		t.Fatalf("the outage did not affect the pg secondary: %+v", st.Sinks[0])
	}

	// The table equals raw by weir_record_id.
	want := o.rawIDs(st.RawEnd)
	got := o.tableIDs()
	missing, extra := 0, 0
	for id := range want {
		if !got[id] {
			missing++
		}
	}
	for id := range got {
		if !want[id] {
			extra++
		}
	}
	if missing != 0 || extra != 0 || len(want) != int(st.RawEnd) {
		t.Fatalf("table vs raw: %d records in raw (end %d), %d rows, %d missing, %d extra", len(want), st.RawEnd, len(got), missing, extra)
	}
	lines, err := filesink.ReadDirFS(vfs.OS, o.fileDir, true)
	if err != nil {
		t.Fatal(err)
	}
	fileIDs := map[sink.RecordID]bool{}
	for _, l := range lines {
		fileIDs[l.ID] = true
	}
	if len(fileIDs) != len(want) {
		t.Fatalf("file secondary holds %d distinct ids, raw %d", len(fileIDs), len(want))
	}
	t.Logf("table holds all %d raw records by weir_record_id; file secondary %d lines (%d distinct)", len(want), len(lines), len(fileIDs))
}

// outage is a fan-out over a file raw with two secondaries: Postgres,
// reached through a proxy the test can cut, and a file sink.
type outage struct {
	t       *testing.T
	dsn     string
	table   string
	proxy   *testenv.Proxy
	raw     *filesink.Sink
	fileDir string
	f       *engine.Fanout
}

func newOutage(t *testing.T) *outage {
	dsn := testenv.Postgres(t)
	target, err := testenv.PostgresTarget(dsn)
	if err != nil {
		t.Fatal(err)
	}
	o := &outage{t: t, dsn: dsn, table: testenv.TableName("weir_outage"), proxy: testenv.NewProxy(t, target)}
	viaProxy, err := testenv.PostgresVia(dsn, o.proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{o.table}.Sanitize())
			c.Close(context.Background())
		}
	})
	ctx := context.Background()
	rawDir := t.TempDir()
	o.fileDir = t.TempDir()
	if o.raw, err = filesink.New(ctx, filesink.Options{Dir: rawDir, Positions: true}); err != nil {
		t.Fatal(err)
	}
	pg, err := pgsink.New(ctx, pgsink.Options{DSN: viaProxy, Table: o.table, CreateTable: true, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	files, err := filesink.New(ctx, filesink.Options{Dir: o.fileDir})
	if err != nil {
		t.Fatal(err)
	}
	store, err := engine.OpenOffsetStore(ctx, vfs.OS, rawDir)
	if err != nil {
		t.Fatal(err)
	}
	o.f, err = engine.NewFanout(ctx, engine.FanoutOptions{
		Raw: o.raw, Store: store, WindowRecords: 2000, WindowTime: 5 * time.Second,
		RecoveryInterval: 50 * time.Millisecond, FlushInterval: 50 * time.Millisecond,
		RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		Secondaries: []engine.SecondaryConfig{
			{Sink: pg, Name: "pg", QueueBatches: 16},
			{Sink: files, Name: "files", QueueBatches: 16},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.f.Close() })
	return o
}

// phase commits batches for d and returns commits per second and the
// slowest Commit.
func (o *outage) phase(d time.Duration) (rate float64, worst time.Duration) {
	start := time.Now()
	n := 0
	for time.Since(start) < d {
		t0 := time.Now()
		if _, err := o.f.Commit(context.Background(), mkBatch(20)); err != nil {
			o.t.Fatal(err)
		}
		worst = max(worst, time.Since(t0))
		n++
	}
	return float64(n) / time.Since(start).Seconds(), worst
}

// caughtUp waits until recovery has brought both secondaries up to raw's
// end.
func (o *outage) caughtUp() engine.FanoutStats {
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := o.f.Stats()
		if st.Backlog == 0 && st.Sinks[0].CoveredPrefix == st.RawEnd && st.Sinks[1].CoveredPrefix == st.RawEnd {
			return st
		}
		if time.Now().After(deadline) {
			o.t.Fatalf("not caught up: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rawIDs reads raw's record ids below end.
func (o *outage) rawIDs(end uint64) map[sink.RecordID]bool {
	want := map[sink.RecordID]bool{}
	for from := uint64(0); from < end; {
		recs, err := o.raw.ReadFrom(context.Background(), from, 10000, 0)
		if err != nil || len(recs) == 0 {
			o.t.Fatalf("read raw from %d: %d, %v", from, len(recs), err)
		}
		for _, r := range recs {
			want[r.Record.ID] = true
		}
		from = recs[len(recs)-1].Pos + 1
	}
	return want
}

// tableIDs reads the Postgres table's record ids.
func (o *outage) tableIDs() map[sink.RecordID]bool {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, o.dsn)
	if err != nil {
		o.t.Fatal(err)
	}
	defer c.Close(context.Background())
	rows, err := c.Query(ctx, "SELECT weir_record_id FROM "+pgx.Identifier{o.table}.Sanitize())
	if err != nil {
		o.t.Fatal(err)
	}
	got := map[sink.RecordID]bool{}
	for rows.Next() {
		var id [16]byte
		if err := rows.Scan(&id); err != nil {
			o.t.Fatal(err)
		}
		got[sink.RecordID(id)] = true
	}
	if err := rows.Err(); err != nil {
		o.t.Fatal(err)
	}
	return got
}
