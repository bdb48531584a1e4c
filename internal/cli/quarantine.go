package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/internal/quarantine/pgquarantine"
	"github.com/weir-io/weir/internal/vfs"
)

const quarantineUsage = `Usage:
  weir quarantine list   [SOURCE] [--sink NAME] [FILTERS]
  weir quarantine show   [SOURCE] [--sink NAME] [--max-payload N] [FILTERS]
  weir quarantine replay [SOURCE] [--sink NAME] [--socket-path PATH] [--dry-run] [FILTERS]

SOURCE is where the quarantine lanes are: --dir DIR (one lane's directory,
or a parent of lanes such as <data_dir>/quarantine, one directory per
secondary and raw for the raw gate's), or --postgres DSN [--table T] (a
secondary's quarantine_postgres_url and quarantine_table); with neither,
<data_dir>/quarantine, where data_dir is the configuration's (--config,
WEIR_CONFIG, WEIR_DATA_DIR). --sink keeps one lane (a secondary's name, or
the gate's).

FILTERS select records: --code CODE (repeatable: any of them; codes are
unknown, decode, contract, dq, retry-exhausted, sink-refused, oversize),
--since T and --until T on the time a record was first rejected (T is
RFC 3339, e.g. 2026-03-04T05:06:07Z, or a duration back from now, e.g. 24h;
--since is inclusive, --until exclusive).

replay re-submits the selected records to a running daemon through its
Unix socket, Durable, under their original record ids, so replaying twice
adds nothing to an idempotent sink; --dry-run prints what it would send
and sends nothing. Quarantines are not changed by replay: a record the
sink refuses again is quarantined again (the Postgres table keeps one row
per sink, id, code and rule).
`

// qOptions are the flags of `weir quarantine`.
type qOptions struct {
	config, dir, dsn, table, sink, socket string
	maxPayload                            int
	dryRun                                bool
	timeout                               time.Duration
	filter                                laneFilter
}

func parseQuarantineFlags(sub string, args []string, stderr io.Writer) (*qOptions, error) {
	o := &qOptions{}
	fs := flag.NewFlagSet("weir quarantine "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, quarantineUsage); fs.PrintDefaults() }
	fs.StringVar(&o.config, config.ConfigFlag, "", "configuration file whose data_dir holds quarantine/")
	fs.StringVar(&o.dir, "dir", "", "quarantine directory (default <data_dir>/"+config.DefaultQuarantineDirName+")")
	fs.StringVar(&o.dsn, "postgres", "", "read the quarantine table at this DSN")
	fs.StringVar(&o.table, "table", pgquarantine.DefaultTable, "with --postgres: the quarantine table")
	fs.StringVar(&o.sink, "sink", "", "only the lane of this secondary (or gate)")
	fs.IntVar(&o.maxPayload, "max-payload", 200, "show, --dry-run: bytes of each payload to print")
	fs.StringVar(&o.socket, "socket-path", defaultSocket(), "replay: daemon socket (env WEIR_SOCKET_PATH)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "replay: print what would be replayed, send nothing")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "with --postgres: bound on connecting and reading")
	o.filter.register(fs, "")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "weir quarantine %s: unexpected argument %q\n\n%s", sub, fs.Arg(0), quarantineUsage)
		return nil, errors.New("usage")
	case o.dir != "" && o.dsn != "":
		fmt.Fprintf(stderr, "weir quarantine %s: give --dir or --postgres, not both\n", sub)
		return nil, errors.New("usage")
	}
	if err := o.filter.resolve(time.Now()); err != nil {
		fmt.Fprintf(stderr, "weir quarantine %s: %v\n", sub, err)
		return nil, err
	}
	return o, nil
}

// quarantineCmd runs `weir quarantine list|show|replay`.
func quarantineCmd(args []string, stdout, stderr io.Writer) int {
	sub := subcommand("weir quarantine", quarantineUsage, args, stderr, "list", "show", "replay")
	if sub == "" {
		return 2
	}
	o, err := parseQuarantineFlags(sub, args[1:], stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	recs, code := readQuarantine(o, stderr)
	if code != 0 {
		return code
	}
	switch sub {
	case "list":
		return qList(recs, stdout)
	case "show":
		for i := range recs {
			showRejected(stdout, i, &recs[i], o.maxPayload)
		}
		fmt.Fprintf(stdout, "%d records\n", len(recs))
		return 0
	default:
		if o.dryRun {
			for i := range recs {
				dryRunLine(stdout, recs[i].Sink, i, &recs[i], o.maxPayload)
			}
			fmt.Fprintf(stdout, "dry run: would replay %d records; nothing sent\n", len(recs))
			return 0
		}
		return qReplay(context.Background(), recs, o, stdout, stderr)
	}
}

// readQuarantine reads the records of the chosen lanes that the filters
// select, oldest first within each lane; a non-zero code on failure.
func readQuarantine(o *qOptions, stderr io.Writer) ([]lane.Rejected, int) {
	var all []lane.Rejected
	var err error
	if o.dsn != "" {
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		defer cancel()
		all, err = pgquarantine.Read(ctx, pgquarantine.Options{DSN: o.dsn, Table: o.table, Timeout: o.timeout}, o.sink)
	} else {
		dir, cerr := dirOrDefault(o.dir, o.config, config.DefaultQuarantineDirName)
		if cerr != nil {
			fmt.Fprintf(stderr, "weir quarantine: %v\n", cerr)
			return nil, 2
		}
		all, err = quarantine.Read(vfs.OS, dir)
	}
	if err != nil {
		fmt.Fprintf(stderr, "weir quarantine: %v\n", err)
		return nil, 1
	}
	sel := all[:0]
	for i := range all {
		if (o.sink == "" || all[i].Sink == o.sink) && o.filter.match(&all[i]) {
			sel = append(sel, all[i])
		}
	}
	return sel, 0
}

// qList prints one line per lane with the summary of its selected records.
func qList(recs []lane.Rejected, stdout io.Writer) int {
	var order []string
	sums := map[string]*laneSummary{}
	for i := range recs {
		s := sums[recs[i].Sink]
		if s == nil {
			s = &laneSummary{}
			sums[recs[i].Sink] = s
			order = append(order, recs[i].Sink)
		}
		s.add(&recs[i])
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LANE\tRECORDS\t"+laneSummaryHeader)
	for _, name := range order {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", orDash(name), sums[name].records, sums[name].columns())
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d lanes, %d records\n", len(order), len(recs))
	return 0
}

// qReplay sends the selected records to the daemon under their ids and
// waits for every answer.
func qReplay(ctx context.Context, recs []lane.Rejected, o *qOptions, stdout, stderr io.Writer) int {
	c, err := dialReplay(ctx, o.socket)
	if err != nil {
		fmt.Fprintf(stderr, "weir quarantine replay: connect to %s: %v\n", o.socket, err)
		return 1
	}
	defer c.Close(ctx)
	prog := newProgress(stderr, uint64(len(recs)))
	failed := 0
	const chunk = 1024
	for lo := 0; lo < len(recs); lo += chunk {
		hi := min(lo+chunk, len(recs))
		failed += replayRecords(ctx, c, "weir quarantine replay", fmt.Sprintf("records %d..%d", lo, hi-1), recs[lo:hi], stderr)
		prog.update(uint64(hi))
	}
	prog.finish()
	fmt.Fprintf(stdout, "replayed %d records, %d refused\n", len(recs)-failed, failed)
	if failed > 0 {
		return 1
	}
	return 0
}
