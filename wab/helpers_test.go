package wab

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/vfs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

func testOpts(dir string) Options {
	return Options{Dir: dir, Shards: 1, Logger: quiet, PreallocateBytes: 1 << 20, SegmentMaxAge: -1}
}

func mustOpen(t testing.TB, o Options) *Log {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quiet
	}
	l, err := Open(context.Background(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func mustClose(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// submit submits one request and waits for its Done.
func submit(t testing.TB, l *Log, shard int, d Durability, received int64, payloads ...[]byte) error {
	t.Helper()
	ch := make(chan error, 1)
	req := &Request{Durability: d, Payloads: payloads, Received: received, Done: func(err error) { ch <- err }}
	if err := l.Submit(context.Background(), shard, req, time.Second); err != nil {
		return err
	}
	return waitDone(t, ch)
}

// waitDone returns what a request's Done sent on ch, failing the test
// when it is not called within 10 s.
func waitDone(t testing.TB, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Done not called within 10s")
		return nil
	}
}

// crash stops the log the way a killed process would leave it: no seal, no
// footer; the open segment stays as written.
func crash(t testing.TB, l *Log) {
	t.Helper()
	for _, s := range l.shards {
		s.fail(errors.New("simulated crash"))
	}
	_ = l.Close(context.Background())
}

type readRec struct {
	Shard      int
	Seq        uint64
	Durability Durability
	Received   int64
	Meta       string
	Payload    string
	ID         [16]byte
}

// readSegment reads every record of one segment, failing the test on any
// error other than io.EOF.
func readSegment(t testing.TB, fs vfs.FS, path string) ([]readRec, Header) {
	t.Helper()
	r, err := OpenSegment(fs, path)
	if err != nil {
		t.Fatalf("OpenSegment(%s): %v", path, err)
	}
	defer r.Close()
	var out []readRec
	for i := uint64(0); ; i++ {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Next(%s): %v", path, err)
		}
		h := r.Header()
		out = append(out, readRec{int(h.Shard), h.Seq, rec.Durability, rec.Received, string(rec.Meta), string(rec.Payload), RecordID(h, i, rec.Payload)})
	}
	return out, r.Header()
}

// readAllSealed reads every sealed segment under dir, by shard then seq.
func readAllSealed(t testing.TB, fs vfs.FS, dir string) []readRec {
	t.Helper()
	if fs == nil {
		fs = vfs.OS
	}
	refs, err := ListSealed(fs, dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []readRec
	for _, ref := range refs {
		recs, _ := readSegment(t, fs, ref.Path)
		out = append(out, recs...)
	}
	return out
}

func payloads(recs []readRec) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Payload
	}
	return out
}

// openSegments lists the .wab files (open segments) under dir.
func openSegments(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "shard-*", "*.wab"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// recorder is an Observer that remembers what it saw.
type recorder struct {
	mu       sync.Mutex
	batches  []int
	syncs    int
	sealed   []SegmentRef
	maxDepth int
}

func (r *recorder) Batch(shard int, records, bytes int, sync time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, records)
	if sync > 0 {
		r.syncs++
	}
}

func (r *recorder) Sealed(ref SegmentRef, records uint64, bytes int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sealed = append(r.sealed, ref)
}

func (r *recorder) QueueDepth(shard int, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.maxDepth = max(r.maxDepth, n)
}

func isSegFile(path string) bool { return strings.HasSuffix(path, SuffixOpen) }
