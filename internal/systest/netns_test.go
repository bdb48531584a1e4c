package systest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// requireNetnsEnv makes a test that needs a network namespace fail,
// rather than skip, where none can be created (.ci/run sets it).
const requireNetnsEnv = "WEIR_REQUIRE_NETNS"

// netnsPrefix names the namespaces the tests create: netnsPrefix + the
// test process's pid.
const netnsPrefix = "weir-part-"

// testNetns is a network namespace of the test's own, joined to the
// test's namespace by a veth pair on a private /30: hostIP is the end in
// the test's namespace, nsIP the end inside. Loopback is up inside, so a
// process there reaches its own addresses; traffic between the two
// crosses the veth pair only, and partition cuts it.
type testNetns struct {
	name         string
	ip           string // the ip(8) binary
	hostIf, nsIf string
	hostIP, nsIP string
}

// newTestNetns creates the namespace and its veth pair, deleted when the
// test ends (also when it fails). Where namespaces cannot be created (not
// root, no ip(8), a sandbox without CAP_SYS_ADMIN) it skips loudly, or
// fails under WEIR_REQUIRE_NETNS=1.
func newTestNetns(t *testing.T) *testNetns {
	t.Helper()
	ipBin := netnsIP(t)
	pid := os.Getpid()
	octet := freeSubnet(t, pid)
	n := &testNetns{name: netnsPrefix + strconv.Itoa(pid), ip: ipBin,
		hostIf: "wph" + strconv.Itoa(pid), nsIf: "wpn" + strconv.Itoa(pid),
		hostIP: fmt.Sprintf("10.213.%d.1", octet), nsIP: fmt.Sprintf("10.213.%d.2", octet)}
	n.create(t, "/30", []string{"addr", "add", n.hostIP + "/30", "dev", n.hostIf})
	return n
}

// newTestBridge creates n namespaces, each joined by a veth pair to one
// bridge in the test's namespace, all on one 10.213.x.0/24: the bridge is
// .1 (every namespace's hostIP), the k-th namespace .(k+2). Processes in
// two namespaces reach each other through the bridge, and the test's
// through its address; partition cuts one namespace off from all of them
// (its pair's end on the bridge goes down), heal joins it again.
func newTestBridge(t *testing.T, n int) []*testNetns {
	t.Helper()
	ipBin := netnsIP(t)
	pid := strconv.Itoa(os.Getpid())
	octet := freeSubnet(t, os.Getpid())
	bridge, bridgeIP := "wpb"+pid, fmt.Sprintf("10.213.%d.1", octet)
	if out, err := exec.Command(ipBin, "link", "add", bridge, "type", "bridge").CombinedOutput(); err != nil {
		netnsUnavailable(t, fmt.Sprintf("ip link add %s type bridge: %v: %s", bridge, err, strings.TrimSpace(string(out))))
	}
	// Registered first, so it runs last: after every namespace is gone.
	t.Cleanup(func() { exec.Command(ipBin, "link", "del", bridge).Run() })
	for _, args := range [][]string{{"addr", "add", bridgeIP + "/24", "dev", bridge}, {"link", "set", bridge, "up"}} {
		if out, err := exec.Command(ipBin, args...).CombinedOutput(); err != nil {
			netnsUnavailable(t, fmt.Sprintf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out))))
		}
	}
	out := make([]*testNetns, n)
	for k := range out {
		sfx := strconv.Itoa(k)
		out[k] = &testNetns{name: netnsPrefix + pid + "-" + sfx, ip: ipBin,
			hostIf: "wph" + pid + "x" + sfx, nsIf: "wpn" + pid + "x" + sfx,
			hostIP: bridgeIP, nsIP: fmt.Sprintf("10.213.%d.%d", octet, k+2)}
		out[k].create(t, "/24", []string{"link", "set", out[k].hostIf, "master", bridge})
	}
	return out
}

// netnsIP is the ip(8) binary, after namespaces left by dead test
// processes are removed; it skips (or fails) where there is none.
func netnsIP(t *testing.T) string {
	t.Helper()
	ipBin, err := exec.LookPath("ip")
	if err != nil {
		netnsUnavailable(t, fmt.Sprintf("no ip(8) (iproute2) on PATH: %v", err))
	}
	removeStaleNetns(ipBin)
	return ipBin
}

