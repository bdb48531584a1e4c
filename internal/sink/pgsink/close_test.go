package pgsink

import (
	"context"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/pgopen"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
)

// A server that stops answering mid-commit does not hold Close for pgx's
// 15 s per cancel request: as at the daemon's shutdown, the commit's
// context ends first, then the sink is closed, and the pool closes its
// sockets after pgopen.CloseGrace.
func TestCloseAgainstStalledServer(t *testing.T) {
	e := newEnv(t)
	via, proxy := testenv.PostgresProxy(t, e.dsn)
	s := e.open(t, via, Options{Timeout: 30 * time.Second})
	proxy.Stall()
	defer proxy.Resume()
	ctx, cancel := context.WithCancel(context.Background())
	committed := make(chan error, 1)
	go func() {
		_, err := s.Commit(ctx, sink.NewBatch(mkRecords("stall", 3)))
		committed <- err
	}()
	time.Sleep(200 * time.Millisecond) // the commit is on the wire, held
	cancel()
	select {
	case err := <-committed:
		if err == nil {
			t.Fatal("a cancelled commit against a stalled server succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled commit did not return")
	}
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	if took := time.Since(start); took > pgopen.CloseGrace+3*time.Second {
		t.Fatalf("Close took %v against a stalled server", took)
	}
}
