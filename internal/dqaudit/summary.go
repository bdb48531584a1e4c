package dqaudit

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/weir-io/weir/sink"
)

// How much of the detail a Summary keeps.
const (
	SummaryTopRules = 5
	SummarySample   = 8
)

// Summary is the trail folded for people and tools (`weir dq`).
type Summary struct {
	// Entries is how many entries were read; From and To bound their
	// windows.
	Entries int       `json:"entries"`
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	// Streams are the outcomes per (stream, contract), in that order.
	Streams []StreamSummary `json:"streams"`
	// SkipQuarantine lists, per sink, the raw positions recovered in
	// skip-quarantine mode: their rejects are not in the sink's
	// quarantine view (raw keeps them).
	SkipQuarantine []SkippedRecovery `json:"skip_quarantine"`
}

// StreamSummary is one (stream, contract)'s outcomes, summed over its
// windows and sinks.
type StreamSummary struct {
	Stream   string `json:"stream"`
	Contract string `json:"contract"`
	// FirstWindow is the start of the earliest window, LastWindow the end
	// of the latest; Windows counts the distinct windows.
	FirstWindow time.Time         `json:"first_window"`
	LastWindow  time.Time         `json:"last_window"`
	Windows     int               `json:"windows"`
	Outcomes    map[Outcome]int64 `json:"outcomes"`
	Codes       map[string]int64  `json:"codes,omitempty"`
	// TopRules are the rules that refused or warned most, most first.
	TopRules []RuleCount `json:"top_rules,omitempty"`
	// Sample holds a few rejected ids, of the latest windows.
	Sample []string `json:"sample_rejected_ids,omitempty"`
	// BySink splits Outcomes by sink: when the stream feeds several
	// sinks each judges its own copy, so Outcomes counts a record once
	// per sink.
	BySink map[string]map[Outcome]int64 `json:"by_sink"`
	// Outcomes, Codes, TopRules and BySink count each record once per
	// sink, by its latest verdict, where the entries name their records
	// (Entry.Records); Judged counts every judgement, a batch judged
	// again after a crash as often as it was, and Rejudged is how many
	// judgements the record ids showed to be repeats.
	Judged   map[Outcome]int64 `json:"judged"`
	Rejudged int64             `json:"rejudged"`

	rules    map[string]int64                      // every rule's count, until finish
	verdicts map[string]map[sink.RecordID]*IDGroup // by sink, then record: the latest verdict
}

// RuleCount is how many records a rule refused or warned about.
type RuleCount struct {
	Rule  string `json:"rule"`
	Count int64  `json:"count"`
}

// SkippedRecovery is one sink's raw windows recovered in skip-quarantine
// mode.
type SkippedRecovery struct {
	Sink string `json:"sink"`
	// Ranges are the position ranges [Lo, Hi), merged and in order.
	Ranges []PosRange `json:"ranges"`
	// Positions is how many raw positions they span.
	Positions uint64 `json:"positions"`
	// From and To bound the time windows the recoveries happened in.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// PosRange is raw positions [Lo, Hi).
type PosRange struct {
	Lo uint64 `json:"lo"`
	Hi uint64 `json:"hi"`
}

type streamKey struct{ stream, contract string }

// Summarise folds entries (in any order) into a Summary.
func Summarise(entries []Entry) Summary {
	es := slices.Clone(entries)
	slices.SortStableFunc(es, func(a, b Entry) int { return a.From.Compare(b.From) })
	s := Summary{Entries: len(es), Streams: []StreamSummary{}, SkipQuarantine: []SkippedRecovery{}}
	streams := map[streamKey]*StreamSummary{}
	windows := map[streamKey]map[time.Time]bool{}
	skipped := map[string]*SkippedRecovery{}
	for i := range es {
		e := &es[i]
		s.From, s.To = earliest(s.From, e.From), latest(s.To, e.To)
		switch {
		case e.Kind == KindRecovery && e.Mode == ModeSkipQuarantine:
			r := skipped[e.Sink]
			if r == nil {
				r = &SkippedRecovery{Sink: e.Sink}
				skipped[e.Sink] = r
			}
			r.Ranges = append(r.Ranges, PosRange{e.Lo, e.Hi})
			r.From, r.To = earliest(r.From, e.From), latest(r.To, e.To)
		case e.Kind == KindOutcomes:
			k := streamKey{e.Stream, e.Contract}
			st := streams[k]
			if st == nil {
				st = &StreamSummary{Stream: e.Stream, Contract: e.Contract, Outcomes: map[Outcome]int64{},
					BySink: map[string]map[Outcome]int64{}, Judged: map[Outcome]int64{}}
				streams[k], windows[k] = st, map[time.Time]bool{}
			}
			windows[k][e.From] = true
			st.add(e)
		}
	}
	for k, st := range streams {
		st.Windows = len(windows[k])
		st.finish()
		s.Streams = append(s.Streams, *st)
	}
	slices.SortFunc(s.Streams, func(a, b StreamSummary) int {
		return cmp.Or(cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.Contract, b.Contract))
	})
	for _, r := range skipped {
		r.Ranges = mergeRanges(r.Ranges)
		for _, p := range r.Ranges {
			r.Positions += p.Hi - p.Lo
		}
		s.SkipQuarantine = append(s.SkipQuarantine, *r)
	}
	slices.SortFunc(s.SkipQuarantine, func(a, b SkippedRecovery) int { return cmp.Compare(a.Sink, b.Sink) })
	return s
}