// create adds the namespace and its veth pair: the host end is set up by
// hostSetup (an address, or a bridge to join), the inside end gets nsIP
// with mask. It waits until a connection crosses the pair.
func (n *testNetns) create(t *testing.T, mask string, hostSetup []string) {
	t.Helper()
	if out, err := exec.Command(n.ip, "netns", "add", n.name).CombinedOutput(); err != nil {
		netnsUnavailable(t, fmt.Sprintf("ip netns add %s: %v: %s", n.name, err, strings.TrimSpace(string(out))))
	}
	t.Cleanup(func() {
		// Deleting one end of a veth pair deletes both; the namespace
		// goes when its last process has (the daemons are killed by
		// their own cleanups, which run before this one).
		exec.Command(n.ip, "link", "del", n.hostIf).Run()
		if out, err := exec.Command(n.ip, "netns", "del", n.name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", n.name, err, out)
		}
	})
	for _, args := range [][]string{
		{"link", "add", n.hostIf, "type", "veth", "peer", "name", n.nsIf},
		{"link", "set", n.nsIf, "netns", n.name},
		hostSetup,
		{"link", "set", n.hostIf, "up"},
		{"-n", n.name, "addr", "add", n.nsIP + mask, "dev", n.nsIf},
		{"-n", n.name, "link", "set", n.nsIf, "up"},
		{"-n", n.name, "link", "set", "lo", "up"},
	} {
		if err := n.run(args...); err != nil {
			netnsUnavailable(t, err.Error())
		}
	}
	// The pair is usable once a connection crosses it both ways (a
	// bridge port forwards only after its learning delay).
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := n.probe()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the veth pair of %s does not carry traffic: %v", n.name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *testNetns) run(args ...string) error {
	if out, err := exec.Command(n.ip, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// probe connects from inside the namespace to a listener on hostIP.
func (n *testNetns) probe() error {
	ln, err := net.Listen("tcp4", net.JoinHostPort(n.hostIP, "0"))
	if err != nil {
		return err
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := dialInNetns(ctx, n.name, "tcp4", ln.Addr().String())
	if err != nil {
		return err
	}
	return c.Close()
}

// partition cuts the veth pair: the host end goes down, so every packet
// between the namespace and the test's dies silently (no reset, no
// unreachable), while each side still reaches its own addresses.
func (n *testNetns) partition(t *testing.T) {
	t.Helper()
	if err := n.run("link", "set", n.hostIf, "down"); err != nil {
		t.Fatal(err)
	}
}

// heal brings the host end up again.
func (n *testNetns) heal(t *testing.T) {
	t.Helper()
	if err := n.run("link", "set", n.hostIf, "up"); err != nil {
		t.Fatal(err)
	}
}

// command runs bin with args inside the namespace: ip(8) enters it and
// execs bin, so the process's pid is bin's and signals reach it.
func (n *testNetns) command(bin string, args ...string) *exec.Cmd {
	return exec.Command(n.ip, append([]string{"netns", "exec", n.name, bin}, args...)...)
}

func netnsUnavailable(t *testing.T, why string) {
	t.Helper()
	if os.Getenv(requireNetnsEnv) == "1" {
		t.Fatalf("cannot create a network namespace: %s (%s=1: this is a failure)", why, requireNetnsEnv)
	}
	t.Skipf("\n*** SKIPPING: cannot create a network namespace: %s\n*** run as root where namespaces are allowed, or set %s=1 to make this a failure", why, requireNetnsEnv)
}

// freeSubnet picks the third octet of a 10.213.x.0/30 that no interface
// of the test's namespace uses, starting from one derived from pid.
func freeSubnet(t *testing.T, pid int) int {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	used := map[int]bool{}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip4 := ipn.IP.To4(); ip4 != nil && ip4[0] == 10 && ip4[1] == 213 {
				used[int(ip4[2])] = true
			}
		}
	}
	for i := range 250 {
		if o := 1 + (pid+i)%250; !used[o] {
			return o
		}
	}
	t.Fatal("no free 10.213.x.0/30 subnet")
	return 0
}

// removeStaleNetns deletes namespaces (and their veth pairs) left by an
// earlier test process that ended without its cleanups (a test binary's
// timeout panic runs none).
func removeStaleNetns(ipBin string) {
	entries, err := os.ReadDir("/var/run/netns")
	if err != nil {
		return
	}
	for _, e := range entries {
		// weir-part-<pid>, or weir-part-<pid>-<k> for a bridge's.
		p, k, bridged := strings.Cut(strings.TrimPrefix(e.Name(), netnsPrefix), "-")
		pid, err := strconv.Atoi(p)
		if !strings.HasPrefix(e.Name(), netnsPrefix) || err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // its process still runs
		}
		if bridged {
			exec.Command(ipBin, "link", "del", "wph"+p+"x"+k).Run()
			exec.Command(ipBin, "link", "del", "wpb"+p).Run()
		} else {
			exec.Command(ipBin, "link", "del", "wph"+p).Run()
		}
		exec.Command(ipBin, "netns", "del", e.Name()).Run()
	}
}

// dialInNetns dials addr (an IP literal, so no resolver goroutine dials
// on another thread) from inside the named network namespace: the
// calling goroutine's thread enters the namespace, creates the socket
// there — a socket belongs to the namespace it was created in — and goes
// back to its own.
func dialInNetns(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	target, err := os.Open(filepath.Join("/var/run/netns", ns))
	if err != nil {
		return nil, err
	}
	defer target.Close()
	runtime.LockOSThread()
	own, err := os.Open(fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer own.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("enter network namespace %s: %w", ns, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if serr := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); serr != nil {
		// The thread stays locked, so no other goroutine runs in the
		// wrong namespace; Go ends it with this goroutine.
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("leave network namespace %s: %w", ns, serr)
	}
	runtime.UnlockOSThread()
	return c, err
}

// netnsHTTPClient is httpClient for a daemon inside the network namespace
// ns: it dials from there.
func netnsHTTPClient(ns string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialInNetns(ctx, ns, network, addr)
		}}}
}
