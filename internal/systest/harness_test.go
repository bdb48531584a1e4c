package systest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/internal/vfs"
)

var weirBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if bin := os.Getenv("WEIR_BIN"); bin != "" {
		// A prebuilt binary, for benchmarks of another version (before and
		// after a change, in one session); tests that inject faults need
		// one built with -tags faultinject.
		weirBin = bin
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "weir-systest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	weirBin = filepath.Join(dir, "weir")
	args := []string{"build", "-tags", "faultinject", "-o", weirBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/weir-io/weir/cmd/weir")
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building weir:", err)
		return 1
	}
	return m.Run()
}

// syncBuffer is a goroutine-safe log capture.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// daemon is one running weir process.
type daemon struct {
	t      testing.TB
	dir    string // data_dir
	socket string
	args   []string
	env    []string
	cmd    *exec.Cmd
	log    *syncBuffer
	done   chan struct{}
	err    error

	// metricsPort is the daemon's --metrics-port on 127.0.0.1.
	metricsPort int
	// httpPort is its HTTP door's port on 127.0.0.1 (--http-listen).
	httpPort int
	// bin is the binary to run; "" runs weirBin.
	bin string
	// netns, if set, is the network namespace the process runs in; its
	// metrics endpoint is then reached from inside it (hc).
	netns *testNetns
	hc    *http.Client
}

// newDaemon prepares a daemon in its own temporary data directory; start it
// with start. extra flags follow the defaults.
func newDaemon(t testing.TB, extra ...string) *daemon {
	t.Helper()
	// Unix socket paths are limited to 107 bytes: keep the dir short.
	dir, err := os.MkdirTemp("", "weir-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("data directory kept for inspection: %s", dir)
		}
	})
	d := &daemon{t: t, dir: dir, socket: filepath.Join(dir, "weir.sock"), metricsPort: freePort(t), httpPort: freePort(t)}
	d.args = append([]string{"serve", "--data-dir", dir, "--log-level", "debug",
		"--segment-max-age", "200ms", "--sink-file-max-age", "1s",
		"--metrics-port", strconv.Itoa(d.metricsPort),
		"--http-listen", fmt.Sprintf("127.0.0.1:%d", d.httpPort)}, extra...)
	return d
}

// freePort picks a TCP port on 127.0.0.1 that is free right now, for a
// daemon's metrics endpoint (every daemon gets its own, so tests never
// contend for the default port).
func freePort(t testing.TB) int {
	t.Helper()
	_, port, err := pickPort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// pickPort returns host:port with a port free on ip right now and never
// handed out before in this process (testenv.FreshPort): two daemons told
// the same address fail, or take each other's member for their own.
func pickPort(ip string) (string, int, error) { return testenv.FreshPort(ip) }

func (d *daemon) outDir() string { return filepath.Join(d.dir, "out") }
func (d *daemon) wabDir() string { return filepath.Join(d.dir, "wab") }

// start launches the process and waits until its socket accepts.
func (d *daemon) start() {
	d.t.Helper()
	if err := d.launch(); err != nil {
		d.t.Fatal(err)
	}
	if err := d.waitReady(15 * time.Second); err != nil {
		d.t.Fatalf("%v\n--- daemon log ---\n%s", err, d.log.String())
	}
}

// startNoSocket launches a process that opens no socket (a recovery-only
// node) and waits until its /ready answers 200.
func (d *daemon) startNoSocket() {
	d.t.Helper()
	if err := d.launch(); err != nil {
		d.t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-d.done:
			d.t.Fatalf("weir exited before it was ready: %v\n--- daemon log ---\n%s", d.err, d.log.String())
		default:
		}
		if code, _, err := d.httpGet("/ready"); err == nil && code == 200 {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("weir not ready after 15s\n--- daemon log ---\n%s", d.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (d *daemon) launch() error {
	d.log = &syncBuffer{}
	bin := weirBin
	if d.bin != "" {
		bin = d.bin
	}
	if d.netns != nil {
		d.cmd = d.netns.command(bin, d.args...)
		if d.hc == nil {
			d.hc = netnsHTTPClient(d.netns.name)
		}
	} else {
		d.cmd = exec.Command(bin, d.args...)
	}
	d.cmd.Env = append(childEnv(os.Environ()), d.env...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		return fmt.Errorf("start weir: %w", err)
	}
	d.done = make(chan struct{})
	go func() {
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	d.t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			d.cmd.Process.Kill()
			<-d.done
		}
	})
	return nil
}

// childEnv is environ without the variables that steer the tests
// themselves: they are WEIR_* names the daemon does not know, and it would
// warn about each.
func childEnv(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "WEIR_KILL_SEED", "WEIR_KILL_CYCLES", "WEIR_BENCH_RECORDS", "WEIR_REQUIRE_SERVICES",
			"WEIR_ACK_PROFILE", "WEIR_ACK_PROFILE_SECONDS", "WEIR_FLIGHT_BENCH_SECONDS", "WEIR_FLIGHT_BENCH_WINDOW", "WEIR_ACK_ONLY", "WEIR_ACK_DAEMON_ARGS", "WEIR_BIN",
			"WEIR_OVERLOAD_SECONDS", "WEIR_OVERLOAD_BUDGET_MIB", "WEIR_OVERLOAD_PPROF", "WEIR_LAG_MIB", "WEIR_OSCILLATION_SECONDS", "WEIR_FLOW_BENCH_RECORDS", "WEIR_BASE_BIN", "WEIR_RECOVERY_BENCH_RECORDS", "WEIR_CHAOS_SECONDS", "WEIR_CHAOS_SEED",
			requireNetnsEnv:
			continue
		}
		out = append(out, kv)
	}
	return out
}

