package backup

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/coord/etcdtest"
	"github.com/weir-io/weir/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// openStore opens rawURL with its metrics on a fresh registry.
func openStore(t *testing.T, rawURL string) (*Store, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := Open(testCtx(t), rawURL, testLog(), reg)
	if err != nil {
		t.Fatalf("Open(%s): %v", rawURL, err)
	}
	t.Cleanup(func() { s.Close() })
	return s, reg
}

func fileURL(t *testing.T) string {
	return "file://" + filepath.Join(t.TempDir(), "backups")
}

// fakeS3 serves an in-memory S3 (gofakes3) holding bucket "weir" on a
// loopback httptest server; the returned gate, once armed, breaks every
// upload under snapshots/ after its first KiB by dropping the connection.
func fakeS3(t *testing.T, prefix string) (rawURL string, gate *atomic.Bool) {
	t.Helper()
	gate = new(atomic.Bool)
	s3 := testenv.FakeS3(t, "weir", func(h http.Handler) http.Handler { return breakUploads(h, gate) })
	s3.SetEnv(t)
	return s3.URL(prefix), gate
}

func breakUploads(h http.Handler, armed *atomic.Bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !armed.Load() || r.Method != http.MethodPut || !strings.Contains(r.URL.Path, "/snapshots/") {
			h.ServeHTTP(w, r)
			return
		}
		_, _ = io.CopyN(io.Discard, r.Body, 1024)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			panic(err)
		}
		conn.Close()
	})
}

// seed writes n keys k/000… with values naming gen.
func seed(t *testing.T, cli *clientv3.Client, n int, gen string) {
	t.Helper()
	for i := range n {
		if _, err := cli.Put(testCtx(t), fmt.Sprintf("k/%03d", i), gen+"-"+fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// keys reads every key under k/.
func keys(t *testing.T, cli *clientv3.Client) (map[string]string, int64) {
	t.Helper()
	resp, err := cli.Get(testCtx(t), "k/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, kv := range resp.Kvs {
		m[string(kv.Key)] = string(kv.Value)
	}
	return m, resp.Header.Revision
}

// startRestored starts etcd on a data directory Restore made for member
// name at peerURL.
func startRestored(t *testing.T, dir, name, peerURL string) *clientv3.Client {
	t.Helper()
	srv, err := etcdtest.StartFrom(dir, name, peerURL)
	if err != nil {
		t.Fatalf("start restored etcd: %v", err)
	}
	t.Cleanup(srv.Stop)
	return srv.Client(t)
}

func freePeer(t *testing.T) string {
	t.Helper()
	u, err := etcdtest.FreePeerURL()
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// snapshotKeys lists the snapshot objects in s.
func snapshotKeys(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	it := s.bucket.List(nil)
	for {
		obj, err := it.Next(testCtx(t))
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(obj.Key, snapshotPrefix) {
			out = append(out, obj.Key)
		}
	}
}

// cutProxy forwards loopback TCP connections to target; once armed it
// drops every connection after after more bytes have come back from the
// target — a server lost in the middle of a response.
type cutProxy struct {
	ln     net.Listener
	target string
	after  int64
	armed  atomic.Bool
	sent   atomic.Int64 // bytes from the target since arming
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func startCutProxy(t *testing.T, target string, after int64) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, after: after}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) arm() { p.sent.Store(0); p.armed.Store(true) }

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(s, c); s.Close() }()
		go func() { defer p.wg.Done(); p.back(c, s); c.Close() }()
	}
}

// back copies the target's bytes to the client, cutting both when armed
// and past the limit.
func (p *cutProxy) back(c, s net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 && p.armed.Load() && p.sent.Add(int64(n)) > p.after {
			s.Close()
			return
		}
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *cutProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
