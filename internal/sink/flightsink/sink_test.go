package flightsink_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/weir-io/weir/internal/sink/flightsink"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/internal/testenv/flighttest"
	"github.com/weir-io/weir/internal/tlsconf/tlstest"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// bearer is a server interceptor that accepts only calls carrying
// "authorization: Bearer <want()>".
func bearer(want func() string) grpc.ServerOption {
	return grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+want() {
			return status.Error(codes.Unauthenticated, "bad token")
		}
		return handler(srv, ss)
	})
}

// TestMutualTLSAndToken: over grpc+tls:// the sink verifies the server
// against tls_ca_file, presents its client certificate, and sends the
// bearer token of token_file, re-read when the file changes. A sink
// without a client certificate cannot connect (transient, health down);
// one with a token the server refuses fails permanent.
func TestMutualTLSAndToken(t *testing.T) {
	ca := tlstest.NewCA(t, "flight CA")
	server, client := ca.Server(t), ca.Client(t, "weir-sink")
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		tlstest.WriteFile(t, p, data)
		return p
	}
	caFile, certFile, keyFile := write("ca.crt", ca.CertPEM), write("client.crt", client.CertPEM), write("client.key", client.KeyPEM)
	tokenFile := write("token", []byte("first-token\n"))
	var token atomic.Value
	token.Store("first-token")
	srv := flighttest.Start(t, flighttest.Options{ServerOptions: []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{server.TLS}, ClientCAs: ca.Pool(),
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13})),
		bearer(func() string { return token.Load().(string) }),
	}})
	endpoint := "grpc+tls://" + srv.Addr()
	ctx := context.Background()

	s := openSink(t, endpoint, func(o *flightsink.Options) {
		o.TLS = flightsink.TLSFiles{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}
		o.TokenFile = tokenFile
	})
	if h := s.Health(ctx); h.State != sink.Healthy {
		t.Fatalf("health %v: %s", h.State, h.Reason)
	}
	probe := flightsink.Options{Endpoint: endpoint, Path: []string{"p"}, TokenFile: tokenFile,
		TLS: flightsink.TLSFiles{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}}
	if err := flightsink.Probe(ctx, probe); err != nil {
		t.Errorf("probe: %v", err)
	}
	if _, err := s.Commit(ctx, sink.NewBatch(records("tls", 0, 10, 50))); err != nil {
		t.Fatal(err)
	}
	// A rotated token applies to the next call.
	token.Store("second-token")
	time.Sleep(10 * time.Millisecond) // a modification time of its own
	write("token", []byte("second-token\n"))
	if _, err := s.Commit(ctx, sink.NewBatch(records("tls", 10, 10, 50))); err != nil {
		t.Fatalf("after the token's rotation: %v", err)
	}
	if n := srv.Batches("weir/test"); n != 2 {
		t.Errorf("%d batches acknowledged, want 2", n)
	}

	noCert := openSink(t, endpoint, func(o *flightsink.Options) { o.TLS = flightsink.TLSFiles{CAFile: caFile}; o.TokenFile = tokenFile })
	if _, err := noCert.Commit(ctx, sink.NewBatch(records("tls", 20, 1, 50))); err == nil || !sink.IsTransient(err) {
		t.Errorf("without a client certificate: %v (transient %v), want a transient failure", err, sink.IsTransient(err))
	}
	if h := noCert.Health(ctx); h.State != sink.Down {
		t.Errorf("without a client certificate: health %v, want down", h.State)
	}

	t.Setenv("WEIR_TEST_FLIGHT_TOKEN", "wrong")
	wrong := openSink(t, endpoint, func(o *flightsink.Options) {
		o.TLS = flightsink.TLSFiles{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}
		o.TokenEnv = "WEIR_TEST_FLIGHT_TOKEN"
	})
	_, err := wrong.Commit(ctx, sink.NewBatch(records("tls", 21, 1, 50)))
	if err == nil || sink.IsTransient(err) || !strings.Contains(err.Error(), "token") {
		t.Errorf("with a refused token: %v (transient %v), want permanent, naming the token", err, sink.IsTransient(err))
	}
	if h := wrong.Health(ctx); h.State != sink.Down {
		t.Errorf("with a refused token: health %v, want down", h.State)
	}
	probe.TokenFile, probe.TokenEnv = "", "WEIR_TEST_FLIGHT_TOKEN"
	if err := flightsink.Probe(ctx, probe); err == nil {
		t.Error("probe with a refused token succeeded")
	}
}

// silent is a Flight server that reads a DoPut to its end and never sends
// a PutResult: it does not keep the acknowledgement protocol.
type silent struct{ flight.BaseFlightServer }

func (*silent) DoPut(stream flight.FlightService_DoPutServer) error {
	for {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
	}
}

