package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/weir-io/weir/internal/readout"
)

// status reads a running daemon's /metrics, /live and /ready and prints a
// human summary. Exit 0 when ready and live, 1 otherwise, 2 on usage.
func status(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("weir status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	defAddr := net.JoinHostPort(envOr("WEIR_METRICS_BIND", "127.0.0.1"), envOr("WEIR_METRICS_PORT", "9185"))
	addr := fs.String("metrics-addr", defAddr, "daemon's metrics endpoint host:port (env WEIR_METRICS_BIND, WEIR_METRICS_PORT)")
	timeout := fs.Duration("timeout", 5*time.Second, "HTTP timeout")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	hc := &http.Client{Timeout: *timeout}
	get := func(path string) (int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+*addr+path, nil)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		return resp.StatusCode, string(b), err
	}
	code, body, err := get("/metrics")
	if err != nil {
		fmt.Fprintf(stderr, "weir status: cannot reach %s: %v (is the daemon running with metrics_port set?)\n", *addr, err)
		return 1
	}
	if code != http.StatusOK {
		fmt.Fprintf(stderr, "weir status: %s/metrics answered %d\n", *addr, code)
		return 1
	}
	m, err := readout.Parse(strings.NewReader(body))
	if err != nil {
		fmt.Fprintf(stderr, "weir status: %v\n", err)
		return 1
	}
	liveCode, liveBody, _ := get("/live")
	readyCode, readyBody, _ := get("/ready")

	ok := liveCode == http.StatusOK && readyCode == http.StatusOK
	fmt.Fprintf(stdout, "weir at %s\n", *addr)
	fmt.Fprintf(stdout, "  health:       %s, %s\n", verdict("ready", readyCode, readyBody), verdict("live", liveCode, liveBody))
	fmt.Fprintf(stdout, "  connections:  %s open, %s accepted, %s refused\n",
		readout.Num(m.Sum("weir_connections_open", nil)), readout.Num(m.Sum("weir_connections_total", nil)), readout.Num(m.Sum("weir_connections_rejected_total", nil)))
	fmt.Fprintf(stdout, "  records:      %s received, %s acked (durable %s, buffered %s), %s nacked%s\n",
		readout.Num(m.Sum("weir_records_received_total", nil)), readout.Num(m.Sum("weir_records_acked_total", nil)),
		readout.Num(m.Sum("weir_records_acked_total", map[string]string{"durability": "durable"})),
		readout.Num(m.Sum("weir_records_acked_total", map[string]string{"durability": "buffered"})),
		readout.Num(m.Sum("weir_records_nacked_total", nil)), m.Breakdown("weir_records_nacked_total", "code"))
	printHTTP(stdout, m)
	failed := m.LabelsWhere("weir_shard_failed", "shard", func(v float64) bool { return v > 0 })
	shards := len(m.Series("weir_shard_failed"))
	fs2 := "none failed"
	if len(failed) > 0 {
		ok = false
		fs2 = "FAILED: " + strings.Join(failed, ", ") + " (restart to recover; see the log)"
	}
	fmt.Fprintf(stdout, "  shards:       %d, %s\n", shards, fs2)
	fmt.Fprintf(stdout, "  backlog:      %s sealed segments, %s in the write-ahead buffer\n",
		readout.Num(m.Sum("weir_wab_segments", nil)), readout.Bytes(m.Sum("weir_wab_bytes", nil)))
	if n := m.Sum("weir_segments_damaged", nil); n > 0 {
		// Records from the damage on wait for an operator: say what to do.
		ok = false
		fmt.Fprintf(stdout, "  DAMAGED:      %s sealed segments set aside by the drain, kept on disk; records from the damage on are not delivered.\n"+
			"                Stop the daemon, look with `weir verify`, then `weir repair --salvage` (docs/operations/alerts.md#weirsegmentdamaged)\n", readout.Num(n))
	}
	state := strings.Join(m.LabelsWhere("weir_drain_state", "state", func(v float64) bool { return v == 1 }), ",")
	fmt.Fprintf(stdout, "  drain:        %s; %s records delivered, %s retries\n", orDash(state),
		readout.Num(m.Sum("weir_records_delivered_total", nil)), readout.Num(m.Sum("weir_drain_retries_total", nil)))
	if !printSinks(stdout, m) || state == "blocked_dead_letter_full" {
		ok = false
	}
	printSecondaries(stdout, m)
	printContracts(stdout, m)
	printCoordination(stdout, m)
	if !ok {
		return 1
	}
	return 0
}

