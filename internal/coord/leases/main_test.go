package leases

import (
	"testing"

	"go.uber.org/goleak"
)

// A peer's version request that reached a member hard-stopped by a test
// (a killed leader) waits on the closed backend's lock for good.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/etcdhttp.newPeerHandler.versionHandler.func1"))
}
