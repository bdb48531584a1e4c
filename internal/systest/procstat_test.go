package systest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat times
// (100 on every Linux architecture Go supports).
const clockTicks = 100

// procCPU is the CPU seconds (user + system) that process pid has used, 0
// when it cannot be read.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 { // utime and stime are fields 14 and 15 of the line
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / clockTicks
}

// cpuUse is CPU seconds spent by the daemon, by every postgres process on
// the machine (backends, WAL writer, checkpointer — the server is shared,
// so other clients' work counts too), by this test process (kfake, the
// producer, the polling), and by the whole machine (every core busy).
type cpuUse struct{ daemon, postgres, bench, machine float64 }

// cpuNow reads the CPU used so far; daemon is 0 unless daemonPID is.
func cpuNow(daemonPID int) cpuUse {
	c := cpuUse{bench: procCPU(os.Getpid()), machine: machineBusy()}
	if daemonPID != 0 {
		c.daemon = procCPU(daemonPID)
	}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(comm)) == "postgres" {
			c.postgres += procCPU(pid)
		}
	}
	return c
}

// since is the CPU used between c0 and c. A postgres process that exited
// in between takes its time with it, so that figure is a lower bound.
func (c cpuUse) since(c0 cpuUse) cpuUse {
	return cpuUse{daemon: c.daemon - c0.daemon, postgres: c.postgres - c0.postgres,
		bench: c.bench - c0.bench, machine: c.machine - c0.machine}
}

// machineBusy is the non-idle CPU seconds of all cores since boot, from
// the first line of /proc/stat.
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	busy := 0.0
	for k, v := range f[1:] {
		if k == 3 || k == 4 { // idle, iowait
			continue
		}
		x, _ := strconv.ParseFloat(v, 64)
		busy += x
	}
	return busy / clockTicks
}

// profile fetches a CPU profile of the daemon (which must run with
// debug_pprof = true) for WEIR_BENCH_PROFILE_SECONDS (default 5) seconds,
// after WEIR_BENCH_PROFILE_DELAY (a duration, default none), into
// dir/cpu-<tag>-<time>.pprof, in the background; the channel gets the
// outcome.
func (d *daemon) profile(dir, tag string) <-chan error {
	secs := 5
	if s := os.Getenv("WEIR_BENCH_PROFILE_SECONDS"); s != "" {
		secs, _ = strconv.Atoi(s)
	}
	delay, _ := time.ParseDuration(os.Getenv("WEIR_BENCH_PROFILE_DELAY"))
	url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", d.metricsPort, secs)
	path := filepath.Join(dir, fmt.Sprintf("cpu-%s-%s.pprof", tag, time.Now().UTC().Format("150405.000")))
	done := make(chan error, 1)
	go func() {
		time.Sleep(delay)
		done <- func() error {
			resp, err := (&http.Client{Timeout: time.Duration(secs)*time.Second + 30*time.Second}).Get(url)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %s", url, resp.Status)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			return os.WriteFile(path, body, 0o644)
		}()
	}()
	return done
}
