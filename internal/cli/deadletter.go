package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/vfs"
)

const deadletterUsage = `Usage:
  weir deadletter list   [--wab-dir DIR]
  weir deadletter show   [--wab-dir DIR] [--max-payload N] [FILTERS] FILE... | --all
  weir deadletter replay [--wab-dir DIR] [--socket-path PATH] [--remove] [--dry-run] [FILTERS] FILE... | --all
  weir deadletter purge  [--wab-dir DIR] FILE... | --all --yes

FILTERS select records: --code CODE (repeatable: any of them; codes are
unknown, decode, contract, dq, retry-exhausted, sink-refused, oversize),
--since T and --until T on the time a record was first rejected (T is
RFC 3339, e.g. 2026-03-04T05:06:07Z, or a duration back from now, e.g. 24h;
--since is inclusive, --until exclusive).
replay --dry-run prints what would be replayed and sends nothing;
replay --remove removes a file once every one of its records is acked (a
file with records outside the filters is kept).
`

// dlOptions are the flags of `weir deadletter`.
type dlOptions struct {
	dir, socket    string
	maxPayload     int
	all, yes       bool
	remove, dryRun bool
	filter         laneFilter
	names          []string
}

func parseDeadletterFlags(sub string, args []string, stderr io.Writer) (*dlOptions, error) {
	o := &dlOptions{}
	fs := flag.NewFlagSet("weir deadletter "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.dir, "wab-dir", defaultWABDir(), "WAB directory (env WEIR_WAB_DIR)")
	fs.IntVar(&o.maxPayload, "max-payload", 200, "show: bytes of each payload to print")
	fs.StringVar(&o.socket, "socket-path", defaultSocket(), "replay: daemon socket (env WEIR_SOCKET_PATH)")
	fs.BoolVar(&o.all, "all", false, "show/replay/purge: every dead-letter file")
	fs.BoolVar(&o.yes, "yes", false, "purge --all: really remove every file")
	fs.BoolVar(&o.remove, "remove", false, "replay: remove each file once all its records are acked")
	fs.BoolVar(&o.dryRun, "dry-run", false, "replay: print what would be replayed, send nothing")
	o.filter.register(fs, "show/replay: ")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := o.filter.resolve(time.Now()); err != nil {
		fmt.Fprintf(stderr, "weir deadletter %s: %v\n", sub, err)
		return nil, err
	}
	o.names = fs.Args()
	return o, nil
}

// pick returns the files named on the command line, or every file with
// --all.
func (o *dlOptions) pick(files []drain.DeadLetterFile) ([]drain.DeadLetterFile, error) {
	if o.all {
		if len(o.names) > 0 {
			return nil, errors.New("give file names or --all, not both")
		}
		return files, nil
	}
	if len(o.names) == 0 {
		return nil, errors.New("name at least one file (see list), or --all")
	}
	var out []drain.DeadLetterFile
	for _, n := range o.names {
		found := false
		for _, f := range files {
			if f.Name == filepath.Base(n) {
				out, found = append(out, f), true
			}
		}
		if !found {
			return nil, fmt.Errorf("no dead-letter file %q in %s", n, drain.DeadLetterDir(o.dir))
		}
	}
	return out, nil
}

// deadletter runs `weir deadletter list|show|replay|purge`.
func deadletter(args []string, stdout, stderr io.Writer) int {
	sub := subcommand("weir deadletter", deadletterUsage, args, stderr, "list", "show", "replay", "purge")
	if sub == "" {
		return 2
	}
	o, err := parseDeadletterFlags(sub, args[1:], stderr)
	if err != nil {
		return 2
	}
	files, err := drain.ListDeadLetters(vfs.OS, o.dir)
	if err != nil {
		fmt.Fprintf(stderr, "weir deadletter: %v\n", err)
		return 1
	}
	if sub == "list" {
		return dlList(files, stdout, stderr)
	}
	if sub == "purge" && o.all && !o.yes {
		fmt.Fprintln(stderr, "weir deadletter purge --all removes every dead-letter file: add --yes to confirm")
		return 2
	}
	sel, err := o.pick(files)
	if err != nil {
		fmt.Fprintf(stderr, "weir deadletter %s: %v\n", sub, err)
		return 2
	}
	switch sub {
	case "show":
		return dlShow(sel, o, stdout, stderr)
	case "replay":
		if o.dryRun {
			return dlDryRun(sel, o, stdout, stderr)
		}
		return replay(context.Background(), sel, o, stdout, stderr)
	default:
		return dlPurge(sel, o.dir, stdout, stderr)
	}
}