// TestServerWithoutAcks: a DoPut the server ends cleanly without a
// PutResult per batch fails the commit permanently, saying why; nothing
// is taken as durable on send.
func TestServerWithoutAcks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	flight.RegisterFlightServiceServer(g, &silent{})
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(ln) }()
	defer func() { g.Stop(); <-done }()
	s := openSink(t, "grpc://"+ln.Addr().String())
	_, err = s.Commit(context.Background(), sink.NewBatch(records("silent", 0, 5, 50)))
	if err == nil || sink.IsTransient(err) || !strings.Contains(err.Error(), "0 PutResults for 1 record batches") {
		t.Fatalf("commit to a server that never acknowledges: %v (transient %v)", err, sink.IsTransient(err))
	}
}

// TestMetrics: a sink's series exist from its opening, count what the
// server acknowledged, and two sinks share one registry.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv := flighttest.Start(t, flighttest.Options{})
	a := openSink(t, srv.Endpoint(), func(o *flightsink.Options) { o.Name, o.Metrics, o.MaxMessageBytes = "a", reg, 256<<10 })
	openSink(t, srv.Endpoint(), func(o *flightsink.Options) { o.Name, o.Metrics = "b", reg })
	for _, n := range []string{"a", "b"} {
		if v := testenv.Metric(t, reg, "weir_flight_sink_rows_total", map[string]string{"sink": n}); v != 0 {
			t.Errorf("sink %s: rows %v before any commit", n, v)
		}
	}
	if _, err := a.Commit(context.Background(), sink.NewBatch(records("m", 0, 600, 1000))); err != nil {
		t.Fatal(err)
	}
	rows := testenv.Metric(t, reg, "weir_flight_sink_rows_total", map[string]string{"sink": "a"})
	batches := testenv.Metric(t, reg, "weir_flight_sink_batches_total", map[string]string{"sink": "a"})
	if rows != 600 || batches != float64(srv.Batches("weir/test")) || batches < 2 {
		t.Errorf("rows %v batches %v (server: %d), want 600 rows in at least 2 batches", rows, batches, srv.Batches("weir/test"))
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "weir_flight_sink_ack_duration_seconds" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "a" && m.GetHistogram().GetSampleCount() != uint64(batches) {
					t.Errorf("ack latency observations %d, want %v", m.GetHistogram().GetSampleCount(), batches)
				}
			}
		}
	}
}

// TestOpenChecks: what New refuses before any connection.
func TestOpenChecks(t *testing.T) {
	ctx := context.Background()
	for name, o := range map[string]flightsink.Options{
		"bad scheme":     {Endpoint: "http://127.0.0.1:1", Path: []string{"x"}},
		"no path":        {Endpoint: "grpc://127.0.0.1:1"},
		"unset env":      {Endpoint: "grpc://127.0.0.1:1", Path: []string{"x"}, TokenEnv: "WEIR_TEST_FLIGHT_UNSET"},
		"no token file":  {Endpoint: "grpc://127.0.0.1:1", Path: []string{"x"}, TokenFile: filepath.Join(t.TempDir(), "none")},
		"bad CA":         {Endpoint: "grpc+tls://127.0.0.1:1", Path: []string{"x"}, TLS: flightsink.TLSFiles{CAFile: os.DevNull}},
		"no JSON Schema": {Endpoint: "grpc://127.0.0.1:1", Path: []string{"x"}, Columns: flightsink.ColumnsJSONSchema},
		"tiny messages":  {Endpoint: "grpc://127.0.0.1:1", Path: []string{"x"}, MaxMessageBytes: 1000},
	} {
		if s, err := flightsink.New(ctx, o); err == nil {
			s.Close()
			t.Errorf("%s: opened", name)
		} else if errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestCompression: with lz4 or zstd bodies the server reads the same
// records back.
func TestCompression(t *testing.T) {
	for _, codec := range []string{flightsink.CompressionLZ4, flightsink.CompressionZstd} {
		t.Run(codec, func(t *testing.T) {
			srv := flighttest.Start(t, flighttest.Options{})
			s := openSink(t, srv.Endpoint(), func(o *flightsink.Options) { o.Compression = codec })
			recs := records(codec, 0, 300, 200)
			if _, err := s.Commit(context.Background(), sink.NewBatch(recs)); err != nil {
				t.Fatal(err)
			}
			got, err := readBack(t, vfs.OS, srv.Dir())(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(recs) {
				t.Fatalf("%d rows read back, want %d", len(got), len(recs))
			}
			for i := range got {
				if got[i].ID != recs[i].ID || string(got[i].Payload) != string(recs[i].Payload) {
					t.Fatalf("row %d differs", i)
				}
			}
		})
	}
}
