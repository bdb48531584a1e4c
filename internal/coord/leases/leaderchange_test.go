package leases

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/weir-io/weir/internal/coord/etcdtest"
)

// electionTimeout is embedded etcd's default (10 ticks of 100 ms).
const electionTimeout = time.Second

// lostAfterLeaderKill claims a window through the leader of a fresh
// three-member cluster, kills the leader (no leadership transfer), and
// returns how long until another node, connected to the two left, can
// claim the window.
func lostAfterLeaderKill(t *testing.T, ttl time.Duration) time.Duration {
	t.Helper()
	srvs := etcdtest.StartCluster(t, 3)
	var lead *etcdtest.Server
	var rest []string
	for _, s := range srvs {
		if s.Etcd.Server.Leader() == s.Etcd.Server.MemberID() {
			lead = s
		} else {
			rest = append(rest, s.Endpoint)
		}
	}
	if lead == nil {
		t.Fatal("no leader")
	}
	a := newClaims(t, newClient(t, lead), "a", ttl) // the holder lives on the leader's machine
	cli, err := clientv3.New(clientv3.Config{Endpoints: rest, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	b := newClaims(t, cli, "b", ttl)
	take(t, a, "pg/0")
	killed := time.Now()
	lead.Etcd.Server.HardStop() // a kill: no transfer, the holder's renewals stop with it
	claimWhenFree(t, b, "pg/0")
	return time.Since(killed)
}

// lostAfterHolderStops claims a window and stops its holder's renewals
// (its client closed), the leader staying; it returns how long until
// another node can claim the window.
func lostAfterHolderStops(t *testing.T, ttl time.Duration) time.Duration {
	t.Helper()
	srv := etcdtest.Start(t)
	cliA := newClient(t, srv)
	a := newClaims(t, cliA, "a", ttl)
	b := newClaims(t, newClient(t, srv), "b", ttl)
	take(t, a, "pg/0")
	stopped := time.Now()
	cliA.Close()
	claimWhenFree(t, b, "pg/0")
	return time.Since(stopped)
}

// Issue #25: a lost claim is not gone after one lease TTL when leadership
// changes. A new leader, once it has applied the previous term, extends
// every lease to its full TTL plus one election timeout (etcd's
// lessor.Promote(ElectionTimeout), from EtcdServer.applyEntryNormal): a
// killed leader's claims last the election (one to two election timeouts
// after the kill) + election timeout + TTL, plus up to 0.5 s until the
// expiry loop revokes. docs/coordination.md states this bound.
func TestLostClaimAfterLeaderKill(t *testing.T) {
	const ttl = 3 * time.Second
	bound := 2*electionTimeout + electionTimeout + ttl + 500*time.Millisecond
	base := lostAfterHolderStops(t, ttl)
	t.Logf("without a leader change, a claim (TTL %v) was free again %v after its holder stopped", ttl, base.Round(10*time.Millisecond))
	took := lostAfterLeaderKill(t, ttl)
	t.Logf("a killed leader's claim (TTL %v) was free again %v after the kill; stated bound %v", ttl, took.Round(10*time.Millisecond), bound)
	if took < ttl+electionTimeout {
		t.Errorf("free after %v: less than TTL + election timeout, the extension was not measured", took)
	}
	// An election that needs another round adds up to two election
	// timeouts: fail only beyond that.
	if limit := bound + 2*electionTimeout; took > limit {
		t.Errorf("free after %v, beyond %v", took, limit)
	}
}
