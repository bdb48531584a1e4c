package daemon

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
)

// A quarantine table whose server is down at start does not stop the
// start: the lane fails (and sheds) until the server answers, then writes.
func TestQuarantineTableOpensLate(t *testing.T) {
	dsn := testenv.Postgres(t)
	via, proxy := testenv.PostgresProxy(t, dsn)
	proxy.Cut()
	table := testenv.PostgresTable(t, dsn, "weir_lateq")
	sc := config.SecondaryConfig{Name: "pg", QuarantinePostgresURL: via, QuarantineTable: table}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := openQuarantine(ctx, kinds{}, sc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("a quarantine table that cannot be opened failed the start: %v", err)
	}
	defer q.(interface{ Close() error }).Close()
	recs := []lane.Rejected{{Sink: "pg", Pos: 7, Record: sink.Record{ID: sink.RecordID{1}, Payload: []byte(`x`), Source: "socket"}}}
	if err := q.Reject(ctx, recs); err == nil {
		t.Fatal("a write with the server down succeeded")
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := q.Reject(ctx, recs); err != nil {
		t.Fatalf("write once the server answers: %v", err)
	}
}
