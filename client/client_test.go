package client

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func dialT(t *testing.T, s *testServer, opts ...Option) *Client {
	t.Helper()
	opts = append([]Option{WithBackoff(time.Millisecond, 20*time.Millisecond)}, opts...)
	c, err := Dial(ctxT(t, 5*time.Second), s.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(ctxT(t, 5*time.Second)) })
	return c
}

func TestParseAddr(t *testing.T) {
	tests := []struct {
		in, network, address string
		bad                  bool
	}{
		{in: "unix:///run/weir.sock", network: "unix", address: "/run/weir.sock"},
		{in: "unix:/run/weir.sock", network: "unix", address: "/run/weir.sock"},
		{in: "unix:rel.sock", network: "unix", address: "rel.sock"},
		{in: "/run/weir.sock", network: "unix", address: "/run/weir.sock"},
		{in: "weir.sock", network: "unix", address: "weir.sock"},
		{in: "tcp://127.0.0.1:7000", network: "tcp", address: "127.0.0.1:7000"},
		{in: "tcp://[::1]:7000", network: "tcp", address: "[::1]:7000"},
		{in: "", bad: true},
		{in: "unix:", bad: true},
		{in: "unix://relative", bad: true},
		{in: "tcp://nohost", bad: true},
		{in: "tcp://:7000", bad: true},
		{in: "http://x:1", bad: true},
	}
	for _, tt := range tests {
		ep, err := parseAddr(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("%q: accepted as %+v", tt.in, ep)
			}
			continue
		}
		if err != nil || ep.network != tt.network || ep.address != tt.address {
			t.Errorf("%q: got %+v, %v", tt.in, ep, err)
		}
	}
}

func TestDialErrors(t *testing.T) {
	ctx := ctxT(t, 5*time.Second)
	if _, err := Dial(ctx, "tcp://127.0.0.1:1"); err == nil {
		t.Error("tcp without WithTLS accepted")
	}
	if _, err := Dial(ctx, "ftp://x"); err == nil {
		t.Error("unknown scheme accepted")
	}
	if _, err := Dial(ctx, shortSocketPath(t)); err == nil {
		t.Error("dial of a missing socket succeeded")
	}
}

