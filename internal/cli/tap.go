package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/tap"
)

const tapUsage = `Usage:
  weir tap --at POINT [--limit N] [--rate R] [--filter EXPR] [--full] [--buffer N]
           [--metrics-addr HOST:PORT | --config FILE] [--token-file FILE]

Prints the records passing a point of a running daemon's pipeline, live, as
NDJSON on stdout: id, source, key, event_time, the reason code (code, rule,
error) at a quarantine point, the payload's size (bytes) and the payload —
cut at 256 bytes unless --full (truncated says so; a payload that is not
UTF-8 is payload_base64).

POINT is one of:
  gate               what enters the gate (the write-ahead buffer, or the [sink] with gate = "raw")
  source:NAME        what a source writes: socket, the HTTP stream (http), a [[source]]'s name
  secondary:NAME     what a [[secondary]] acknowledged
  quarantine:NAME    what a lane was given, with its reason: a secondary's, buffer or raw (the gates')
Without --at the daemon's points are listed.

The tap never slows the pipeline: the daemon keeps --buffer records for
this reader (default 4096) and drops, counting, what does not fit; the count
is reported on stderr, as {"dropped":N} lines arrive. --limit ends after N
records; --rate paces the stream to R records a second (more are dropped);
--filter keeps the records a CEL expression is true for, over id, source,
key, headers, event_time, code, rule, error, bytes, payload and record (the
payload as JSON), e.g. 'source == "orders" && record.amount > 100'.

The daemon is reached at its metrics endpoint: --metrics-addr, else the
metrics_bind and metrics_port of --config FILE, else WEIR_METRICS_BIND and
WEIR_METRICS_PORT, else 127.0.0.1:9185. --token-file holds a bearer token
(its first line) for an endpoint that asks for one.

Exit 0 at --limit or on SIGINT/SIGTERM, 1 when the stream cannot be read or
breaks, 2 on usage or a request the daemon refuses (an unknown point, a
filter that does not compile).

`

// tapFlags are weir tap's flags.
type tapFlags struct {
	at, addr, config, filter, tokenFile string
	limit, buffer                       int
	rate                                float64
	full                                bool
}

func tapCmd(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return runTap(ctx, args, stdout, stderr)
}

// runTap is weir tap until ctx ends.
func runTap(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o tapFlags
	fs := flag.NewFlagSet("weir tap", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, tapUsage); fs.PrintDefaults() }
	fs.StringVar(&o.at, "at", "", "the tap `point`: gate, source:NAME, secondary:NAME, quarantine:NAME")
	fs.IntVar(&o.limit, "limit", 0, "stop after `N` records (0: no limit)")
	fs.Float64Var(&o.rate, "rate", 0, "at most `R` records a second (0: as they come)")
	fs.StringVar(&o.filter, "filter", "", "a CEL `expression` a record must be true for")
	fs.BoolVar(&o.full, "full", false, "whole payloads and keys, not cut at 256 bytes")
	fs.IntVar(&o.buffer, "buffer", 0, "records the daemon holds for this reader before it drops (default 4096)")
	fs.StringVar(&o.addr, "metrics-addr", "", "the daemon's metrics endpoint host:port")
	fs.StringVar(&o.config, config.ConfigFlag, "", "take the endpoint from this configuration `file`'s metrics_bind and metrics_port")
	fs.StringVar(&o.tokenFile, "token-file", "", "`file` whose first line is a bearer token for the endpoint")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || o.limit < 0 || o.rate < 0 || o.buffer < 0 || o.buffer > tap.MaxBuffer {
		fmt.Fprint(stderr, tapUsage)
		return 2
	}
	addr, err := tapAddr(o)
	if err != nil {
		fmt.Fprintf(stderr, "weir tap: %v\n", err)
		return 2
	}
	q := url.Values{}
	q.Set("at", o.at)
	if o.limit > 0 {
		q.Set("limit", strconv.Itoa(o.limit))
	}
	if o.rate > 0 {
		q.Set("rate", strconv.FormatFloat(o.rate, 'g', -1, 64))
	}
	if o.filter != "" {
		q.Set("filter", o.filter)
	}
	if o.full {
		q.Set("full", "1")
	}
	if o.buffer > 0 {
		q.Set("buffer", strconv.Itoa(o.buffer))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/tap?"+q.Encode(), nil)
	if err != nil {
		fmt.Fprintf(stderr, "weir tap: %v\n", err)
		return 2
	}
	if o.tokenFile != "" {
		tok, err := readToken(o.tokenFile)
		if err != nil {
			fmt.Fprintf(stderr, "weir tap: --token-file: %v\n", err)
			return 2
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		ResponseHeaderTimeout: 10 * time.Second,
	}}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		fmt.Fprintf(stderr, "weir tap: cannot reach %s: %v (is the daemon running with metrics_port set?)\n", addr, err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		fmt.Fprintf(stderr, "weir tap: %s answered %d: %s\n", addr, resp.StatusCode, strings.TrimSpace(string(b)))
		if resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusNotFound {
			return 2
		}
		return 1
	}
	return copyTap(ctx, resp.Body, o.at, stdout, stderr)
}

