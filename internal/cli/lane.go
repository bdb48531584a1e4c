package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/record"
)

// The parts `weir deadletter` and `weir quarantine` share: both read their
// lane as lane.Rejected records, select them with the same filters, show
// them the same way and replay them under their original ids.

// subcommand returns args' subcommand when it is one of subs; otherwise
// it prints why with usage and returns "".
func subcommand(cmd, usage string, args []string, stderr io.Writer, subs ...string) string {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ""
	}
	if !slices.Contains(subs, args[0]) {
		fmt.Fprintf(stderr, "%s: unknown subcommand %q\n%s", cmd, args[0], usage)
		return ""
	}
	return args[0]
}

// configDataDir is the data_dir of the configuration (the file path, or
// WEIR_CONFIG and WEIR_DATA_DIR when empty).
func configDataDir(path string) (string, error) {
	var args []string
	if path != "" {
		args = []string{"--" + config.ConfigFlag, path}
	}
	cfg, err := config.Load(args, os.Environ(), nil)
	if err != nil {
		return "", err
	}
	return cfg.DataDir, nil
}

// dirOrDefault is dir when set, else name under the data_dir of the
// configuration at path.
func dirOrDefault(dir, path, name string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	dataDir, err := configDataDir(path)
	if err != nil {
		return "", err
	}
	return filepath.Join(dataDir, name), nil
}

// laneFilter selects lane records by code and first-seen time.
type laneFilter struct {
	codes              map[record.Code]bool // empty: every code
	since, until       time.Time            // zero: unbounded
	sinceArg, untilArg string
}

// register adds --code, --since and --until to fs; resolve reads the
// times once fs is parsed.
func (f *laneFilter) register(fs *flag.FlagSet, which string) {
	f.codes = map[record.Code]bool{}
	fs.Func("code", which+"only records with this reason code (repeatable)", func(s string) error {
		c, err := record.ParseCode(s)
		if err != nil {
			return err
		}
		f.codes[c] = true
		return nil
	})
	fs.StringVar(&f.sinceArg, "since", "", which+"only records first rejected at or after this time")
	fs.StringVar(&f.untilArg, "until", "", which+"only records first rejected before this time")
}

func (f *laneFilter) resolve(now time.Time) error {
	for _, w := range []struct {
		arg string
		t   *time.Time
	}{{f.sinceArg, &f.since}, {f.untilArg, &f.until}} {
		if w.arg == "" {
			continue
		}
		t, err := parseWhen(w.arg, now)
		if err != nil {
			return err
		}
		*w.t = t
	}
	return nil
}

// match reports whether the filter selects r.
func (f *laneFilter) match(r *lane.Rejected) bool {
	if len(f.codes) > 0 && !f.codes[r.Reject.Code] {
		return false
	}
	seen := firstSeen(r)
	if !f.since.IsZero() && seen.Before(f.since) {
		return false
	}
	return f.until.IsZero() || seen.Before(f.until)
}

