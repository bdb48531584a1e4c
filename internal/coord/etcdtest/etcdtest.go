// Package etcdtest starts a real single-member etcd server inside a test
// process (go.etcd.io/etcd/server/v3/embed), on loopback ports the kernel
// picks, with its data in the test's temporary directory — the way kfake
// stands in for a Kafka server. It is for tests only; the daemon's own
// embedded server lives in internal/coord.
package etcdtest

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/weir-io/weir/internal/testenv"
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
	return start(dir, name, peer, client, fmt.Sprintf("%s=%s", name, peer.String()))
}

// StartCluster runs a new cluster of n members for t (named member-0 …),
// each with its data in a directory of its own, and stops them all at
// cleanup. The cluster is ready (every member has published itself) when
// it returns.
func StartCluster(t testing.TB, n int) []*Server {
	t.Helper()
	if n < 1 {
		t.Fatalf("etcdtest: a cluster of %d members", n)
	}
	dir := t.TempDir()
	if n > 1 {
		t.Cleanup(func() { waitPeerConns(10 * time.Second) }) // after the members stop
	}
	peers, clients := make([]url.URL, n), make([]url.URL, n)
	names := make([]string, n)
	var initial []string
	for i := range n {
		var err error
		if peers[i], clients[i], err = freeURLs(); err != nil {
			t.Fatalf("etcdtest: %v", err)
		}
		names[i] = fmt.Sprintf("member-%d", i)
		initial = append(initial, names[i]+"="+peers[i].String())
	}
	// Every member waits for the others to be ready: they start at once.
	srvs := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			srvs[i], errs[i] = start(filepath.Join(dir, names[i]), names[i], peers[i], clients[i], strings.Join(initial, ","))
		}()
	}
	wg.Wait()
	for _, s := range srvs {
		if s != nil {
			t.Cleanup(s.Stop)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("etcdtest: cluster of %d: %v", n, err)
	}
	return srvs
}

// waitPeerConns waits, at most limit, until no goroutine of the process
// holds or serves an HTTP connection. Members of a cluster talk to each
// other over HTTP besides raft (lease renewals a follower forwards to the
// leader, version checks) through a round tripper etcd never closes; once
// the members have stopped, those connections end only at the peer read
// timeout (5 s), and a leak check at the end of the test binary would
// report them.
func waitPeerConns(limit time.Duration) {
	deadline := time.Now().Add(limit)
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n == len(buf) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		open := bytes.Contains(buf[:n], []byte("net/http.(*persistConn)")) || bytes.Contains(buf[:n], []byte("net/http.(*conn).serve"))
		if !open || time.Now().After(deadline) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Endpoints are the client URLs of srvs.
func Endpoints(srvs []*Server) []string {
	out := make([]string, 0, len(srvs))
	for _, s := range srvs {
		out = append(out, s.Endpoint)
	}
	return out
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
	return start(dir, name, *peer, client, fmt.Sprintf("%s=%s", name, peer.String()))
}

// FreePeerURL returns a loopback URL on a port the kernel says is free, for
// a data directory to be made for StartFrom.
func FreePeerURL() (string, error) {
	peer, _, err := freeURLs()
	return peer.String(), err
}

func start(dir, name string, peer, client url.URL, initial string) (*Server, error) {
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dir
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.InitialCluster = initial
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

// freeURLs picks two loopback ports the kernel says are free, never one
// it handed out before in this process: listeners closed one after
// another, the kernel now and then gives the same port again, and two
// members told one address fail to start ("duplicate url").
func freeURLs() (peer, client url.URL, err error) {
	var ports [2]int
	for i := range ports {
		if _, ports[i], err = testenv.FreshPort("127.0.0.1"); err != nil {
			return peer, client, err
		}
	}
	peer = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	client = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	return peer, client, nil
}