// printSinks prints the [sink]'s health, its commits and the dead-letter
// lane; it reports false when the sink is not healthy.
func printSinks(stdout io.Writer, m readout.Set) bool {
	ok := true
	for _, s := range m.Series("weir_sink_health") {
		if s.Value == 1 {
			fmt.Fprintf(stdout, "  sink %-8s %s\n", s.Labels["sink"]+":", s.Labels["state"])
			if s.Labels["state"] != "healthy" {
				ok = false
			}
		}
	}
	recs := m.Sum("weir_sink_commit_records_total", nil)
	h, _ := m.Histogram("weir_sink_commit_duration_seconds", nil)
	commits := h.Count
	if commits > 0 {
		fmt.Fprintf(stdout, "  commits:      %s, %.1f records per commit%s\n", readout.Num(commits), recs/commits, freshness(m, nil))
	}
	dl := m.Sum("weir_dead_letter_bytes", nil)
	usage := ""
	if cap := m.Sum("weir_dead_letter_max_bytes", nil); cap > 0 {
		usage = fmt.Sprintf(" of %s (%.1f%%)", readout.Bytes(cap), 100*dl/cap)
	}
	fmt.Fprintf(stdout, "  dead letter:  %s files, %s%s; blocked %s times\n",
		readout.Num(m.Sum("weir_dead_letter_files", nil)), readout.Bytes(dl), usage, readout.Num(m.Sum("weir_dead_letter_full_total", nil)))
	return ok
}

// freshness says how stale records were when the sinks matching by held
// them (weir_freshness_seconds since the start; nil: the drain's sink,
// which is the one series without a secondary's name among them).
func freshness(m readout.Set, by map[string]string) string {
	if by == nil {
		for _, s := range m.Series("weir_sink_health") {
			by = map[string]string{"sink": s.Labels["sink"]}
			break
		}
	}
	h, ok := m.Histogram("weir_freshness_seconds", by)
	if !ok || h.Count == 0 {
		return ""
	}
	return fmt.Sprintf("; fresh p50 %s, p99 %s", readout.Seconds(h.Quantile(0.5)), readout.Seconds(h.Quantile(0.99)))
}

// printHTTP prints the HTTP door's listener and its counts, when it
// listens.
func printHTTP(stdout io.Writer, m readout.Set) {
	for _, s := range m.Series("weir_http_listener") {
		if s.Value != 1 {
			continue
		}
		fmt.Fprintf(stdout, "  http:         %s://%s (stream %s); %s requests, %s records accepted, %s refused%s\n",
			s.Labels["scheme"], s.Labels["addr"], s.Labels["stream"],
			readout.Num(m.Sum("weir_http_requests_total", nil)), readout.Num(m.Sum("weir_http_received_records_total", nil)),
			readout.Num(m.Sum("weir_http_refused_total", nil)), m.Breakdown("weir_http_refused_total", "reason"))
	}
}

