package leases

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/weir-io/weir/internal/coord/etcdtest"
)

// Latency of the recovery lease operations on a real embedded etcd, one
// member and three (all on this machine: a commit's fsync and, with three,
// its replication over loopback). Run with
//
//	go test -run '^$' -bench . -count 5 ./internal/coord/leases
//
// ns/op is one operation's round trip from a node's client.

// benchClaims is a node's Claims on a fresh cluster of members, its client
// pointed at every member as a node's is.
func benchClaims(b *testing.B, members int) *Claims {
	b.Helper()
	srvs := etcdtest.StartCluster(b, members)
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcdtest.Endpoints(srvs), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	c, err := New(context.Background(), cli, prefix, 10*time.Second, "bench-0", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

var benchSizes = []int{1, 3}

// BenchmarkClaimRelease: claim a free window (one transaction creating its
// key under the node's lease) and release it (one transaction deleting it
// if it is still this claim's) — what a recovery node pays per window
// besides the replay.
func BenchmarkClaimRelease(b *testing.B) {
	for _, members := range benchSizes {
		b.Run(fmt.Sprintf("members=%d", members), func(b *testing.B) {
			c := benchClaims(b, members)
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				cl, ok, err := c.Claim(ctx, fmt.Sprintf("pg/%d", i))
				if err != nil || !ok {
					b.Fatalf("claim %d: ok %v, %v", i, ok, err)
				}
				if err := cl.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRenew: one keepalive round trip of the node's lease (what its
// session sends every TTL/3 to keep every claim under it).
func BenchmarkRenew(b *testing.B) {
	for _, members := range benchSizes {
		b.Run(fmt.Sprintf("members=%d", members), func(b *testing.B) {
			c := benchClaims(b, members)
			c.mu.Lock()
			lease := c.sess.Lease()
			c.mu.Unlock()
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				resp, err := c.cli.KeepAliveOnce(ctx, lease)
				if err != nil {
					b.Fatal(err)
				}
				if resp.TTL <= 0 {
					b.Fatalf("lease %x: TTL %d after a keepalive", lease, resp.TTL)
				}
			}
		})
	}
}
