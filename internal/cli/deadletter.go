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
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/wab"
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
	dir, socket        string
	maxPayload         int
	all, yes           bool
	remove, dryRun     bool
	filter             dlFilter
	names              []string
	sinceArg, untilArg string
}

// dlFilter selects dead-letter records by code and first-seen time.
type dlFilter struct {
	codes        map[record.Code]bool // empty: every code
	since, until time.Time            // zero: unbounded
}

// match reports whether the filter selects r, first rejected at seen.
func (f dlFilter) match(r *drain.DeadLetterRecord, seen time.Time) bool {
	if len(f.codes) > 0 && (r.Meta.Reject == nil || !f.codes[r.Meta.Reject.Code]) {
		return false
	}
	if !f.since.IsZero() && seen.Before(f.since) {
		return false
	}
	return f.until.IsZero() || seen.Before(f.until)
}

// firstSeen is when r was first rejected: its own first-seen time, or for
// a version-1 record, which has none, when its file was written (the
// file's header).
func firstSeen(r *drain.DeadLetterRecord, h wab.Header) time.Time {
	if r.Meta.Reject != nil && r.Meta.Reject.FirstSeen != 0 {
		return time.Unix(0, r.Meta.Reject.FirstSeen)
	}
	return time.Unix(0, h.Created)
}

// parseWhen reads an RFC 3339 time or a duration back from now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration", s)
}

