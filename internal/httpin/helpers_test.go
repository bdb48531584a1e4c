package httpin

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/source"
	"github.com/weir-io/weir/wab"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeBackend stands in for the write-ahead buffer: it keeps what it is
// given and completes each request with done (nil: success), after
// release is closed when it is set.
type fakeBackend struct {
	mu        sync.Mutex
	reqs      []*wab.Request
	submitErr error
	done      error
	shardErr  error
	release   chan struct{}
}

func (b *fakeBackend) Shards() int { return 2 }
func (b *fakeBackend) ShardErr(int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.shardErr
}
func (b *fakeBackend) Write(context.Context, []source.Record) error { return nil }
func (b *fakeBackend) SubmitInline(ctx context.Context, shard int, req *wab.Request, wait time.Duration) error {
	return b.Submit(ctx, shard, req, wait)
}
func (b *fakeBackend) Submit(_ context.Context, _ int, req *wab.Request, _ time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.submitErr != nil {
		return b.submitErr
	}
	b.reqs = append(b.reqs, req)
	done, release := b.done, b.release
	go func() {
		if release != nil {
			<-release
		}
		req.Done(done)
	}()
	return nil
}

func (b *fakeBackend) requests() []*wab.Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*wab.Request(nil), b.reqs...)
}

// start serves an ingress with opts on a free port over b.
func start(t *testing.T, b *fakeBackend, opts Options) (*Ingress, string) {
	t.Helper()
	opts.Addr = "127.0.0.1:0"
	in := New(opts)
	if err := in.Listen(b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := in.Shutdown(); err != nil {
			t.Error(err)
		}
	})
	return in, "http://" + in.Addr().String() + RouteRecords
}

// post sends body with headers (name, value pairs).
func post(t *testing.T, url string, body string, kv ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}
