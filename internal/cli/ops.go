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

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/wab"
)

// defaultWABDir is where the embedded default keeps the WAB.
func defaultWABDir() string {
	if d := os.Getenv("WEIR_WAB_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("WEIR_DATA_DIR"); d != "" {
		return filepath.Join(d, "wab")
	}
	return filepath.Join("data", "wab")
}

// segmentFiles lists every segment file of a WAB directory (open and
// sealed, every shard), in shard then sequence order. It reads only
// directory listings.
func segmentFiles(dir string) ([]string, error) {
	names, err := vfs.OS.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if !strings.HasPrefix(n, "shard-") {
			continue
		}
		files, err := vfs.OS.ReadDir(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if strings.HasSuffix(f, wab.SuffixOpen) || strings.HasSuffix(f, wab.SuffixSealed) {
				out = append(out, filepath.Join(dir, n, f))
			}
		}
	}
	return out, nil
}

func fmtTime(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05.000Z")
}

// status is a segment's CRC/structure verdict for humans.
func segStatus(i wab.SegmentInfo) (string, bool) {
	switch {
	case i.OK():
		return "ok", true
	case i.TornTail():
		return fmt.Sprintf("torn tail at %d (%d bytes; cut on recovery)", i.Corruption.Offset, i.Size-i.Corruption.Offset), true
	case i.RecordsAfter > 0:
		return fmt.Sprintf("CORRUPT at %d: %s; %d valid records after it (see weir repair)", i.Corruption.Offset, i.Corruption.Reason, i.RecordsAfter), false
	default:
		return fmt.Sprintf("CORRUPT at %d: %s", i.Corruption.Offset, i.Corruption.Reason), false
	}
}

// inspect prints every segment (and dead-letter file) of a WAB directory;
// verify prints only problems and a summary. Neither modifies anything; both
// work while a daemon runs (they take no lock).
func inspect(args []string, stdout, stderr io.Writer, verifyOnly bool) int {
	name := "weir inspect"
	if verifyOnly {
		name = "weir verify"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("wab-dir", defaultWABDir(), "WAB directory (env WEIR_WAB_DIR)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 1 {
		*dir = fs.Arg(0)
	}
	files, err := segmentFiles(*dir)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	dls, err := drain.ListDeadLetters(vfs.OS, *dir)
	if err != nil {
		fmt.Fprintf(stderr, "%s: dead-letter lane: %v\n", name, err)
		return 1
	}
	for _, f := range dls {
		files = append(files, f.Path)
	}

	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	if !verifyOnly {
		fmt.Fprintln(tw, "FILE\tSHARD\tSEQ\tSTATE\tRECORDS\tBYTES\tFIRST\tLAST\tCHECK")
	}
	var bad, torn int
	var records uint64
	var bytes int64
	for _, path := range files {
		info, err := wab.InspectSegment(vfs.OS, path)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			bad++
			continue
		}
		verdict, ok := segStatus(info)
		if !ok {
			bad++
		} else if info.TornTail() {
			torn++
		}
		records += info.Records
		bytes += info.Size
		if verifyOnly && (ok && !info.TornTail()) {
			continue
		}
		state := "open"
		if info.Sealed {
			state = "sealed"
			if n, err := wab.ReadConfirmed(vfs.OS, path); err == nil && n > 0 {
				state = fmt.Sprintf("sealed, %d delivered", n)
			}
		}
		shard, seq := "-", "-"
		if info.HeaderOK {
			shard = strconv.Itoa(int(info.Header.Shard))
			if info.Header.Shard == wab.DeadLetterShard {
				shard, state = "dead-letter", "sealed"
			}
			seq = strconv.FormatUint(info.Header.Seq, 10)
		}
		rel, _ := filepath.Rel(*dir, path)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", rel, shard, seq, state, info.Records, info.Size,
			fmtTime(info.FirstReceived), fmtTime(info.LastReceived), verdict)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d files, %d records, %d bytes: %d corrupt, %d torn tails\n", len(files), records, bytes, bad, torn)
	if bad > 0 {
		return 1
	}
	return 0
}