// add counts e (an outcomes entry; entries come oldest first): by its
// records' verdicts when it names them — a later verdict of a record
// replacing an earlier one — else by its counts.
func (st *StreamSummary) add(e *Entry) {
	st.FirstWindow, st.LastWindow = earliest(st.FirstWindow, e.From), latest(st.LastWindow, e.To)
	for o, n := range e.Outcomes {
		st.Judged[o] += n
	}
	if ids, ok := decodeRecords(e.Records); ok && len(ids) > 0 {
		if st.verdicts == nil {
			st.verdicts = map[string]map[sink.RecordID]*IDGroup{}
		}
		vs := st.verdicts[e.Sink]
		if vs == nil {
			vs = map[sink.RecordID]*IDGroup{}
			st.verdicts[e.Sink] = vs
		}
		for i := range e.Records {
			g := &e.Records[i]
			for _, id := range ids[i] {
				if _, again := vs[id]; again {
					st.Rejudged++
				}
				vs[id] = g
			}
		}
	} else {
		for o, n := range e.Outcomes {
			st.count(e.Sink, o, n)
		}
		for c, n := range e.Codes {
			st.code(c, n)
		}
		for r, n := range e.Rules {
			st.rule(r, n)
		}
	}
	st.Sample = append(st.Sample, e.Sample...)
	if len(st.Sample) > 4*SummarySample {
		st.Sample = slices.Delete(st.Sample, 0, len(st.Sample)-SummarySample)
	}
}

// count adds n records of outcome o delivered to sinkName.
func (st *StreamSummary) count(sinkName string, o Outcome, n int64) {
	by := st.BySink[sinkName]
	if by == nil {
		by = map[Outcome]int64{}
		st.BySink[sinkName] = by
	}
	st.Outcomes[o] += n
	by[o] += n
}

func (st *StreamSummary) code(c string, n int64) {
	if st.Codes == nil {
		st.Codes = map[string]int64{}
	}
	st.Codes[c] += n
}

func (st *StreamSummary) rule(r string, n int64) {
	if st.rules == nil {
		st.rules = map[string]int64{}
	}
	st.rules[r] += n
}

// decodeRecords is each group's record ids; false when one of them is
// not a whole number of ids in base64 (the entry is then counted by its
// counts).
func decodeRecords(gs []IDGroup) ([][]sink.RecordID, bool) {
	out := make([][]sink.RecordID, len(gs))
	for i := range gs {
		b, err := base64.StdEncoding.DecodeString(gs[i].IDs)
		if err != nil || len(b)%len(sink.RecordID{}) != 0 {
			return nil, false
		}
		ids := make([]sink.RecordID, len(b)/len(sink.RecordID{}))
		for j := range ids {
			copy(ids[j][:], b[j*len(sink.RecordID{}):])
		}
		out[i] = ids
	}
	return out, true
}