// dlList prints one line per file: records, size, and the summary of its
// records (laneSummary: first and last first-seen times, reason codes,
// stage/component pairs, most delivery attempts).
func dlList(files []drain.DeadLetterFile, stdout, stderr io.Writer) int {
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tRECORDS\tBYTES\t"+laneSummaryHeader)
	var recs uint64
	var bytes int64
	for _, f := range files {
		h, rs, err := drain.ReadDeadLetter(vfs.OS, f.Path)
		if err != nil {
			fmt.Fprintf(stderr, "weir deadletter list: %v\n", err)
			return 1
		}
		var sum laneSummary
		for i := range rs {
			r := rs[i].Rejected(h.Created)
			sum.add(&r)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", f.Name, f.Records, f.Bytes, sum.columns())
		recs += f.Records
		bytes += f.Bytes
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d files, %d records, %d bytes\n", len(files), recs, bytes)
	return 0
}

// eachSelected reads each file and calls fn with the records the filter
// selects (with their index in the file); all says whether those are
// every record of the file.
func eachSelected(files []drain.DeadLetterFile, f *laneFilter, fn func(file drain.DeadLetterFile, recs []lane.Rejected, idx []int, all bool) error) error {
	for _, file := range files {
		h, rs, err := drain.ReadDeadLetter(vfs.OS, file.Path)
		if err != nil {
			return err
		}
		var sel []lane.Rejected
		var idx []int
		for i := range rs {
			if r := rs[i].Rejected(h.Created); f.match(&r) {
				sel = append(sel, r)
				idx = append(idx, i)
			}
		}
		if err := fn(file, sel, idx, len(sel) == len(rs)); err != nil {
			return err
		}
	}
	return nil
}

// dlShow prints every selected record with its rejection and metadata.
func dlShow(files []drain.DeadLetterFile, o *dlOptions, stdout, stderr io.Writer) int {
	err := eachSelected(files, &o.filter, func(f drain.DeadLetterFile, recs []lane.Rejected, idx []int, _ bool) error {
		fmt.Fprintf(stdout, "%s: %d of %d records\n", f.Name, len(recs), f.Records)
		for i := range recs {
			showRejected(stdout, idx[i], &recs[i], o.maxPayload)
		}
		return nil
	})
	if err != nil {
		fmt.Fprintf(stderr, "weir deadletter show: %v\n", err)
		return 1
	}
	return 0
}

// dlDryRun prints what replay would send, and how many, without sending.
func dlDryRun(files []drain.DeadLetterFile, o *dlOptions, stdout, stderr io.Writer) int {
	n, nfiles := 0, 0
	err := eachSelected(files, &o.filter, func(f drain.DeadLetterFile, recs []lane.Rejected, idx []int, all bool) error {
		if len(recs) > 0 {
			nfiles++
		}
		for i := range recs {
			dryRunLine(stdout, f.Name, idx[i], &recs[i], o.maxPayload)
		}
		n += len(recs)
		if o.remove && len(recs) > 0 {
			if all {
				fmt.Fprintf(stdout, "%s would be removed once its records are acked\n", f.Name)
			} else {
				fmt.Fprintf(stdout, "%s would be kept: it holds records outside the filters\n", f.Name)
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintf(stderr, "weir deadletter replay: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "dry run: would replay %d records from %d files; nothing sent\n", n, nfiles)
	return 0
}

func dlPurge(files []drain.DeadLetterFile, dir string, stdout, stderr io.Writer) int {
	for _, f := range files {
		if err := drain.RemoveDeadLetter(vfs.OS, dir, f.Name); err != nil {
			fmt.Fprintf(stderr, "weir deadletter purge: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "removed %s (%d records)\n", f.Name, f.Records)
	}
	return 0
}

func preview(p []byte, n int) string {
	s := p
	cut := false
	if len(s) > n {
		s, cut = s[:n], true
	}
	var out string
	if utf8.Valid(s) {
		out = strconv.Quote(string(s))
	} else {
		out = fmt.Sprintf("%x (binary)", s)
	}
	if cut {
		out += fmt.Sprintf(" … (%d bytes)", len(p))
	}
	return out
}

func defaultSocket() string {
	if s := os.Getenv("WEIR_SOCKET_PATH"); s != "" {
		return s
	}
	return filepath.Join("data", "weir.sock")
}

// replay pushes the selected records of the chosen files through the
// client into a running daemon, with a progress line on long runs.
func replay(ctx context.Context, files []drain.DeadLetterFile, o *dlOptions, stdout, stderr io.Writer) int {
	var total uint64
	for _, f := range files {
		total += f.Records
	}
	c, err := dialReplay(ctx, o.socket)
	if err != nil {
		fmt.Fprintf(stderr, "weir deadletter replay: connect to %s: %v\n", o.socket, err)
		return 1
	}
	defer c.Close(ctx)
	prog := newProgress(stderr, total)
	var examined, sent, failed uint64
	err = eachSelected(files, &o.filter, func(f drain.DeadLetterFile, recs []lane.Rejected, _ []int, all bool) error {
		fileFailed := replayRecords(ctx, c, "weir deadletter replay", f.Name, recs, stderr)
		sent += uint64(len(recs))
		failed += uint64(fileFailed)
		examined += f.Records
		prog.update(examined)
		if fileFailed == 0 && len(recs) > 0 && all && o.remove {
			return drain.RemoveDeadLetter(vfs.OS, o.dir, f.Name)
		}
		return nil
	})
	prog.finish()
	if err != nil {
		fmt.Fprintf(stderr, "weir deadletter replay: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "replayed %d records from %d files, %d refused\n", sent-failed, len(files), failed)
	if failed > 0 {
		return 1
	}
	return 0
}

// progress draws "replayed N/M (P%)" on one line, at most every 200ms,
// for runs long enough to need one.
type progress struct {
	w     io.Writer
	total uint64
	last  time.Time
	shown bool
}

func newProgress(w io.Writer, total uint64) *progress { return &progress{w: w, total: total} }

func (p *progress) update(n uint64) {
	if p.total < 1000 || time.Since(p.last) < 200*time.Millisecond && n != p.total {
		return
	}
	p.last = time.Now()
	p.shown = true
	width := 30
	fill := int(float64(width) * float64(n) / float64(p.total))
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d (%.0f%%)", strings.Repeat("#", fill), strings.Repeat(" ", width-fill), n, p.total, 100*float64(n)/float64(p.total))
}

func (p *progress) finish() {
	if p.shown {
		fmt.Fprintln(p.w)
	}
}
