// Package flighttest is an Arrow Flight server for tests of weir's Flight
// sink: it takes DoPut streams and writes each record batch it receives to
// a Parquet file of its own, fdatasynced (file and directory) before the
// PutResult for that batch is sent — the durable point a real server must
// keep. It deduplicates nothing: a replayed batch is stored again, and
// readers count distinct weir_record_id values.
//
// Files are written through weir's file-system seam, so a test can put
// the directory on memfs and crash it (power loss keeps only what was
// synced), or on disk. Stop kills the server mid-stream (listener and
// every connection closed at once) and Restart brings it back on the same
// address over the same directory.
package flighttest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weir-io/weir/internal/vfs"
)

// Options configure a Server.
type Options struct {
	// FS and Dir are where the Parquet files go (default vfs.OS and a
	// temporary directory).
	FS  vfs.FS
	Dir string
	// Refuse, when set, is asked about every row: a batch holding a row
	// it refuses is answered InvalidArgument and nothing of it is kept.
	Refuse func(rec arrow.RecordBatch, row int) bool
	// AfterDurable, when set, is called with the server's count of
	// durable batches after each is made durable and before its
	// PutResult is sent: a test kills the server there (from another
	// goroutine: Stop waits for the handlers) to leave a batch durable but
	// unacknowledged.
	AfterDurable func(n int64)
	// ServerOptions are added to the gRPC server's (TLS credentials, an
	// interceptor checking a token).
	ServerOptions []grpc.ServerOption
}

// Server is a running test Flight server.
type Server struct {
	flight.BaseFlightServer
	opts    Options
	addr    string
	seq     atomic.Int64 // files written, for their names
	durable atomic.Int64 // batches made durable by this server

	mu    sync.Mutex
	srv   *grpc.Server
	done  chan struct{}
	paths map[string]int // descriptor paths seen, with their batches
}

// Start starts a server on a free loopback port; the test's cleanup stops
// it.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	if o.FS == nil {
		o.FS = vfs.OS
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	} else if err := o.FS.MkdirAll(o.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &Server{opts: o, paths: map[string]int{}}
	names, err := o.FS.ReadDir(o.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		// Number new files after those already there (a restart on a
		// crashed directory).
		var k int64
		if _, err := fmt.Sscanf(n, "batch-%d.parquet", &k); err == nil && k > s.seq.Load() {
			s.seq.Store(k)
		}
	}
	if err := s.listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// Endpoint is the sink's endpoint for the server.
func (s *Server) Endpoint() string { return "grpc://" + s.addr }

// Dir is where the Parquet files are.
func (s *Server) Dir() string { return s.opts.Dir }

// Batches is how many record batches the server has made durable and
// acknowledged on descriptor path p (elements joined with "/").
func (s *Server) Batches(p string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paths[p]
}

func (s *Server) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(s.opts.ServerOptions...)
	flight.RegisterFlightServiceServer(srv, s)
	done := make(chan struct{})
	s.mu.Lock()
	s.addr, s.srv, s.done = ln.Addr().String(), srv, done
	s.mu.Unlock()
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return nil
}

// Stop kills the server: its listener and every connection close at once,
// streams in flight fail, and what a handler had not yet acknowledged may
// or may not be on disk. It waits for the handlers to return.
func (s *Server) Stop() {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Stop()
	<-done
}

// Restart starts the stopped server again on the same address and
// directory.
func (s *Server) Restart() error {
	if err := s.listen(s.addr); err != nil {
		return fmt.Errorf("flighttest: restart on %s: %w", s.addr, err)
	}
	return nil
}

// DoPut implements the Flight service: every record batch is written to
// its own Parquet file, made durable, then acknowledged with a PutResult
// whose app metadata is the batch's index in the stream (8 bytes, big
// endian).
func (s *Server) DoPut(stream flight.FlightService_DoPutServer) error {
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "flighttest: read the schema: %v", err)
	}
	defer rdr.Release()
	desc := rdr.LatestFlightDescriptor()
	if desc == nil || len(desc.Path) == 0 {
		return status.Error(codes.InvalidArgument, "flighttest: DoPut without a descriptor path")
	}
	p := strings.Join(desc.Path, "/")
	for n := uint64(0); rdr.Next(); n++ {
		rec := rdr.RecordBatch()
		if s.opts.Refuse != nil {
			for i := range int(rec.NumRows()) {
				if s.opts.Refuse(rec, i) {
					return status.Errorf(codes.InvalidArgument, "flighttest: row %d of batch %d refused", i, n)
				}
			}
		}
		if err := s.write(rec); err != nil {
			return status.Errorf(codes.Unavailable, "flighttest: %v", err)
		}
		s.mu.Lock()
		s.paths[p]++
		s.mu.Unlock()
		if n := s.durable.Add(1); s.opts.AfterDurable != nil {
			s.opts.AfterDurable(n)
		}
		if err := stream.Send(&flight.PutResult{AppMetadata: binary.BigEndian.AppendUint64(nil, n)}); err != nil {
			return err
		}
	}
	if err := rdr.Err(); err != nil && err != io.EOF {
		return status.Errorf(codes.InvalidArgument, "flighttest: read a record batch: %v", err)
	}
	return nil
}

// write stores rec as a Parquet file: into a temporary name, fdatasynced,
// renamed, and the directory synced.
func (s *Server) write(rec arrow.RecordBatch) error {
	fs, dir := s.opts.FS, s.opts.Dir
	name := path.Join(dir, fmt.Sprintf("batch-%012d.parquet", s.seq.Add(1)))
	tmp := name + ".tmp"
	f, err := fs.Create(tmp, 0o644)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := pqarrow.NewFileWriter(rec.Schema(), struct{ io.Writer }{bw}, parquet.NewWriterProperties(),
		pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err == nil {
		err = w.Write(rec)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, name)
	}
	if err == nil {
		err = fs.SyncDir(dir)
	}
	if err != nil {
		_ = fs.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// Read returns every record batch stored in dir on fs, in the order they
// were acknowledged, read back from the Parquet files (temporary files,
// never acknowledged, are skipped). The caller releases them.
func Read(ctx context.Context, fs vfs.FS, dir string) ([]arrow.RecordBatch, error) {
	names, err := fs.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []arrow.RecordBatch
	release := func() {
		for _, r := range out {
			r.Release()
		}
	}
	for _, n := range names {
		if !strings.HasSuffix(n, ".parquet") {
			continue
		}
		recs, err := readFile(ctx, fs, path.Join(dir, n))
		if err != nil {
			release()
			return nil, err
		}
		out = append(out, recs...)
	}
	return out, nil
}

func readFile(ctx context.Context, fs vfs.FS, name string) ([]arrow.RecordBatch, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1 << 16}, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	rr, err := fr.GetRecordReader(ctx, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer rr.Release()
	var out []arrow.RecordBatch
	for rr.Next() {
		r := rr.RecordBatch()
		r.Retain()
		out = append(out, r)
	}
	if err := rr.Err(); err != nil && err != io.EOF {
		for _, r := range out {
			r.Release()
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}