func TestPushRoundTrip(t *testing.T) {
	s := newUnixServer(t, nil)
	c := dialT(t, s)
	ctx := ctxT(t, 5*time.Second)
	if err := c.Push(ctx, []byte("one"), Durable); err != nil {
		t.Fatal(err)
	}
	if err := c.Push(ctx, nil, Buffered); err != nil {
		t.Fatal(err)
	}
	if err := c.PushBatch(ctx, [][]byte{[]byte("a"), {}, []byte("ccc")}, Buffered); err != nil {
		t.Fatal(err)
	}
	if err := c.PushBatch(ctx, [][]byte{[]byte("solo")}, wire.ReservedDurable); err != nil {
		t.Fatal(err)
	}
	got := s.received()
	want := []received{
		{id: 1, durability: Durable, payloads: [][]byte{[]byte("one")}},
		{id: 2, durability: Buffered, payloads: [][]byte{{}}},
		{id: 3, durability: Buffered, payloads: [][]byte{[]byte("a"), {}, []byte("ccc")}},
		{id: 4, durability: Durable, payloads: [][]byte{[]byte("solo")}},
	}
	if len(got) != len(want) {
		t.Fatalf("server saw %d requests, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].id != want[i].id || got[i].durability != want[i].durability || !samePayloads(got[i].payloads, want[i].payloads) {
			t.Errorf("request %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func samePayloads(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestLocalRefusals(t *testing.T) {
	s := newUnixServer(t, nil)
	c := dialT(t, s, WithMaxFrameBytes(100))
	ctx := ctxT(t, 5*time.Second)
	if err := c.Push(ctx, make([]byte, 100), Durable); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("oversized push: %v", err)
	}
	if err := c.PushBatch(ctx, [][]byte{make([]byte, 50), make([]byte, 50)}, Durable); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("oversized batch: %v", err)
	}
	if err := c.PushBatch(ctx, nil, Durable); !errors.Is(err, ErrEmptyBatch) {
		t.Errorf("empty batch: %v", err)
	}
	if err := c.Push(ctx, nil, Durability(7)); !errors.Is(err, ErrBadDurability) {
		t.Errorf("bad durability: %v", err)
	}
	if n := len(s.received()); n != 0 {
		t.Errorf("server saw %d requests", n)
	}
	// Exactly at the cap is fine, in either version.
	if err := c.Push(ctx, make([]byte, 100-wire.Push2PrefixSize), Durable); err != nil {
		t.Errorf("push at the cap: %v", err)
	}
	c1 := dialT(t, s, WithMaxFrameBytes(100), WithProtocolVersion(1))
	if err := c1.Push(ctx, make([]byte, 100-wire.PushPrefixSize), Durable); err != nil {
		t.Errorf("version-1 push at the cap: %v", err)
	}
}

func TestPipeliningWithinWindow(t *testing.T) {
	s := newUnixServer(t, func(received) action {
		time.Sleep(50 * time.Microsecond)
		return action{}
	})
	const window, n = 8, 300
	c := dialT(t, s, WithWindow(window))
	ctx := ctxT(t, 10*time.Second)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range n {
		wg.Add(1)
		err := c.PushAsync(ctx, [][]byte{[]byte(strconv.Itoa(i))}, Durable, func(err error) {
			if err != nil {
				failed.Add(1)
			}
			wg.Done()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d pushes failed", failed.Load())
	}
	if m := s.maxOutstanding(); m > window || m < 2 {
		t.Fatalf("server saw %d requests outstanding at once, want 2..%d", m, window)
	}
	for i, r := range s.received() {
		if r.id != uint64(i+1) || string(r.payloads[0]) != strconv.Itoa(i) {
			t.Fatalf("request %d arrived as id %d %q", i, r.id, r.payloads[0])
		}
	}
}

func TestBatchLargerThanWindow(t *testing.T) {
	s := newUnixServer(t, nil)
	c := dialT(t, s, WithWindow(2))
	ps := make([][]byte, 5)
	if err := c.PushBatch(ctxT(t, 5*time.Second), ps, Durable); err != nil {
		t.Fatal(err)
	}
}

func TestFullWindowBlocksAndRespectsCtx(t *testing.T) {
	gate := make(chan struct{})
	s := newUnixServer(t, func(received) action {
		<-gate
		return action{}
	})
	c := dialT(t, s, WithWindow(2))
	ctx := ctxT(t, 5*time.Second)
	results := make(chan error, 2)
	for range 2 {
		if err := c.PushAsync(ctx, [][]byte{[]byte("x")}, Durable, func(err error) { results <- err }); err != nil {
			t.Fatal(err)
		}
	}
	// The window is full: a deadline ends the wait.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	start := time.Now()
	err := c.PushAsync(short, [][]byte{[]byte("y")}, Durable, func(error) { t.Error("callback of a refused push") })
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 40*time.Millisecond {
		t.Fatalf("blocked push: %v after %v", err, time.Since(start))
	}
	// So does cancellation of a blocking Push.
	cctx, ccancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- c.Push(cctx, []byte("z"), Durable) }()
	time.Sleep(20 * time.Millisecond)
	ccancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled push: %v", err)
	}
	close(gate)
	for range 2 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	// The abandoned waits gave their slots back.
	for range 3 {
		if err := c.Push(ctx, []byte("after"), Durable); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.received()); n != 5 {
		t.Fatalf("server saw %d requests, want 5", n)
	}
}

func TestNackCodes(t *testing.T) {
	s := newUnixServer(t, func(r received) action {
		code, _ := strconv.Atoi(string(r.payloads[0]))
		return action{kind: actNack, code: wire.Code(code), msg: "because " + wire.Code(code).String()}
	})
	c := dialT(t, s, WithOverloadRetries(0))
	ctx := ctxT(t, 5*time.Second)
	tests := []struct {
		code      wire.Code
		sentinel  error
		retryable bool
	}{
		{wire.CodeFrameTooLarge, ErrFrameTooLarge, false},
		{wire.CodeBadVersion, ErrBadVersion, false},
		{wire.CodeBadDurability, ErrBadDurability, false},
		{wire.CodeBadFrame, ErrBadFrame, false},
		{wire.CodeQueueTimeout, ErrQueueTimeout, true},
		{wire.CodeDiskFull, ErrDiskFull, true},
		{wire.CodeShardFailed, ErrShardFailed, true},
		{wire.CodeShuttingDown, ErrShuttingDown, true},
		{wire.CodeInternal, ErrInternal, false},
		{wire.CodeNoHello, ErrNoHello, false},
		{wire.CodeBadMeta, ErrBadMeta, false},
		{wire.CodeNotPermitted, ErrNotPermitted, false},
		{wire.CodeOverloaded, ErrOverloaded, true},
		{42, nil, false},
	}
	all := []error{ErrFrameTooLarge, ErrBadVersion, ErrBadDurability, ErrBadFrame, ErrQueueTimeout,
		ErrDiskFull, ErrShardFailed, ErrShuttingDown, ErrInternal, ErrNoHello, ErrBadMeta, ErrNotPermitted, ErrOverloaded}
	for _, tt := range tests {
		err := c.Push(ctx, []byte(strconv.Itoa(int(tt.code))), Durable)
		var ne *NackError
		if !errors.As(err, &ne) || ne.Code != tt.code || ne.Message != "because "+tt.code.String() {
			t.Errorf("code %s: got %v", tt.code, err)
			continue
		}
		for _, s := range all {
			if errors.Is(err, s) != (s == tt.sentinel) {
				t.Errorf("code %s: errors.Is(err, %v) = %v", tt.code, s, errors.Is(err, s))
			}
		}
		if Retryable(err) != tt.retryable {
			t.Errorf("code %s: Retryable = %v", tt.code, Retryable(err))
		}
		if Retryable(fmt.Errorf("wrapped: %w", err)) != tt.retryable {
			t.Errorf("code %s: Retryable through a wrap", tt.code)
		}
	}
	if Retryable(ErrClosed) || Retryable(context.DeadlineExceeded) || Retryable(nil) {
		t.Error("non-Nack errors reported retryable")
	}
	// Nacks are final: every request reached the server exactly once.
	if n := len(s.received()); n != len(tests) {
		t.Errorf("server saw %d requests, want %d", n, len(tests))
	}
}

func TestFatalNackWithoutID(t *testing.T) {
	s := newUnixServer(t, func(r received) action {
		if string(r.payloads[0]) == "big" {
			return action{kind: actNack0Drop, code: wire.CodeFrameTooLarge, msg: "too large"}
		}
		return action{}
	})
	c := dialT(t, s)
	ctx := ctxT(t, 5*time.Second)
	if err := c.Push(ctx, []byte("ok"), Durable); err != nil {
		t.Fatal(err)
	}
	if err := c.Push(ctx, []byte("big"), Durable); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v, want ErrFrameTooLarge", err)
	}
	// The client reconnects and carries on; the refused request is not resent.
	if err := c.Push(ctx, []byte("ok again"), Durable); err != nil {
		t.Fatal(err)
	}
	big := 0
	for _, r := range s.received() {
		if string(r.payloads[0]) == "big" {
			big++
		}
	}
	if big != 1 {
		t.Fatalf("refused request sent %d times", big)
	}
}

