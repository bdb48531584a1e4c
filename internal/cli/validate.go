package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/daemon"
)

const validateUsage = `Usage:
  weir validate --config FILE [--connect [--timeout 5s]] [--env]

Checks a configuration file as weir serve would at start — every setting's
type and range, the [sink], [[secondary]], [[source]] and [[contract]]
tables, the rules across them (the raw gate, coordination sizes, recovery
nodes, own raw…), contracts compiled (schema files read, CEL rules
type-checked), TLS material and token files read and parsed — without
opening, binding or starting anything. Keys weir serve would only warn
about (unknown ones) are findings too.

Each finding is one line, FILE: KEY: WHY. With --connect, every server the
file names (Postgres, MySQL/MariaDB, Kafka, NATS, Redis, etcd, object
storage) is dialled and authenticated, each within --timeout, and reported
OK or FAIL with the driver's reason; nothing is written to any of them.
--env applies the WEIR_* environment variables over the file, as weir
serve does (unknown ones are findings); without it the file is checked
alone.

Exit 0 when there is no finding and every server answered, 1 otherwise,
2 on usage.

`

// validate checks a configuration file (see validateUsage).
func validate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("weir validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, validateUsage); fs.PrintDefaults() }
	file := fs.String(config.ConfigFlag, "", "the configuration `file` to check (required)")
	connect := fs.Bool("connect", false, "also dial and authenticate every server the file names")
	timeout := fs.Duration("timeout", 5*time.Second, "bound of each server's dial and authentication with --connect")
	withEnv := fs.Bool("env", false, "apply the WEIR_* environment variables over the file, as weir serve does")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *file == "" || fs.NArg() > 0 || *timeout <= 0 {
		fmt.Fprint(stderr, validateUsage)
		return 2
	}
	var environ []string
	if *withEnv {
		environ = os.Environ()
	}
	cfg, err := config.Validate(*file, environ)
	findings := 0
	coordFound := false
	for _, p := range config.Problems(err) {
		fmt.Fprintln(stdout, finding(*file, p))
		findings++
		coordFound = coordFound || strings.HasPrefix(p.Key, "coordination.")
	}
	if cfg != nil {
		for _, e := range daemon.Check(cfg) {
			for _, p := range config.Problems(e) {
				if p.Key == "coordination" && coordFound {
					continue // the member's own check of what the configuration already refused
				}
				fmt.Fprintln(stdout, finding(*file, p))
				findings++
			}
		}
	}
	failed := 0
	if *connect && cfg != nil {
		servers := daemon.Probe(context.Background(), cfg, *timeout)
		for _, s := range servers {
			if s.Err != nil {
				failed++
				fmt.Fprintf(stdout, "FAIL %s: %s\n", s.What, oneLine(s.Err.Error()))
				continue
			}
			fmt.Fprintf(stdout, "OK   %s (%s)\n", s.What, s.Took.Round(time.Millisecond))
		}
		if len(servers) == 0 {
			fmt.Fprintln(stdout, "no server to connect to: the configuration names none")
		}
	}
	if findings > 0 || failed > 0 {
		fmt.Fprintf(stdout, "%s: %s\n", *file, verdictCounts(findings, failed))
		return 1
	}
	fmt.Fprintf(stdout, "%s: OK\n", *file)
	return 0
}

// finding is a problem as one line: FILE[:LINE]: KEY: WHY (VALUE).
func finding(file string, p *config.Problem) string {
	if p.File != "" {
		file = p.File
	}
	var b strings.Builder
	b.WriteString(file)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if path := p.Path(); path != "" {
		b.WriteString(path)
		b.WriteString(": ")
	}
	b.WriteString(oneLine(p.Why))
	if v := p.Value; v != "" && v != `""` && !strings.Contains(p.Why, strings.Trim(v, `"`)) {
		fmt.Fprintf(&b, " (got %s)", v)
	}
	return b.String()
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }

func verdictCounts(findings, failed int) string {
	var parts []string
	if findings > 0 {
		parts = append(parts, plural(findings, "finding"))
	}
	if failed > 0 {
		parts = append(parts, plural(failed, "server failed", "servers failed"))
	}
	return strings.Join(parts, ", ")
}

func plural(n int, one string, many ...string) string {
	if n == 1 {
		return "1 " + one
	}
	if len(many) > 0 {
		return fmt.Sprintf("%d %s", n, many[0])
	}
	return fmt.Sprintf("%d %ss", n, one)
}