// printSecondaries prints one line per [[secondary]]: whether it is
// durable (durable = false is shown loudly: what it acknowledged may not
// survive a power loss of its host, and recovery will not resend it), its
// coverage, its lag and its health at the last poll.
func printSecondaries(stdout io.Writer, m readout.Set) {
	secs := slices.Clone(m.Series("weir_secondary_durable"))
	sort.Slice(secs, func(i, j int) bool { return secs[i].Labels["sink"] < secs[j].Labels["sink"] })
	for _, s := range secs {
		name := s.Labels["sink"]
		durable := "durable"
		if s.Value != 1 {
			durable = "NOT durable (durable = false: acknowledged records may be lost with its host, and are not resent)"
		}
		by := map[string]string{"sink": name}
		health := ""
		for _, h := range m.Series("weir_secondary_health") {
			if h.Labels["sink"] == name && h.Value == 1 {
				health = "; " + h.Labels["state"]
			}
		}
		fmt.Fprintf(stdout, "  secondary %s: %s; coverage %s, lag %s positions%s%s\n", name, durable,
			readout.Num(m.Sum("weir_secondary_coverage_end", by)), readout.Num(m.Sum("weir_secondary_lag_positions", by)), health,
			freshness(m, by))
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func verdict(name string, code int, body string) string {
	if code == http.StatusOK {
		if _, why, ok := strings.Cut(strings.TrimSpace(body), "degraded: "); ok {
			return name + ", DEGRADED (" + why + ")"
		}
		return name
	}
	if code == 0 {
		return "NOT " + name + " (no answer)"
	}
	return fmt.Sprintf("NOT %s (%d: %s)", name, code, strings.TrimSpace(body))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printContracts prints one line per stream with a [[contract]]: its
// records by outcome, the reject ratio over its window, the breaker, and
// its dedup (dropped, and whether the store answers).
func printContracts(stdout io.Writer, m readout.Set) {
	var streams []string
	for _, s := range m.Series("weir_contract_reject_ratio") {
		streams = append(streams, s.Labels["source"])
	}
	sort.Strings(streams)
	for _, name := range streams {
		by := map[string]string{"source": name}
		outcome := func(o string) string {
			return readout.Num(m.Sum("weir_contract_records_total", map[string]string{"source": name, "outcome": o}))
		}
		ratio := "-"
		if r := m.Sum("weir_contract_reject_ratio", by); r >= 0 {
			ratio = fmt.Sprintf("%.1f%%", 100*r)
		}
		line := fmt.Sprintf("  contract %s: pass %s, warn %s, reject %s, duplicate %s; rejects over window %s",
			name, outcome("pass"), outcome("warn"), outcome("reject"), outcome("duplicate"), ratio)
		if m.Sum("weir_contract_breaker_open", by) == 1 {
			line += "; BREAKER OPEN: source paused"
		}
		for _, s := range m.Series("weir_dedup_degraded") { // present only for a stream with dedup
			if s.Labels["source"] == name {
				line += fmt.Sprintf("; dedup dropped %s", readout.Num(m.Sum("weir_dedup_dropped_total", by)))
				if s.Value == 1 {
					line += " (STORE UNREACHABLE: duplicates pass)"
				}
			}
		}
		fmt.Fprintln(stdout, line)
	}
}

// printCoordination prints the node's coordination role, the members as
// it last saw them (leader, learners, departed) and its recovery leases;
// nothing when coordination is off.
func printCoordination(stdout io.Writer, m readout.Set) {
	if len(m.Series("weir_coordination_members")) == 0 {
		return
	}
	role := strings.Join(m.LabelsWhere("weir_coordination_role", "role", func(v float64) bool { return v == 1 }), ",")
	var members []string
	for _, s := range m.Series("weir_coordination_member") {
		if s.Value != 1 {
			continue
		}
		name := s.Labels["member"]
		if st := s.Labels["state"]; st != "voter" {
			name += " (" + st + ")"
		}
		members = append(members, name)
	}
	sort.Strings(members)
	fmt.Fprintf(stdout, "  coordination: role %s; %s voting members: %s; recovery leases held %s, windows unclaimed %s\n",
		orDash(role), readout.Num(m.Sum("weir_coordination_members", nil)), orDash(strings.Join(members, ", ")),
		readout.Num(m.Sum("weir_recovery_leases_held", nil)), readout.Num(m.Sum("weir_recovery_windows_unclaimed", nil)))
}