func (d *daemon) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			return fmt.Errorf("weir exited before it was ready: %v", d.err)
		default:
		}
		// A socket left by a killed daemon refuses connections, so a
		// successful dial means this process is listening.
		if c, err := net.Dial("unix", d.socket); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("weir not ready after %v", timeout)
}

// kill sends SIGKILL and waits for the process to be gone.
func (d *daemon) kill() {
	d.t.Helper()
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

// stop sends SIGTERM and returns the exit error (nil for status 0).
func (d *daemon) stop(timeout time.Duration) error {
	d.t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return d.err
	case <-time.After(timeout):
		d.cmd.Process.Kill()
		<-d.done
		return fmt.Errorf("weir did not exit within %v after SIGTERM", timeout)
	}
}

// exited reports whether the process has ended.
func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// sinkPayloads reads every record in the file sink (sealed and open files)
// and counts each payload.
func sinkPayloads(t testing.TB, dir string) map[string]int {
	t.Helper()
	out, err := readSinkPayloads(dir)
	if err != nil {
		t.Fatalf("read file sink: %v", err)
	}
	return out
}

// readSinkPayloads is sinkPayloads for any goroutine: it returns the error
// instead of failing the test.
func readSinkPayloads(dir string) (map[string]int, error) {
	lines, err := readSinkLines(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(lines))
	for _, l := range lines {
		out[string(l.Payload)]++
	}
	return out, nil
}

// readSinkLines reads every line in the file sink's dir (sealed and open
// files), retrying while a running daemon renames a file under the read.
func readSinkLines(dir string) ([]filesink.Line, error) {
	var lines []filesink.Line
	var err error
	for range 20 {
		if lines, err = filesink.ReadDirFS(vfs.OS, dir, true); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return lines, err
}

// waitDelivered waits until every payload in want is in the sink.
func waitDelivered(t testing.TB, d *daemon, want map[string]bool, timeout time.Duration) map[string]int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := sinkPayloads(t, d.outDir())
		missing := 0
		var example string
		for p := range want {
			if got[p] == 0 {
				missing++
				example = p
			}
		}
		if missing == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acked records not in the sink after %v (e.g. %q)\n--- daemon log (tail) ---\n%s",
				missing, len(want), timeout, example, tail(d.log.String(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