func parseDeadletterFlags(sub string, args []string, stderr io.Writer) (*dlOptions, error) {
	o := &dlOptions{filter: dlFilter{codes: map[record.Code]bool{}}}
	fs := flag.NewFlagSet("weir deadletter "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.dir, "wab-dir", defaultWABDir(), "WAB directory (env WEIR_WAB_DIR)")
	fs.IntVar(&o.maxPayload, "max-payload", 200, "show: bytes of each payload to print")
	fs.StringVar(&o.socket, "socket-path", defaultSocket(), "replay: daemon socket (env WEIR_SOCKET_PATH)")
	fs.BoolVar(&o.all, "all", false, "show/replay/purge: every dead-letter file")
	fs.BoolVar(&o.yes, "yes", false, "purge --all: really remove every file")
	fs.BoolVar(&o.remove, "remove", false, "replay: remove each file once all its records are acked")
	fs.BoolVar(&o.dryRun, "dry-run", false, "replay: print what would be replayed, send nothing")
	fs.Func("code", "show/replay: only records with this reason code (repeatable)", func(s string) error {
		c, err := record.ParseCode(s)
		if err != nil {
			return err
		}
		o.filter.codes[c] = true
		return nil
	})
	fs.StringVar(&o.sinceArg, "since", "", "show/replay: only records first rejected at or after this time")
	fs.StringVar(&o.untilArg, "until", "", "show/replay: only records first rejected before this time")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	now := time.Now()
	for _, w := range []struct {
		arg string
		t   *time.Time
	}{{o.sinceArg, &o.filter.since}, {o.untilArg, &o.filter.until}} {
		if w.arg == "" {
			continue
		}
		t, err := parseWhen(w.arg, now)
		if err != nil {
			fmt.Fprintf(stderr, "weir deadletter %s: %v\n", sub, err)
			return nil, err
		}
		*w.t = t
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
	if len(args) == 0 {
		fmt.Fprint(stderr, deadletterUsage)
		return 2
	}
	sub := args[0]
	switch sub {
	case "list", "show", "replay", "purge":
	default:
		fmt.Fprintf(stderr, "weir deadletter: unknown subcommand %q\n%s", sub, deadletterUsage)
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

// dlList prints one line per file: records, size, the span of first-seen
// times, the reason codes, stages and components of its records, and the
// most delivery attempts any of them had.
func dlList(files []drain.DeadLetterFile, stdout, stderr io.Writer) int {
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tRECORDS\tBYTES\tFIRST SEEN\tLAST SEEN\tCODES\tSTAGE/COMPONENT\tMAX ATTEMPTS")
	var recs uint64
	var bytes int64
	for _, f := range files {
		h, rs, err := drain.ReadDeadLetter(vfs.OS, f.Path)
		if err != nil {
			fmt.Fprintf(stderr, "weir deadletter list: %v\n", err)
			return 1
		}
		var first, last time.Time
		codes, where, attempts := counter{}, counter{}, 0
		for i := range rs {
			t := firstSeen(&rs[i], h)
			if first.IsZero() || t.Before(first) {
				first = t
			}
			last = later(last, t)
			rj := rejectionOf(&rs[i])
			codes.add(rj.Code.String())
			where.add(orDash(string(rj.Stage)) + "/" + orDash(rj.Component))
			attempts = max(attempts, rj.Attempts)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%d\n", f.Name, f.Records, f.Bytes,
			fmtWhen(first), fmtWhen(last), codes, where, attempts)
		recs += f.Records
		bytes += f.Bytes
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d files, %d records, %d bytes\n", len(files), recs, bytes)
	return 0
}

// fmtWhen is fmtTime for a time.Time ("-" for the zero time).
func fmtWhen(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmtTime(t.UnixNano())
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// counter counts strings in first-seen order; String is "a:2,b:1".
type counter struct {
	keys []string
	n    map[string]int
}

func (c *counter) add(k string) {
	if c.n == nil {
		c.n = map[string]int{}
	}
	if c.n[k] == 0 {
		c.keys = append(c.keys, k)
	}
	c.n[k]++
}

func (c counter) String() string {
	if len(c.keys) == 0 {
		return "-"
	}
	parts := make([]string, len(c.keys))
	for i, k := range c.keys {
		parts[i] = k + ":" + strconv.Itoa(c.n[k])
	}
	return strings.Join(parts, ",")
}

// rejectionOf is r's rejection, or for a record whose metadata did not
// decode, one that says so.
func rejectionOf(r *drain.DeadLetterRecord) *record.Rejection {
	if r.Meta.Reject != nil {
		return r.Meta.Reject
	}
	return &record.Rejection{Error: fmt.Sprintf("undecodable metadata: %v", r.MetaErr)}
}

// eachSelected reads each file and calls fn with its header and the
// records the filter selects (with their index in the file); all says
// whether those are every record of the file.
func eachSelected(files []drain.DeadLetterFile, f dlFilter, fn func(file drain.DeadLetterFile, h wab.Header, recs []drain.DeadLetterRecord, idx []int, all bool) error) error {
	for _, file := range files {
		h, rs, err := drain.ReadDeadLetter(vfs.OS, file.Path)
		if err != nil {
			return err
		}
		var sel []drain.DeadLetterRecord
		var idx []int
		for i := range rs {
			if f.match(&rs[i], firstSeen(&rs[i], h)) {
				sel = append(sel, rs[i])
				idx = append(idx, i)
			}
		}
		if err := fn(file, h, sel, idx, len(sel) == len(rs)); err != nil {
			return err
		}
	}
	return nil
}

// dlShow prints every selected record with its rejection and metadata.
func dlShow(files []drain.DeadLetterFile, o *dlOptions, stdout, stderr io.Writer) int {
	err := eachSelected(files, o.filter, func(f drain.DeadLetterFile, h wab.Header, recs []drain.DeadLetterRecord, idx []int, _ bool) error {
		fmt.Fprintf(stdout, "%s: %d of %d records\n", f.Name, len(recs), f.Records)
		for i := range recs {
			showRecord(stdout, idx[i], &recs[i], h, o.maxPayload)
		}
		return nil
	})
	if err != nil {
		fmt.Fprintf(stderr, "weir deadletter show: %v\n", err)
		return 1
	}
	return 0
}

func showRecord(w io.Writer, i int, r *drain.DeadLetterRecord, h wab.Header, maxPayload int) {
	m, rj := &r.Meta, rejectionOf(r)
	source := m.Source
	if source == "" {
		source = drain.RecordSource
	}
	fmt.Fprintf(w, "  #%d id=%s source=%s origin=shard %d seq %d index %d", i, m.ID, source, rj.Shard, rj.Seq, rj.Index)
	if m.OriginPos != "" {
		fmt.Fprintf(w, " origin_pos=%s", m.OriginPos)
	}
	fmt.Fprintf(w, " received=%s\n", r.Received.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(w, "      code=%s stage=%s component=%s", rj.Code, orDash(string(rj.Stage)), orDash(rj.Component))
	if rj.Rule != "" {
		fmt.Fprintf(w, " rule=%s", rj.Rule)
	}
	fmt.Fprintf(w, " attempts=%d first_seen=%s\n", rj.Attempts, fmtWhen(firstSeen(r, h)))
	fmt.Fprintf(w, "      reason: %s\n", rj.Error)
	if m.Key != nil {
		fmt.Fprintf(w, "      key: %s\n", preview(m.Key, maxPayload))
	}
	for _, hd := range m.Headers {
		fmt.Fprintf(w, "      header: %s=%s\n", strconv.Quote(hd.Key), preview(hd.Value, maxPayload))
	}
	if m.EventTime != 0 {
		fmt.Fprintf(w, "      event_time: %s\n", fmtTime(m.EventTime))
	}
	fmt.Fprintf(w, "      payload: %s\n", preview(r.Payload, maxPayload))
}

// dlDryRun prints what replay would send, and how many, without sending.
func dlDryRun(files []drain.DeadLetterFile, o *dlOptions, stdout, stderr io.Writer) int {
	n, nfiles := 0, 0
	err := eachSelected(files, o.filter, func(f drain.DeadLetterFile, h wab.Header, recs []drain.DeadLetterRecord, idx []int, all bool) error {
		if len(recs) > 0 {
			nfiles++
		}
		for i := range recs {
			rj := rejectionOf(&recs[i])
			fmt.Fprintf(stdout, "%s #%d id=%s code=%s first_seen=%s payload=%s\n", f.Name, idx[i], recs[i].Meta.ID,
				rj.Code, fmtWhen(firstSeen(&recs[i], h)), preview(recs[i].Payload, o.maxPayload))
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

// dialReplay connects to the daemon that receives the replayed records.
// The client asks for replay in its Hello; the daemon grants it only to a
// wire version-2 producer on its Unix socket. Without it a record could
// not keep its id, so dialReplay refuses to go on.
func dialReplay(ctx context.Context, socket string) (*client.Client, error) {
	if strings.HasPrefix(socket, "tcp://") {
		return nil, fmt.Errorf("%s: replay goes through the daemon's Unix socket only", socket)
	}
	c, err := client.Dial(ctx, socket)
	if err != nil {
		return nil, err
	}
	if !c.CanReplay() {
		v := c.ProtocolVersion()
		c.Close(ctx)
		return nil, fmt.Errorf("the daemon did not grant replay (it speaks wire version %d; replay needs version 2 on the Unix socket): "+
			"records cannot be re-submitted under their original ids", v)
	}
	return c, nil
}

// errNoIdentity refuses to replay a record whose metadata did not decode:
// its id is unknown.
var errNoIdentity = errors.New("metadata does not decode, so its original id is unknown; not replayed")

// sendReplay re-submits one dead-lettered record to the daemon, Durable,
// under its original identity, and calls done with the daemon's answer (as
// client.PushRecordsAsync does; an error returned means done will not be
// called).
//
// The record goes out with its payload, key, headers and event time, and
// the id it was delivered under (Meta.ID, which the drain sets for every
// dead letter — also for a producer record whose id derived from its
// producer id and sequence, or from its buffer position), its source and
// its origin position. The daemon stores it under that id, so replaying it
// twice adds nothing to an idempotent sink. The metadata is rebuilt from
// the fields: the stored bytes also hold the rejection and producer tags,
// which a producer may not send.
func sendReplay(ctx context.Context, c *client.Client, r *drain.DeadLetterRecord, done func(error)) error {
	if r.MetaErr != nil || !r.Meta.HasID {
		return fmt.Errorf("record %s: %w (%v)", preview(r.Payload, 40), errNoIdentity, r.MetaErr)
	}
	m := &r.Meta
	rec := client.Record{
		Payload: r.Payload,
		Key:     m.Key,
		Headers: m.Headers,
		Replay:  &client.Replay{ID: m.ID, Source: m.Source, OriginPos: m.OriginPos},
	}
	if m.EventTime != 0 {
		rec.EventTime = time.Unix(0, m.EventTime)
	}
	return c.PushRecordsAsync(ctx, []client.Record{rec}, client.Durable, done)
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
	err = eachSelected(files, o.filter, func(f drain.DeadLetterFile, _ wab.Header, recs []drain.DeadLetterRecord, _ []int, all bool) error {
		fileFailed := replayFile(ctx, c, f, recs, stderr)
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

// replayFile sends recs and waits for every answer; it returns how many
// were refused, having printed the first refusal.
func replayFile(ctx context.Context, c *client.Client, f drain.DeadLetterFile, recs []drain.DeadLetterRecord, stderr io.Writer) int {
	errs := make(chan error, len(recs))
	for i := range recs {
		if err := sendReplay(ctx, c, &recs[i], func(err error) { errs <- err }); err != nil {
			errs <- err
		}
	}
	failed := 0
	for range recs {
		if err := <-errs; err != nil {
			failed++
			if failed == 1 {
				fmt.Fprintf(stderr, "\nweir deadletter replay: %s: %v\n", f.Name, err)
			}
		}
	}
	return failed
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
