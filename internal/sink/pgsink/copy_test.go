package pgsink

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/sink"
)

// TestCopyReplay: a batch whose COPY meets a row already stored — a
// replay, or one id twice in a batch — is stored again by unnest, skipping
// those rows, and so are the next batches until one stores every row it
// sends; then COPY again. Nothing is rejected and nothing doubled.
func TestCopyReplay(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.open(t, e.dsn, Options{InsertMethod: InsertCopy})
	a, fresh := mkRecords("a", 40), mkRecords("f", 60)
	steps := []struct {
		name       string
		recs       []sink.Record
		replays    int64 // Stats.Replays after the step
		statements int64 // statements the step sends
		replaying  bool  // after the step
	}{
		{"new rows, by COPY", a, 0, 1, false},
		{"a replay: COPY fails, unnest skips the stored rows", a, 1, 2, true},
		{"half stored, half new: unnest", append(append([]sink.Record(nil), a[:20]...), fresh[:20]...), 1, 1, true},
		{"all new: unnest, and the replay is over", fresh[20:40], 1, 1, false},
		{"new rows, by COPY again", fresh[40:50], 1, 1, false},
		{"one id twice in the batch", append(append([]sink.Record(nil), fresh[50:]...), fresh[50]), 2, 2, true},
	}
	for _, st := range steps {
		before := s.Stats()
		res, err := s.Commit(ctx, sink.NewBatch(st.recs))
		if err != nil || len(res.Rejected) > 0 {
			t.Fatalf("%s: %v, rejected %v", st.name, err, res.Rejected)
		}
		after := s.Stats()
		if after.Replays != st.replays || after.Statements-before.Statements != st.statements || s.replaying != st.replaying {
			t.Fatalf("%s: replays %d, %d statements, replaying %v; want %d, %d, %v", st.name,
				after.Replays, after.Statements-before.Statements, s.replaying, st.replays, st.statements, st.replaying)
		}
	}
	if rows, distinct := e.countDistinct(ctx); rows != 100 || distinct != 100 {
		t.Fatalf("table holds %d rows (%d distinct), want 100", rows, distinct)
	}
}

// TestSecondUniqueIndex: a duplicate on another unique index of the table
// is not a replay: by either method the row is rejected on its own and the
// rest of its batch stored.
func TestSecondUniqueIndex(t *testing.T) {
	for _, method := range []string{InsertCopy, InsertUnnest} {
		t.Run(method, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			s := e.open(t, e.dsn, Options{InsertMethod: method})
			e.exec(ctx, "CREATE UNIQUE INDEX ON "+pgx.Identifier{e.table}.Sanitize()+" (source)")
			recs := mkRecords("u", 30)
			for i := range recs {
				recs[i].Source = fmt.Sprintf("src-%d", i)
			}
			recs[20].Source = recs[5].Source
			res, err := s.Commit(ctx, sink.NewBatch(recs))
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Rejected) != 1 || (res.Rejected[0].Index != 5 && res.Rejected[0].Index != 20) ||
				!strings.Contains(res.Rejected[0].Reason, "23505") {
				t.Fatalf("rejected %+v, want #5 or #20 for the duplicate source", res.Rejected)
			}
			if rows, _ := e.countDistinct(ctx); rows != 29 {
				t.Fatalf("%d rows, want 29", rows)
			}
		})
	}
}

func TestInsertMethodOption(t *testing.T) {
	e := newEnv(t)
	_, err := New(context.Background(), Options{DSN: e.dsn, Table: e.table, CreateTable: true, InsertMethod: "merge"})
	if err == nil || !strings.Contains(err.Error(), `insert method "merge"`) {
		t.Fatalf("New with insert method merge: %v", err)
	}
}