// firstSeen is when r was first rejected; the zero time when unknown.
func firstSeen(r *lane.Rejected) time.Time {
	if r.Reject.FirstSeen == 0 {
		return time.Time{}
	}
	return time.Unix(0, r.Reject.FirstSeen)
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

// laneSummary sums up lane records for a list line: the span of their
// first-seen times, their codes, stage/component pairs and the most
// attempts among them.
type laneSummary struct {
	records      int
	first, last  time.Time
	codes, where counter
	attempts     int
}

func (s *laneSummary) add(r *lane.Rejected) {
	s.records++
	if t := firstSeen(r); !t.IsZero() {
		if s.first.IsZero() || t.Before(s.first) {
			s.first = t
		}
		if t.After(s.last) {
			s.last = t
		}
	}
	rj := &r.Reject
	s.codes.add(rj.Code.String())
	s.where.add(orDash(string(rj.Stage)) + "/" + orDash(rj.Component))
	s.attempts = max(s.attempts, rj.Attempts)
}

// columns are the summary's list columns, tab-separated: first seen, last
// seen, codes, stage/component, max attempts.
func (s *laneSummary) columns() string {
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%d", fmtWhen(s.first), fmtWhen(s.last), s.codes, s.where, s.attempts)
}

const laneSummaryHeader = "FIRST SEEN\tLAST SEEN\tCODES\tSTAGE/COMPONENT\tMAX ATTEMPTS"

// fmtWhen is fmtTime for a time.Time ("-" for the zero time).
func fmtWhen(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmtTime(t.UnixNano())
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

// showRejected prints the i-th record of a lane with its rejection and
// metadata: where it sat (the buffer for a dead letter, raw and the lane
// for a quarantined record), then code, stage, component, rule, attempts,
// first seen, reason, key, headers, event time and a payload preview.
func showRejected(w io.Writer, i int, r *lane.Rejected, maxPayload int) {
	rec, rj := &r.Record, &r.Reject
	fmt.Fprintf(w, "  #%d id=%s source=%s", i, rec.ID, orDash(rec.Source))
	if rj.HasLocation {
		fmt.Fprintf(w, " origin=shard %d seq %d index %d", rj.Shard, rj.Seq, rj.Index)
	} else {
		fmt.Fprintf(w, " lane=%s raw_position=%d", orDash(r.Sink), r.Pos)
	}
	if r.OriginPos != "" {
		fmt.Fprintf(w, " origin_pos=%s", r.OriginPos)
	}
	if r.Recovery {
		fmt.Fprint(w, " found_by=recovery")
	}
	if !rec.Received.IsZero() {
		fmt.Fprintf(w, " received=%s", rec.Received.UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "      code=%s stage=%s component=%s", rj.Code, orDash(string(rj.Stage)), orDash(rj.Component))
	if rj.Rule != "" {
		fmt.Fprintf(w, " rule=%s", rj.Rule)
	}
	fmt.Fprintf(w, " attempts=%d first_seen=%s\n", rj.Attempts, fmtWhen(firstSeen(r)))
	fmt.Fprintf(w, "      reason: %s\n", rj.Error)
	if rec.Key != nil {
		fmt.Fprintf(w, "      key: %s\n", preview(rec.Key, maxPayload))
	}
	for _, hd := range rec.Headers {
		fmt.Fprintf(w, "      header: %s=%s\n", strconv.Quote(hd.Key), preview(hd.Value, maxPayload))
	}
	if !rec.EventTime.IsZero() {
		fmt.Fprintf(w, "      event_time: %s\n", fmtTime(rec.EventTime.UnixNano()))
	}
	fmt.Fprintf(w, "      payload: %s\n", preview(rec.Payload, maxPayload))
}

// dryRunLine prints what replay would send of the i-th record of a lane
// named where.
func dryRunLine(w io.Writer, where string, i int, r *lane.Rejected, maxPayload int) {
	fmt.Fprintf(w, "%s #%d id=%s code=%s first_seen=%s payload=%s\n", where, i, r.Record.ID,
		r.Reject.Code, fmtWhen(firstSeen(r)), preview(r.Record.Payload, maxPayload))
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

// errNoIdentity refuses to replay a record whose id is unknown (a dead
// letter whose metadata did not decode).
var errNoIdentity = errors.New("its original id is unknown (metadata does not decode); not replayed")

// sendReplay re-submits one lane record to the daemon, Durable, under its
// original identity, and calls done with the daemon's answer (as
// client.PushRecordsAsync does; an error returned means done will not be
// called).
//
// The record goes out with its payload, key, headers and event time, and
// the id it was delivered under (for a dead letter the drain sets it for
// every record — also a producer record whose id derived from its producer
// id and sequence, or from its buffer position; a quarantine keeps the id
// raw gave it), its source and its origin position. The daemon stores it
// under that id, so replaying it twice adds nothing to an idempotent sink.
// The metadata is rebuilt from the fields: a dead letter's stored bytes
// also hold the rejection and producer tags, which a producer may not send.
func sendReplay(ctx context.Context, c *client.Client, r *lane.Rejected, done func(error)) error {
	if r.IDUnknown {
		return fmt.Errorf("record %s: %w (%s)", preview(r.Record.Payload, 40), errNoIdentity, r.Reject.Error)
	}
	rec := client.Record{
		Payload: r.Record.Payload,
		Key:     r.Record.Key,
		Headers: r.Record.Headers,
		Replay:  &client.Replay{ID: r.Record.ID, Source: r.Record.Source, OriginPos: r.OriginPos},
	}
	if !r.Record.EventTime.IsZero() {
		rec.EventTime = r.Record.EventTime
	}
	return c.PushRecordsAsync(ctx, []client.Record{rec}, client.Durable, done)
}

// replayRecords sends recs and waits for every answer; it returns how many
// were refused, having printed the first refusal (prefixed by cmd and
// where).
func replayRecords(ctx context.Context, c *client.Client, cmd, where string, recs []lane.Rejected, stderr io.Writer) int {
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
				fmt.Fprintf(stderr, "\n%s: %s: %v\n", cmd, where, err)
			}
		}
	}
	return failed
}