// deadletter runs `weir deadletter list|show|replay|purge`.
func deadletter(args []string, stdout, stderr io.Writer) int {
	const usage = `Usage:
  weir deadletter list   [--wab-dir DIR]
  weir deadletter show   [--wab-dir DIR] [--max-payload N] FILE
  weir deadletter replay [--wab-dir DIR] [--socket-path PATH] [--remove] FILE... | --all
  weir deadletter purge  [--wab-dir DIR] FILE... | --all --yes
`
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	sub := args[0]
	fs := flag.NewFlagSet("weir deadletter "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("wab-dir", defaultWABDir(), "WAB directory (env WEIR_WAB_DIR)")
	maxPayload := fs.Int("max-payload", 200, "show: bytes of each payload to print")
	socket := fs.String("socket-path", defaultSocket(), "replay: daemon socket (env WEIR_SOCKET_PATH)")
	all := fs.Bool("all", false, "replay/purge: every dead-letter file")
	yes := fs.Bool("yes", false, "purge --all: really remove every file")
	remove := fs.Bool("remove", false, "replay: remove each file once all its records are acked")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	files, err := drain.ListDeadLetters(vfs.OS, *dir)
	if err != nil {
		fmt.Fprintf(stderr, "weir deadletter: %v\n", err)
		return 1
	}
	pick := func() ([]drain.DeadLetterFile, error) {
		if *all {
			if fs.NArg() > 0 {
				return nil, errors.New("give file names or --all, not both")
			}
			return files, nil
		}
		if fs.NArg() == 0 {
			return nil, errors.New("name at least one file (see list), or --all")
		}
		var out []drain.DeadLetterFile
		for _, n := range fs.Args() {
			found := false
			for _, f := range files {
				if f.Name == filepath.Base(n) {
					out, found = append(out, f), true
				}
			}
			if !found {
				return nil, fmt.Errorf("no dead-letter file %q in %s", n, drain.DeadLetterDir(*dir))
			}
		}
		return out, nil
	}
	switch sub {
	case "list":
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "FILE\tRECORDS\tBYTES")
		var recs uint64
		var bytes int64
		for _, f := range files {
			fmt.Fprintf(tw, "%s\t%d\t%d\n", f.Name, f.Records, f.Bytes)
			recs += f.Records
			bytes += f.Bytes
		}
		tw.Flush()
		fmt.Fprintf(stdout, "%d files, %d records, %d bytes\n", len(files), recs, bytes)
		return 0
	case "show":
		sel, err := pick()
		if err != nil {
			fmt.Fprintf(stderr, "weir deadletter show: %v\n", err)
			return 2
		}
		for _, f := range sel {
			_, recs, err := drain.ReadDeadLetter(vfs.OS, f.Path)
			if err != nil {
				fmt.Fprintf(stderr, "weir deadletter show: %v\n", err)
				return 1
			}
			fmt.Fprintf(stdout, "%s: %d records\n", f.Name, len(recs))
			for i, r := range recs {
				m := r.Meta
				fmt.Fprintf(stdout, "  #%d id=%s origin=shard %d seq %d index %d received=%s\n      reason: %s\n      payload: %s\n",
					i, m.ID, m.Shard, m.Seq, m.Index, r.Received.UTC().Format(time.RFC3339Nano), m.Reason, preview(r.Payload, *maxPayload))
			}
		}
		return 0
	case "replay":
		sel, err := pick()
		if err != nil {
			fmt.Fprintf(stderr, "weir deadletter replay: %v\n", err)
			return 2
		}
		return replay(sel, *socket, *dir, *remove, stdout, stderr)
	case "purge":
		if *all && !*yes {
			fmt.Fprintln(stderr, "weir deadletter purge --all removes every dead-letter file: add --yes to confirm")
			return 2
		}
		sel, err := pick()
		if err != nil {
			fmt.Fprintf(stderr, "weir deadletter purge: %v\n", err)
			return 2
		}
		for _, f := range sel {
			if err := drain.RemoveDeadLetter(vfs.OS, *dir, f.Name); err != nil {
				fmt.Fprintf(stderr, "weir deadletter purge: %v\n", err)
				return 1
			}
			fmt.Fprintf(stdout, "removed %s (%d records)\n", f.Name, f.Records)
		}
		return 0
	default:
		fmt.Fprintf(stderr, "weir deadletter: unknown subcommand %q\n%s", sub, usage)
		return 2
	}
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

// replay pushes every record of the chosen files, Durable, through the
// client into a running daemon, with a progress line on long runs.
func replay(files []drain.DeadLetterFile, socket, dir string, remove bool, stdout, stderr io.Writer) int {
	ctx := context.Background()
	var total uint64
	for _, f := range files {
		total += f.Records
	}
	c, err := client.Dial(ctx, socket)
	if err != nil {
		fmt.Fprintf(stderr, "weir deadletter replay: connect to %s: %v\n", socket, err)
		return 1
	}
	defer c.Close(ctx)
	prog := newProgress(stderr, total)
	var done uint64
	failed := 0
	for _, f := range files {
		_, recs, err := drain.ReadDeadLetter(vfs.OS, f.Path)
		if err != nil {
			fmt.Fprintf(stderr, "weir deadletter replay: %v\n", err)
			return 1
		}
		errs := make(chan error, len(recs))
		for _, r := range recs {
			if err := c.PushAsync(ctx, [][]byte{r.Payload}, client.Durable, func(err error) { errs <- err }); err != nil {
				errs <- err
			}
		}
		fileFailed := 0
		for range recs {
			if err := <-errs; err != nil {
				fileFailed++
				if fileFailed == 1 {
					fmt.Fprintf(stderr, "\nweir deadletter replay: %s: %v\n", f.Name, err)
				}
			}
			done++
			prog.update(done)
		}
		failed += fileFailed
		if fileFailed == 0 && remove {
			if err := drain.RemoveDeadLetter(vfs.OS, dir, f.Name); err != nil {
				fmt.Fprintf(stderr, "\nweir deadletter replay: %v\n", err)
				return 1
			}
		}
	}
	prog.finish()
	fmt.Fprintf(stdout, "replayed %d records from %d files, %d refused\n", done-uint64(failed), len(files), failed)
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
