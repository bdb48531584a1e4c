package coord

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines after all tests. etcd's peer HTTP
// connections to a stopped member end only at their 5 s read timeout, so
// the check waits up to 10 s for goroutines to finish before failing.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := settled(10 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func settled(d time.Duration) error {
	opts := []goleak.Option{
		// A peer's version request that reached a member hard-stopped by a
		// test (crash) waits on the closed backend's lock for good.
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/etcdhttp.newPeerHandler.versionHandler.func1"),
	}
	end := time.Now().Add(d)
	err := goleak.Find(opts...)
	for err != nil && time.Now().Before(end) {
		time.Sleep(250 * time.Millisecond)
		err = goleak.Find(opts...)
	}
	return err
}