func TestReconnectResendsInOrder(t *testing.T) {
	// On the first connection the server acks ids 1-3, leaves 4 and 5
	// unanswered, and drops the connection when id 6 arrives.
	s := newUnixServer(t, func(r received) action {
		if r.conn == 0 {
			switch {
			case r.id <= 3:
				return action{}
			case r.id == 6:
				return action{kind: actDrop}
			case r.id > 3:
				return action{kind: actSilent}
			}
		}
		return action{}
	})
	c := dialT(t, s)
	ctx := ctxT(t, 10*time.Second)
	for i := 1; i <= 3; i++ {
		if err := c.Push(ctx, []byte(fmt.Sprint("rec-", i)), Durable); err != nil {
			t.Fatal(err)
		}
	}
	const total = 12
	var wg sync.WaitGroup
	var mu sync.Mutex
	calls := map[int]int{}
	for i := 4; i <= total; i++ {
		wg.Add(1)
		err := c.PushAsync(ctx, [][]byte{[]byte(fmt.Sprint("rec-", i))}, Buffered, func(err error) {
			if err != nil {
				t.Errorf("record %d: %v", i, err)
			}
			mu.Lock()
			calls[i]++
			mu.Unlock()
			wg.Done()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for i := 4; i <= total; i++ {
		if calls[i] != 1 {
			t.Errorf("record %d: callback ran %d times", i, calls[i])
		}
	}
	var later []received
	for _, r := range s.received() {
		if r.conn > 0 {
			later = append(later, r)
		}
	}
	if len(later) != total-3 {
		t.Fatalf("later connections saw %d requests, want %d: %+v", len(later), total-3, later)
	}
	for i, r := range later {
		id := uint64(i + 4)
		if r.id != id || string(r.payloads[0]) != fmt.Sprint("rec-", id) || r.durability != Buffered {
			t.Fatalf("resend %d: got id %d %q %s, want id %d", i, r.id, r.payloads[0], r.durability, id)
		}
	}
}

func TestReconnectAfterServerRestart(t *testing.T) {
	path := shortSocketPath(t)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, ln, "unix:"+path, nil)
	c := dialT(t, s)
	ctx := ctxT(t, 10*time.Second)
	if err := c.Push(ctx, []byte("before"), Durable); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Pushed while the daemon is down: queued and sent once it is back.
	done := make(chan error, 1)
	if err := c.PushAsync(ctx, [][]byte{[]byte("while down")}, Durable, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond) // a few failed redials
	ln2, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s2 := startServer(t, ln2, "unix:"+path, nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := s2.received(); len(got) != 1 || string(got[0].payloads[0]) != "while down" || got[0].id != 2 {
		t.Fatalf("restarted server saw %+v", got)
	}
}

func TestCloseWaitsForInFlight(t *testing.T) {
	s := newUnixServer(t, func(received) action {
		time.Sleep(10 * time.Millisecond)
		return action{}
	})
	c := dialT(t, s)
	ctx := ctxT(t, 5*time.Second)
	var acked atomic.Int32
	for range 5 {
		if err := c.PushAsync(ctx, [][]byte{[]byte("x")}, Durable, func(err error) {
			if err == nil {
				acked.Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if acked.Load() != 5 {
		t.Fatalf("%d of 5 acked before Close returned", acked.Load())
	}
	if err := c.Push(ctx, []byte("late"), Durable); !errors.Is(err, ErrClosed) {
		t.Fatalf("push after Close: %v", err)
	}
	if err := c.Close(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

func TestCloseFailsUnanswered(t *testing.T) {
	s := newUnixServer(t, func(received) action { return action{kind: actSilent} })
	c := dialT(t, s, WithWindow(2))
	ctx := ctxT(t, 5*time.Second)
	results := make(chan error, 2)
	for range 2 {
		if err := c.PushAsync(ctx, [][]byte{[]byte("x")}, Durable, func(err error) { results <- err }); err != nil {
			t.Fatal(err)
		}
	}
	blocked := make(chan error, 1)
	go func() { blocked <- c.Push(ctx, []byte("waiting for the window"), Durable) }()
	time.Sleep(20 * time.Millisecond)

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := c.Close(short)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v", err)
	}
	for range 2 {
		if err := <-results; !errors.Is(err, ErrClosed) {
			t.Fatalf("unanswered request: %v", err)
		}
	}
	if err := <-blocked; !errors.Is(err, ErrClosed) {
		t.Fatalf("push blocked on the window: %v", err)
	}
}

func TestCloseWhileDisconnected(t *testing.T) {
	s := newUnixServer(t, nil)
	c := dialT(t, s)
	s.Close()
	done := make(chan error, 1)
	if err := c.PushAsync(ctxT(t, 5*time.Second), [][]byte{[]byte("x")}, Durable, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v", err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("request: %v", err)
	}
}

func TestDropMidStreamUnderLoad(t *testing.T) {
	s := newUnixServer(t, nil)
	c := dialT(t, s, WithWindow(64))
	ctx := ctxT(t, 20*time.Second)
	const n = 2000
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range n {
		if i%500 == 250 {
			s.dropAll()
		}
		wg.Add(1)
		if err := c.PushAsync(ctx, [][]byte{[]byte(strconv.Itoa(i))}, Durable, func(err error) {
			if err != nil {
				failed.Add(1)
			}
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d pushes failed", failed.Load())
	}
	seen := map[uint64]bool{}
	for _, r := range s.received() {
		seen[r.id] = true
	}
	for id := uint64(1); id <= n; id++ {
		if !seen[id] {
			t.Fatalf("id %d never reached the server", id)
		}
	}
}

// tlsPair returns a server and a client config for a throwaway CA.
func tlsPair(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "weir test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	server = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}
	client = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}
	return server, client
}

func TestTCPWithTLS(t *testing.T) {
	srvCfg, cliCfg := tlsPair(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, ln, "tcp://"+ln.Addr().String(), nil)
	c := dialT(t, s, WithTLS(cliCfg))
	ctx := ctxT(t, 5*time.Second)
	if err := c.PushBatch(ctx, [][]byte{[]byte("over"), []byte("tls")}, Durable); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	versions := append([]uint16(nil), s.tlsVersions...)
	s.mu.Unlock()
	if len(versions) != 1 || versions[0] != tls.VersionTLS13 {
		t.Fatalf("TLS versions %v", versions)
	}
	// A client without a certificate is refused by the handshake.
	bare := &tls.Config{RootCAs: cliCfg.RootCAs}
	c2, err := Dial(ctx, s.addr, WithTLS(bare), WithDialTimeout(time.Second))
	if err == nil {
		// TLS 1.3 reports the missing certificate after the handshake.
		err = c2.Push(ctxT(t, 300*time.Millisecond), []byte("x"), Durable)
		c2.Close(ctxT(t, 100*time.Millisecond))
	}
	if err == nil {
		t.Fatal("client without a certificate got through")
	}
}

func BenchmarkPush(b *testing.B) {
	s := newBenchServer(b)
	c, err := Dial(context.Background(), s.addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	payload := make([]byte, 256)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Push(ctx, payload, Buffered); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPushAsync(b *testing.B) {
	s := newBenchServer(b)
	c, err := Dial(context.Background(), s.addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	payload := [][]byte{make([]byte, 256)}
	ctx := context.Background()
	var wg sync.WaitGroup
	done := func(err error) {
		if err != nil {
			b.Error(err)
		}
		wg.Done()
	}
	b.ReportAllocs()
	for b.Loop() {
		wg.Add(1)
		if err := c.PushAsync(ctx, payload, Buffered, done); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
}
