package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/dqaudit"
	"github.com/weir-io/weir/internal/vfs"
)

const dqUsage = `Usage:
  weir dq [--config weir.toml] [--dir DIR | --postgres DSN [--table T]] [--since 1h] [--json]

Summarises the dq-audit trail: per stream and contract the records passed,
warned, rejected (by reason code and rule) and dropped as duplicates — each
record once per sink, by its latest verdict, so a batch judged again after
a restart counts once (the repeats are shown apart) — a few rejected ids,
and the raw windows recovered in skip-quarantine mode (whose rejects are
not in the quarantine view). The trail is read from DIR, or
from the PostgreSQL table T; with neither, from <data_dir>/dq-audit, where
data_dir is the configuration's (--config, WEIR_CONFIG, WEIR_DATA_DIR).
--since keeps the windows that ended after it: an RFC 3339 time, or a
duration back from now (default: every window). Exit 1 when the trail
cannot be read.

`

// dqOptions are the flags of `weir dq`.
type dqOptions struct {
	config, dir, dsn, table, since string
	json                           bool
	timeout                        time.Duration
}

// dq prints the dq-audit trail's summary.
func dq(args []string, stdout, stderr io.Writer) int {
	o, err := parseDQFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	var since time.Time
	if o.since != "" {
		if since, err = parseWhen(o.since, time.Now()); err != nil {
			fmt.Fprintf(stderr, "weir dq: --since: %v\n", err)
			return 2
		}
	}
	entries, code := dqRead(o, since, stderr)
	if code != 0 {
		return code
	}
	s := dqaudit.Summarise(entries)
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(s)
	} else {
		err = s.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "weir dq: %v\n", err)
		return 1
	}
	return 0
}

func parseDQFlags(args []string, stderr io.Writer) (*dqOptions, error) {
	o := &dqOptions{}
	fs := flag.NewFlagSet("weir dq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, dqUsage); fs.PrintDefaults() }
	fs.StringVar(&o.config, config.ConfigFlag, "", "configuration file whose data_dir holds dq-audit/")
	fs.StringVar(&o.dir, "dir", "", "trail directory (default <data_dir>/"+dqaudit.DefaultDirName+")")
	fs.StringVar(&o.dsn, "postgres", "", "read the trail from PostgreSQL at this DSN")
	fs.StringVar(&o.table, "table", dqaudit.DefaultTable, "with --postgres: the trail's table")
	fs.StringVar(&o.since, "since", "", "only windows that ended after this time or duration ago")
	fs.BoolVar(&o.json, "json", false, "print the summary as JSON")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "with --postgres: bound on connecting and reading")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "weir dq: unexpected argument %q\n\n%s", fs.Arg(0), dqUsage)
		return nil, errors.New("usage")
	case o.dir != "" && o.dsn != "":
		fmt.Fprint(stderr, "weir dq: give --dir or --postgres, not both\n")
		return nil, errors.New("usage")
	}
	return o, nil
}

// dqRead reads the trail's entries whose window ended after since; a
// non-zero code on failure.
func dqRead(o *dqOptions, since time.Time, stderr io.Writer) ([]dqaudit.Entry, int) {
	if o.dsn != "" {
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		defer cancel()
		es, err := dqaudit.ReadPostgres(ctx, o.dsn, o.table, since)
		if err != nil {
			fmt.Fprintf(stderr, "weir dq: %v\n", err)
			return nil, 1
		}
		return es, 0
	}
	dir, err := dirOrDefault(o.dir, o.config, dqaudit.DefaultDirName)
	if err != nil {
		fmt.Fprintf(stderr, "weir dq: %v\n", err)
		return nil, 2
	}
	es, err := dqaudit.ReadDir(vfs.OS, dir)
	if err != nil {
		fmt.Fprintf(stderr, "weir dq: %v\n", err)
		return nil, 1
	}
	kept := es[:0]
	for _, e := range es {
		if e.To.After(since) {
			kept = append(kept, e)
		}
	}
	return kept, 0
}
