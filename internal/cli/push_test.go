package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/server"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/wab"
)

// serveForPush serves backend on a Unix socket in a fresh directory until
// the test ends (then shuts the server down and calls after, if set) and
// returns the socket's path.
func serveForPush(t *testing.T, opts server.Options, backend server.Backend, after func()) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "wpush")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	srv := server.New(opts, backend)
	if err := srv.ListenUnix(sock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		if after != nil {
			after()
		}
	})
	return sock
}

// storeBackend acks every request at once and keeps what it would have
// stored.
type storeBackend struct {
	mu    sync.Mutex
	metas map[string][]record.Meta // by payload
}

func (b *storeBackend) Shards() int        { return 2 }
func (b *storeBackend) ShardErr(int) error { return nil }
func (b *storeBackend) SubmitInline(ctx context.Context, shard int, req *wab.Request, wait time.Duration) error {
	return b.Submit(ctx, shard, req, wait)
}
func (b *storeBackend) Submit(_ context.Context, _ int, req *wab.Request, _ time.Duration) error {
	b.mu.Lock()
	for i, p := range req.Payloads {
		var m record.Meta
		if req.Metas != nil {
			var err error
			if m, err = record.Decode(bytes.Clone(req.Metas[i]), record.LegacyOrigin); err != nil {
				b.mu.Unlock()
				return err
			}
		}
		b.metas[string(p)] = append(b.metas[string(p)], m)
	}
	b.mu.Unlock()
	req.Done(nil)
	return nil
}

// TestPushOneProducerManyConnections: weir push --concurrency N pushes as
// one idempotent producer: every record carries the same producer id and
// its own sequence number, never shared with a record of another
// connection.
func TestPushOneProducerManyConnections(t *testing.T) {
	b := &storeBackend{metas: map[string][]record.Meta{}}
	sock := serveForPush(t, server.Options{}, b, nil)
	const lines = 1000
	var in strings.Builder
	for i := range lines {
		fmt.Fprintf(&in, "line-%d\n", i)
	}
	var out, errOut bytes.Buffer
	code := push([]string{"--socket-path", sock, "--concurrency", "8", "--batch", "7"}, strings.NewReader(in.String()), &out, &errOut)
	if code != 0 || out.String() != fmt.Sprintf("acked %d nacked 0\n", lines) {
		t.Fatalf("exit %d, %q, stderr %q", code, out.String(), errOut.String())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.metas) != lines {
		t.Fatalf("%d records stored", len(b.metas))
	}
	producer := b.metas["line-0"][0].Producer
	seqs := map[uint64]string{}
	for p, ms := range b.metas {
		m := ms[0]
		if len(ms) != 1 || !m.HasProducer || m.Producer != producer || m.EventTime == 0 {
			t.Fatalf("%s stored as %+v", p, ms)
		}
		if other, dup := seqs[m.Seq]; dup {
			t.Fatalf("sequence %d used by %s and %s", m.Seq, p, other)
		}
		seqs[m.Seq] = p
	}
}

// slowBackend acks every request after a pause, from another goroutine.
type slowBackend struct{ wg sync.WaitGroup }

func (b *slowBackend) Shards() int        { return 1 }
func (b *slowBackend) ShardErr(int) error { return nil }
func (b *slowBackend) SubmitInline(ctx context.Context, shard int, req *wab.Request, wait time.Duration) error {
	return b.Submit(ctx, shard, req, wait)
}
func (b *slowBackend) Submit(_ context.Context, _ int, req *wab.Request, _ time.Duration) error {
	b.wg.Add(1)
	time.AfterFunc(2*time.Millisecond, func() {
		defer b.wg.Done()
		req.Done(nil)
	})
	return nil
}

// TestPushUnderOverload: against a daemon whose memory budget is far too
// small for what the producers keep in flight, weir push still delivers
// every line: the frames refused Overloaded are sent again after the
// daemon's retry-after pause, and it says how many.
func TestPushUnderOverload(t *testing.T) {
	budget := flow.NewBudget(flow.BudgetOptions{Limit: 128 << 10, WarmupFraction: 1})
	defer budget.Close()
	b := &slowBackend{}
	sock := serveForPush(t, server.Options{Budget: budget, AdmissionWait: time.Millisecond, RetryAfter: 2 * time.Millisecond}, b, b.wg.Wait)
	const lines = 400
	var in strings.Builder
	for i := range lines {
		fmt.Fprintf(&in, "%d-%s\n", i, strings.Repeat("x", 4000))
	}
	var out, errOut bytes.Buffer
	code := push([]string{"--socket-path", sock, "--concurrency", "4", "--timeout", "60s"}, strings.NewReader(in.String()), &out, &errOut)
	if code != 0 || out.String() != fmt.Sprintf("acked %d nacked 0\n", lines) {
		t.Fatalf("exit %d, %q, stderr %q", code, out.String(), errOut.String())
	}
	if !strings.Contains(errOut.String(), "frames after Overloaded") {
		t.Fatalf("no frame was refused Overloaded (stderr %q): the budget did not bite", errOut.String())
	}
	t.Log(strings.TrimSpace(errOut.String()))
}
