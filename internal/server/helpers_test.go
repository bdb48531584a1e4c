package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/wab"
	"github.com/weir-io/weir/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// answerTimeout bounds every wait for a response in these tests: a test
// that would hang fails instead.
const answerTimeout = 10 * time.Second

// shortDir is a fresh directory with a short path (sun_path holds 108
// bytes, t.TempDir can be longer than that).
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "wsrv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// slowFS wraps an FS so that fdatasync of its files can be slowed down or
// held until released.
type slowFS struct {
	vfs.FS
	delay atomic.Int64 // nanoseconds every Sync sleeps

	mu      sync.Mutex
	blocked chan struct{} // non-nil: Sync waits until it is closed
	syncs   atomic.Int64  // Syncs started
}

func newSlowFS() *slowFS { return &slowFS{FS: vfs.OS} }

func (fs *slowFS) setDelay(d time.Duration) { fs.delay.Store(int64(d)) }

// block makes every later Sync wait until release.
func (fs *slowFS) block() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.blocked == nil {
		fs.blocked = make(chan struct{})
	}
}

func (fs *slowFS) release() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.blocked != nil {
		close(fs.blocked)
		fs.blocked = nil
	}
}

func (fs *slowFS) Create(name string, perm os.FileMode) (vfs.File, error) {
	f, err := fs.FS.Create(name, perm)
	if err != nil {
		return nil, err
	}
	return &slowFile{File: f, fs: fs}, nil
}

func (fs *slowFS) OpenReadWrite(name string) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name)
	if err != nil {
		return nil, err
	}
	return &slowFile{File: f, fs: fs}, nil
}

type slowFile struct {
	vfs.File
	fs *slowFS
}

func (f *slowFile) Sync() error {
	f.fs.syncs.Add(1)
	f.fs.mu.Lock()
	ch := f.fs.blocked
	f.fs.mu.Unlock()
	if ch != nil {
		<-ch
	}
	if d := time.Duration(f.fs.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	return f.File.Sync()
}

// countObserver counts what the server reports.
type countObserver struct {
	opened, closed, received, acked, nacked atomic.Int64
	mu                                      sync.Mutex
	rejected                                map[string]int
}

func (o *countObserver) ConnOpened() { o.opened.Add(1) }
func (o *countObserver) ConnClosed() { o.closed.Add(1) }
func (o *countObserver) ConnRejected(reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.rejected == nil {
		o.rejected = map[string]int{}
	}
	o.rejected[reason]++
}
func (o *countObserver) rejectedFor(reason string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rejected[reason]
}
func (o *countObserver) Received(_ wire.Durability, frames, _, _ int) {
	o.received.Add(int64(frames))
}
func (o *countObserver) Acked(_ wire.Durability, frames, _, _ int) { o.acked.Add(int64(frames)) }
func (o *countObserver) Nacked(wire.Durability, wire.Code, int)    { o.nacked.Add(1) }

// env is a server on a real Unix socket in front of a real wab.Log.
type env struct {
	t    testing.TB
	sock string
	fs   vfs.FS
	log  *wab.Log
	srv  *Server
	obs  *countObserver

	shutdownOnce sync.Once
}

type envConfig struct {
	opts  Options
	wab   wab.Options
	fs    vfs.FS
	wrap  func(*wab.Log) Backend // default: the log itself
	nolis bool                   // do not call ListenUnix
}

func newEnv(t testing.TB, cfg envConfig) *env {
	t.Helper()
	dir := shortDir(t)
	wo := cfg.wab
	if cfg.fs == nil {
		cfg.fs = vfs.OS
	}
	wo.FS = cfg.fs
	wo.Dir = filepath.Join(dir, "wab")
	if wo.Shards == 0 {
		wo.Shards = 1
	}
	if wo.PreallocateBytes == 0 {
		wo.PreallocateBytes = 1 << 20
	}
	if wo.SegmentMaxAge == 0 {
		wo.SegmentMaxAge = -1
	}
	if wo.Logger == nil {
		wo.Logger = discardLogger()
	}
	l, err := wab.Open(context.Background(), wo)
	if err != nil {
		t.Fatal(err)
	}
	var backend Backend = l
	if cfg.wrap != nil {
		backend = cfg.wrap(l)
	}
	obs := &countObserver{}
	opts := cfg.opts
	if opts.Observer == nil {
		opts.Observer = obs
	}
	e := &env{t: t, sock: filepath.Join(dir, "run", "weir.sock"), fs: cfg.fs, log: l, obs: obs}
	e.srv = New(opts, backend)
	t.Cleanup(func() {
		if sfs, ok := cfg.fs.(*slowFS); ok {
			sfs.release()
			sfs.setDelay(0)
		}
		ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
		defer cancel()
		e.shutdown(ctx)
		if err := l.Close(ctx); err != nil && !errors.Is(err, wab.ErrShardFailed) {
			t.Errorf("close wab: %v", err)
		}
	})
	if !cfg.nolis {
		if err := e.srv.ListenUnix(e.sock); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *env) shutdown(ctx context.Context) (err error) {
	e.shutdownOnce.Do(func() { err = e.srv.Shutdown(ctx) })
	return err
}

// rawConn is a producer speaking raw wire frames.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func (e *env) dial() *rawConn {
	e.t.Helper()
	nc, err := net.Dial("unix", e.sock)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { nc.Close() })
	return &rawConn{t: e.t, nc: nc, br: bufio.NewReader(nc)}
}

