// Package etcdtest starts a real single-member etcd server inside a test
// process (go.etcd.io/etcd/server/v3/embed), on loopback ports the kernel
// picks, with its data in the test's temporary directory — the way kfake
// stands in for a Kafka server. It is for tests only; the daemon's own
// embedded server lives in internal/coord.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is a running embedded etcd member.
type Server struct {
	Etcd     *embed.Etcd
	Endpoint string // client URL, http://127.0.0.1:port
	DataDir  string
	PeerURL  string
	Name     string
	stopped  bool
}

// Start runs a single-member cluster for t and stops it at cleanup. The
// server is ready when Start returns.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := StartIn(t.TempDir(), "etcdtest")
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartIn runs a single-member cluster named name with its data in dir.
// The caller stops it.
func StartIn(dir, name string) (*Server, error) {
	peer, client, err := freeURLs()
	if err != nil {
		return nil, err
	}
	return start(dir, name, peer, client)
}

// StartFrom runs the member name from a data directory made elsewhere (a
// restored snapshot), listening on peerURL, the peer URL the data records
// for it. The caller stops it.
func StartFrom(dir, name, peerURL string) (*Server, error) {
	peer, err := url.Parse(peerURL)
	if err != nil {
		return nil, fmt.Errorf("peer URL: %w", err)
	}
	_, client, err := freeURLs()
	if err != nil {
		return nil, err
	}
	return start(dir, name, *peer, client)
}

// FreePeerURL returns a loopback URL on a port the kernel says is free, for
// a data directory to be made for StartFrom.
func FreePeerURL() (string, error) {
	peer, _, err := freeURLs()
	return peer.String(), err
}

func start(dir, name string, peer, client url.URL) (*Server, error) {
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dir
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", name, peer.String())
	cfg.InitialClusterToken = "etcdtest"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(30 * time.Second):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("embedded etcd not ready after 30s")
	}
	return &Server{Etcd: e, Endpoint: client.String(), DataDir: dir, PeerURL: peer.String(), Name: name}, nil
}

// Client opens a client to s, closed at t's cleanup.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Stop stops the server; it may be called more than once.
func (s *Server) Stop() {
	if s.stopped {
		return
	}
	s.stopped = true
	s.Etcd.Server.Stop()
	s.Etcd.Close()
}

// freeURLs picks two loopback ports the kernel says are free.
func freeURLs() (peer, client url.URL, err error) {
	var ports [2]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return peer, client, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	peer = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	client = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	return peer, client, nil
}