// finish counts every record by its latest verdict, sums the rules and
// keeps the top ones and the latest sample ids.
func (st *StreamSummary) finish() {
	for sinkName, vs := range st.verdicts {
		for _, g := range vs {
			st.count(sinkName, g.Outcome, 1)
			for _, w := range g.Warned {
				st.rule(w, 1)
			}
			if g.Outcome != Rejected {
				continue
			}
			if g.Code != "" {
				st.code(g.Code, 1)
			}
			if g.Rule != "" {
				st.rule(g.Rule, 1)
			}
		}
	}
	st.verdicts = nil
	for r, n := range st.rules {
		st.TopRules = append(st.TopRules, RuleCount{r, n})
	}
	st.rules = nil
	slices.SortFunc(st.TopRules, func(a, b RuleCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Rule, b.Rule))
	})
	st.TopRules = st.TopRules[:min(len(st.TopRules), SummaryTopRules)]
	if n := len(st.Sample); n > SummarySample {
		st.Sample = st.Sample[n-SummarySample:]
	}
}

// mergeRanges sorts rs and joins those that touch or overlap.
func mergeRanges(rs []PosRange) []PosRange {
	slices.SortFunc(rs, func(a, b PosRange) int { return cmp.Or(cmp.Compare(a.Lo, b.Lo), cmp.Compare(a.Hi, b.Hi)) })
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 && r.Lo <= out[n-1].Hi {
			out[n-1].Hi = max(out[n-1].Hi, r.Hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// outcomeOrder is the order outcomes are printed in; others follow by
// name.
var outcomeOrder = []Outcome{Passed, Warned, Rejected, Duplicate}

// WriteText prints s for people.
func (s Summary) WriteText(w io.Writer) error {
	var b strings.Builder
	if s.Entries == 0 {
		b.WriteString("dq-audit: no entries\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, "dq-audit: %d entries, windows %s to %s\n", s.Entries, stamp(s.From), stamp(s.To))
	for _, st := range s.Streams {
		sinks := slices.Sorted(maps.Keys(st.BySink))
		fmt.Fprintf(&b, "\nstream %s, contract %s: %d windows, %s to %s, sinks %s\n",
			orDash(st.Stream), orDash(st.Contract), st.Windows, stamp(st.FirstWindow), stamp(st.LastWindow), strings.Join(sinks, ", "))
		fmt.Fprintf(&b, "  outcomes:  %s\n", outcomeList(st.Outcomes))
		if st.Rejudged > 0 {
			fmt.Fprintf(&b, "  judged:  %s (%d judgements of records judged before: batches judged again after a restart)\n",
				outcomeList(st.Judged), st.Rejudged)
		}
		if len(sinks) > 1 {
			for _, k := range sinks {
				fmt.Fprintf(&b, "    %s:  %s\n", k, outcomeList(st.BySink[k]))
			}
		}
		if len(st.Codes) > 0 {
			fmt.Fprintf(&b, "  rejected by code:  %s\n", countList(st.Codes))
		}
		if len(st.TopRules) > 0 {
			rs := make([]string, len(st.TopRules))
			for i, r := range st.TopRules {
				rs[i] = fmt.Sprintf("%s %d", r.Rule, r.Count)
			}
			fmt.Fprintf(&b, "  top rules:  %s\n", strings.Join(rs, ", "))
		}
		if len(st.Sample) > 0 {
			fmt.Fprintf(&b, "  sample rejected ids:  %s\n", strings.Join(st.Sample, " "))
		}
	}
	if len(s.SkipQuarantine) > 0 {
		b.WriteString("\nrecovered in skip-quarantine mode (their rejects are not in the quarantine view; raw keeps them):\n")
		for _, r := range s.SkipQuarantine {
			rs := make([]string, len(r.Ranges))
			for i, p := range r.Ranges {
				rs[i] = fmt.Sprintf("[%d, %d)", p.Lo, p.Hi)
			}
			fmt.Fprintf(&b, "  sink %s: positions %s, %d in all, %s to %s\n",
				r.Sink, strings.Join(rs, " "), r.Positions, stamp(r.From), stamp(r.To))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func outcomeList(m map[Outcome]int64) string {
	var parts []string
	for _, o := range outcomeOrder {
		parts = append(parts, fmt.Sprintf("%s %d", o, m[o]))
	}
	for _, o := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(outcomeOrder, o) {
			parts = append(parts, fmt.Sprintf("%s %d", o, m[o]))
		}
	}
	return strings.Join(parts, ", ")
}

func countList(m map[string]int64) string {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