// copyTap copies the stream's record lines to stdout and reports its
// control lines on stderr.
func copyTap(ctx context.Context, body io.Reader, at string, stdout, stderr io.Writer) int {
	br := bufio.NewReaderSize(body, 64<<10)
	w := bufio.NewWriter(stdout)
	var shown, dropped int64
	ended := ""
	var err error
	for {
		var line []byte
		line, err = br.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			break
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		if bytes.HasPrefix(line, []byte(`{"dropped":`)) {
			var d tap.Dropped
			if json.Unmarshal(line, &d) == nil {
				if d.Dropped > dropped {
					w.Flush()
					fmt.Fprintf(stderr, "weir tap: %d records at %s not shown so far (this reader's buffer was full; the pipeline never waits for it)\n", d.Dropped, at)
				}
				dropped, ended = d.Dropped, d.End
				continue
			}
		}
		w.Write(line)
		w.WriteByte('\n')
		shown++
		if br.Buffered() == 0 { // the daemon's batch is through
			w.Flush()
		}
	}
	w.Flush()
	fmt.Fprintf(stderr, "weir tap: %d records shown, %d dropped at %s\n", shown, dropped, at)
	switch {
	case ended != "", ctx.Err() != nil:
		return 0
	case err != nil && err != io.EOF:
		fmt.Fprintf(stderr, "weir tap: the stream broke: %v\n", err)
		return 1
	}
	fmt.Fprintln(stderr, "weir tap: the daemon ended the stream (shutting down?)")
	return 1
}

// tapAddr is the daemon's metrics endpoint (see tapUsage).
func tapAddr(o tapFlags) (string, error) {
	if o.addr != "" {
		return o.addr, nil
	}
	if o.config != "" {
		cfg, err := config.Load([]string{"--" + config.ConfigFlag, o.config}, nil, nil)
		if err != nil {
			return "", err
		}
		if cfg.MetricsPort == 0 {
			return "", fmt.Errorf("%s sets metrics_port = 0: the daemon serves no metrics endpoint to tap", o.config)
		}
		return net.JoinHostPort(dialable(cfg.MetricsBind), strconv.Itoa(cfg.MetricsPort)), nil
	}
	return net.JoinHostPort(dialable(envOr("WEIR_METRICS_BIND", "127.0.0.1")), envOr("WEIR_METRICS_PORT", "9185")), nil
}

// dialable is a bind address as a client dials it: a wildcard is the
// loopback.
func dialable(host string) string {
	switch host {
	case "", "0.0.0.0":
		return "127.0.0.1"
	case "::":
		return "::1"
	}
	return host
}

// readToken is the first line of path, trimmed.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok, _, _ := strings.Cut(string(b), "\n")
	if tok = strings.TrimSpace(tok); tok == "" {
		return "", fmt.Errorf("%s: the first line is empty", path)
	}
	return tok, nil
}
