package kafkasink_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/sink/kafkasink"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink/sinktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const topic = "weir-out"

// cluster is an in-process Kafka cluster that keeps its log in a directory,
// so that it can be restarted with what it had acknowledged.
type cluster struct {
	dir  string
	opts []kfake.Opt

	mu sync.Mutex
	c  *kfake.Cluster
}

// newCluster starts a one-broker cluster with topic in partitions
// partitions.
func newCluster(t testing.TB, partitions int32, opts ...kfake.Opt) *cluster {
	t.Helper()
	c := &cluster{dir: t.TempDir(), opts: opts}
	c.start(t, kfake.SeedTopics(partitions, topic))
	t.Cleanup(c.close)
	return c
}

func (c *cluster) start(t testing.TB, extra ...kfake.Opt) {
	t.Helper()
	kc, err := kfake.NewCluster(append(append([]kfake.Opt{kfake.NumBrokers(1), kfake.DataDir(c.dir)}, c.opts...), extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.c = kc
	c.mu.Unlock()
}

// restart stops the cluster and starts it again from its directory, on
// another port.
func (c *cluster) restart(t testing.TB) {
	t.Helper()
	c.close()
	c.start(t)
}

func (c *cluster) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.c.Close()
}

func (c *cluster) kfake() *kfake.Cluster {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c
}

func (c *cluster) addrs() []string { return c.kfake().ListenAddrs() }

// dialer connects a sink's client to the brokers and can cut it off: Drop
// closes its connections, Cut also refuses new ones until Restore.
type dialer struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	cut   bool
}

func (d *dialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errCut}
	}
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if d.conns == nil {
		d.conns = map[net.Conn]struct{}{}
	}
	d.conns[c] = struct{}{}
	return c, nil
}

type cutError struct{}

func (cutError) Error() string { return "connection refused by the test (cut)" }

var errCut error = cutError{}

// Drop closes every connection; new ones may be made.
func (d *dialer) Drop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c := range d.conns {
		c.Close()
	}
	clear(d.conns)
}

// Cut closes every connection and refuses new ones until Restore.
func (d *dialer) Cut() {
	d.Drop()
	d.mu.Lock()
	d.cut = true
	d.mu.Unlock()
}

func (d *dialer) Restore() {
	d.mu.Lock()
	d.cut = false
	d.mu.Unlock()
}

// open opens a sink on c through d (nil: a dialer of its own), closed when
// the test ends.
func open(t testing.TB, c *cluster, d *dialer, mod func(*kafkasink.Options)) *kafkasink.Sink {
	t.Helper()
	if d == nil {
		d = &dialer{}
	}
	o := kafkasink.Options{
		Brokers:         c.addrs(),
		Topic:           topic,
		DeliveryTimeout: 3 * time.Second,
		MaxBatchSize:    1000,
		MaxMessageBytes: 128 << 10,
		HealthTimeout:   time.Second,
		ClientOptions:   []kgo.Opt{kgo.Dialer(d.dial)},
	}
	if mod != nil {
		mod(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := kafkasink.New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// readBack reads the topic as a newcomer would and decodes every record.
func readBack(c *cluster) func(context.Context) ([]sinktest.Stored, error) {
	return func(ctx context.Context) ([]sinktest.Stored, error) {
		recs, err := testenv.ReadKafkaTopic(ctx, c.addrs(), topic)
		if err != nil {
			return nil, err
		}
		out := make([]sinktest.Stored, 0, len(recs))
		for _, kr := range recs {
			r, err := kafkasink.Decode(kr)
			if err != nil {
				return nil, err
			}
			out = append(out, sinktest.Stored{ID: r.ID, Payload: r.Payload, Source: r.Source, Durability: r.Durability,
				Received: r.Received, Key: r.Key, Headers: r.Headers, EventTime: r.EventTime})
		}
		return out, nil
	}
}
