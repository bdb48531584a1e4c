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
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		fmt.Fprintf(stderr, "weir status: parse metrics: %v\n", err)
		return 1
	}
	m := metricSet(fams)
	liveCode, liveBody, _ := get("/live")
	readyCode, readyBody, _ := get("/ready")

	ok := liveCode == http.StatusOK && readyCode == http.StatusOK
	fmt.Fprintf(stdout, "weir at %s\n", *addr)
	fmt.Fprintf(stdout, "  health:       %s, %s\n", verdict("ready", readyCode, readyBody), verdict("live", liveCode, liveBody))
	fmt.Fprintf(stdout, "  connections:  %s open, %s accepted, %s refused\n",
		num(m.sum("weir_connections_open", nil)), num(m.sum("weir_connections_total", nil)), num(m.sum("weir_connections_rejected_total", nil)))
	fmt.Fprintf(stdout, "  records:      %s received, %s acked (durable %s, buffered %s), %s nacked%s\n",
		num(m.sum("weir_records_received_total", nil)), num(m.sum("weir_records_acked_total", nil)),
		num(m.sum("weir_records_acked_total", map[string]string{"durability": "durable"})),
		num(m.sum("weir_records_acked_total", map[string]string{"durability": "buffered"})),
		num(m.sum("weir_records_nacked_total", nil)), m.breakdown("weir_records_nacked_total", "code"))
	printHTTP(stdout, m)
	failed := m.labelsWhere("weir_shard_failed", "shard", func(v float64) bool { return v > 0 })
	shards := len(m.series("weir_shard_failed"))
	fs2 := "none failed"
	if len(failed) > 0 {
		ok = false
		fs2 = "FAILED: " + strings.Join(failed, ", ") + " (restart to recover; see the log)"
	}
	fmt.Fprintf(stdout, "  shards:       %d, %s\n", shards, fs2)
	fmt.Fprintf(stdout, "  backlog:      %s sealed segments, %s in the write-ahead buffer\n",
		num(m.sum("weir_wab_segments", nil)), bytesH(m.sum("weir_wab_bytes", nil)))
	if n := m.sum("weir_segments_damaged", nil); n > 0 {
		// Records from the damage on wait for an operator: say what to do.
		ok = false
		fmt.Fprintf(stdout, "  DAMAGED:      %s sealed segments set aside by the drain, kept on disk; records from the damage on are not delivered.\n"+
			"                Stop the daemon, look with `weir verify`, then `weir repair --salvage` (docs/operations/alerts.md#weirsegmentdamaged)\n", num(n))
	}
	state := strings.Join(m.labelsWhere("weir_drain_state", "state", func(v float64) bool { return v == 1 }), ",")
	fmt.Fprintf(stdout, "  drain:        %s; %s records delivered, %s retries\n", orDash(state),
		num(m.sum("weir_records_delivered_total", nil)), num(m.sum("weir_drain_retries_total", nil)))
	if !printSinks(stdout, m, fams) || state == "blocked_dead_letter_full" {
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
func printSinks(stdout io.Writer, m metrics, fams map[string]*dto.MetricFamily) bool {
	ok := true
	for _, s := range m.series("weir_sink_health") {
		if s.value == 1 {
			fmt.Fprintf(stdout, "  sink %-8s %s\n", s.labels["sink"]+":", s.labels["state"])
			if s.labels["state"] != "healthy" {
				ok = false
			}
		}
	}
	recs := m.sum("weir_sink_commit_records_total", nil)
	var commits float64
	for _, f := range fams {
		if f.GetName() == "weir_sink_commit_duration_seconds" {
			for _, mm := range f.GetMetric() {
				commits += float64(mm.GetHistogram().GetSampleCount())
			}
		}
	}
	if commits > 0 {
		fmt.Fprintf(stdout, "  commits:      %s, %.1f records per commit\n", num(commits), recs/commits)
	}
	dl := m.sum("weir_dead_letter_bytes", nil)
	usage := ""
	if cap := m.sum("weir_dead_letter_max_bytes", nil); cap > 0 {
		usage = fmt.Sprintf(" of %s (%.1f%%)", bytesH(cap), 100*dl/cap)
	}
	fmt.Fprintf(stdout, "  dead letter:  %s files, %s%s; blocked %s times\n",
		num(m.sum("weir_dead_letter_files", nil)), bytesH(dl), usage, num(m.sum("weir_dead_letter_full_total", nil)))
	return ok
}

// printHTTP prints the HTTP door's listener and its counts, when it
// listens.
func printHTTP(stdout io.Writer, m metrics) {
	for _, s := range m.series("weir_http_listener") {
		if s.value != 1 {
			continue
		}
		fmt.Fprintf(stdout, "  http:         %s://%s (stream %s); %s requests, %s records accepted, %s refused%s\n",
			s.labels["scheme"], s.labels["addr"], s.labels["stream"],
			num(m.sum("weir_http_requests_total", nil)), num(m.sum("weir_http_received_records_total", nil)),
			num(m.sum("weir_http_refused_total", nil)), m.breakdown("weir_http_refused_total", "reason"))
	}
}

// printSecondaries prints one line per [[secondary]]: whether it is
// durable (durable = false is shown loudly: what it acknowledged may not
// survive a power loss of its host, and recovery will not resend it), its
// coverage, its lag and its health at the last poll.
func printSecondaries(stdout io.Writer, m metrics) {
	secs := slices.Clone(m.series("weir_secondary_durable"))
	sort.Slice(secs, func(i, j int) bool { return secs[i].labels["sink"] < secs[j].labels["sink"] })
	for _, s := range secs {
		name := s.labels["sink"]
		durable := "durable"
		if s.value != 1 {
			durable = "NOT durable (durable = false: acknowledged records may be lost with its host, and are not resent)"
		}
		by := map[string]string{"sink": name}
		health := ""
		for _, h := range m.series("weir_secondary_health") {
			if h.labels["sink"] == name && h.value == 1 {
				health = "; " + h.labels["state"]
			}
		}
		fmt.Fprintf(stdout, "  secondary %s: %s; coverage %s, lag %s positions%s\n", name, durable,
			num(m.sum("weir_secondary_coverage_end", by)), num(m.sum("weir_secondary_lag_positions", by)), health)
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

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func bytesH(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", v)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

type sample struct {
	labels map[string]string
	value  float64
}

type metrics map[string][]sample

// printContracts prints one line per stream with a [[contract]]: its
// records by outcome, the reject ratio over its window, the breaker, and
// its dedup (dropped, and whether the store answers).
func printContracts(stdout io.Writer, m metrics) {
	var streams []string
	for _, s := range m.series("weir_contract_reject_ratio") {
		streams = append(streams, s.labels["source"])
	}
	sort.Strings(streams)
	for _, name := range streams {
		by := map[string]string{"source": name}
		outcome := func(o string) string {
			return num(m.sum("weir_contract_records_total", map[string]string{"source": name, "outcome": o}))
		}
		ratio := "-"
		if r := m.sum("weir_contract_reject_ratio", by); r >= 0 {
			ratio = fmt.Sprintf("%.1f%%", 100*r)
		}
		line := fmt.Sprintf("  contract %s: pass %s, warn %s, reject %s, duplicate %s; rejects over window %s",
			name, outcome("pass"), outcome("warn"), outcome("reject"), outcome("duplicate"), ratio)
		if m.sum("weir_contract_breaker_open", by) == 1 {
			line += "; BREAKER OPEN: source paused"
		}
		for _, s := range m.series("weir_dedup_degraded") { // present only for a stream with dedup
			if s.labels["source"] == name {
				line += fmt.Sprintf("; dedup dropped %s", num(m.sum("weir_dedup_dropped_total", by)))
				if s.value == 1 {
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
func printCoordination(stdout io.Writer, m metrics) {
	if len(m.series("weir_coordination_members")) == 0 {
		return
	}
	role := strings.Join(m.labelsWhere("weir_coordination_role", "role", func(v float64) bool { return v == 1 }), ",")
	var members []string
	for _, s := range m.series("weir_coordination_member") {
		if s.value != 1 {
			continue
		}
		name := s.labels["member"]
		if st := s.labels["state"]; st != "voter" {
			name += " (" + st + ")"
		}
		members = append(members, name)
	}
	sort.Strings(members)
	fmt.Fprintf(stdout, "  coordination: role %s; %s voting members: %s; recovery leases held %s, windows unclaimed %s\n",
		orDash(role), num(m.sum("weir_coordination_members", nil)), orDash(strings.Join(members, ", ")),
		num(m.sum("weir_recovery_leases_held", nil)), num(m.sum("weir_recovery_windows_unclaimed", nil)))
}

func metricSet(fams map[string]*dto.MetricFamily) metrics {
	out := metrics{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			s := sample{labels: map[string]string{}}
			for _, lp := range m.GetLabel() {
				s.labels[lp.GetName()] = lp.GetValue()
			}
			switch {
			case m.Counter != nil:
				s.value = m.GetCounter().GetValue()
			case m.Gauge != nil:
				s.value = m.GetGauge().GetValue()
			case m.Untyped != nil:
				s.value = m.GetUntyped().GetValue()
			default:
				continue
			}
			out[name] = append(out[name], s)
		}
	}
	return out
}

func (m metrics) series(name string) []sample { return m[name] }

// sum adds the series of name whose labels include match.
func (m metrics) sum(name string, match map[string]string) float64 {
	var t float64
	for _, s := range m[name] {
		ok := true
		for k, v := range match {
			if s.labels[k] != v {
				ok = false
			}
		}
		if ok {
			t += s.value
		}
	}
	return t
}

func (m metrics) labelsWhere(name, label string, pred func(float64) bool) []string {
	var out []string
	for _, s := range m[name] {
		if pred(s.value) {
			out = append(out, s.labels[label])
		}
	}
	sort.Strings(out)
	return out
}

// breakdown renders " (Code n, …)" of the non-zero series by label.
func (m metrics) breakdown(name, label string) string {
	by := map[string]float64{}
	for _, s := range m[name] {
		if s.value > 0 {
			by[s.labels[label]] += s.value
		}
	}
	if len(by) == 0 {
		return ""
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %s", k, num(by[k]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