func pushFrame(dst []byte, id uint64, d wire.Durability, payloads ...[]byte) []byte {
	return wire.AppendPush(dst, wire.Push{RequestID: id, Durability: d, Payloads: payloads})
}

func (r *rawConn) send(b []byte) {
	r.t.Helper()
	r.nc.SetWriteDeadline(time.Now().Add(answerTimeout))
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatalf("send: %v", err)
	}
}

func (r *rawConn) push(id uint64, d wire.Durability, payloads ...[]byte) {
	r.t.Helper()
	r.send(pushFrame(nil, id, d, payloads...))
}

// read reads one response, failing the test after answerTimeout.
func (r *rawConn) read() (wire.Response, error) {
	r.nc.SetReadDeadline(time.Now().Add(answerTimeout))
	resp, err := wire.ReadResponse(r.br)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		r.t.Fatalf("no response within %v", answerTimeout)
	}
	return resp, err
}

func (r *rawConn) expectAck(id uint64, records uint32) {
	r.t.Helper()
	resp, err := r.read()
	if err != nil {
		r.t.Fatalf("want Ack %d, got error %v", id, err)
	}
	if resp.Type != wire.TypeAck || resp.RequestID != id || resp.Count != records {
		r.t.Fatalf("want Ack id=%d count=%d, got %+v", id, records, resp)
	}
}

func (r *rawConn) expectNack(id uint64, code wire.Code) wire.Response {
	r.t.Helper()
	resp, err := r.read()
	if err != nil {
		r.t.Fatalf("want Nack %d %s, got error %v", id, code, err)
	}
	if resp.Type != wire.TypeNack || resp.RequestID != id || resp.Code != code {
		r.t.Fatalf("want Nack id=%d code=%s, got %+v", id, code, resp)
	}
	return resp
}

// expectClosed waits for the server to close the connection: EOF (or a
// reset) rather than a response.
func (r *rawConn) expectClosed(within time.Duration) {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(within))
	resp, err := wire.ReadResponse(r.br)
	switch {
	case err == nil:
		r.t.Fatalf("want the connection closed, got response %+v", resp)
	case errors.Is(err, os.ErrDeadlineExceeded):
		r.t.Fatalf("connection still open after %v", within)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), isReset(err):
	default:
		r.t.Fatalf("want the connection closed, got %v", err)
	}
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && !oe.Timeout()
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(answerTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// fakeBackend is a Backend for tests that need no storage: it acks every
// request at once and reports the shard errors it is given.
type fakeBackend struct {
	shards int
	mu     sync.Mutex
	errs   map[int]error
}

func (b *fakeBackend) Shards() int { return b.shards }

func (b *fakeBackend) ShardErr(shard int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.errs[shard]
}

func (b *fakeBackend) setErr(shard int, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.errs == nil {
		b.errs = map[int]error{}
	}
	b.errs[shard] = err
}

func (b *fakeBackend) Submit(_ context.Context, _ int, req *wab.Request, _ time.Duration) error {
	req.Done(nil)
	return nil
}

func (b *fakeBackend) SubmitInline(ctx context.Context, shard int, req *wab.Request, wait time.Duration) error {
	return b.Submit(ctx, shard, req, wait)
}
