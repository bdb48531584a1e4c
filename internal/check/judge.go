package check

import (
	"context"
	"runtime"
	"slices"
	"sync"

	"github.com/weir-io/weir/internal/contract"
	"github.com/weir-io/weir/internal/dqaudit"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// Audit keeps every batch's outcomes per stream (*dqaudit.Trail):
// Append returns once they are durable.
type Audit interface {
	Append(ctx context.Context, batch []dqaudit.Batch) error
}

// Observer is told the checks' outcomes, for metrics. Calls are per
// batch and stream, never per record.
type Observer interface {
	// Judged: n records of the stream had the outcome (for a reject, by
	// code; code is CodeUnknown otherwise).
	Judged(stream string, outcome dqaudit.Outcome, code record.Code, n int)
	// RuleFailed: n records failed the rule (warn: severity warn).
	RuleFailed(stream, rule string, warn bool, n int)
	// FailRatio: the stream's reject ratio over its window (-1: too few
	// records yet).
	FailRatio(stream string, ratio float64)
}

// NopObserver observes nothing.
type NopObserver struct{}

func (NopObserver) Judged(string, dqaudit.Outcome, record.Code, int) {}
func (NopObserver) RuleFailed(string, string, bool, int)             {}
func (NopObserver) FailRatio(string, float64)                        {}

// verdicts is one batch's judgement.
type verdicts struct {
	token    sink.DedupToken
	rejected []sink.Rejection // by index into the batch, in order
	dropped  []bool           // nil, or true for each rejected or duplicate record
	clean    int              // records to commit
	n        int              // records in the batch
	audit    []dqaudit.Batch  // the outcomes for the audit trail, per stream
	audited  bool             // the trail holds them
}

// group is the records of one batch that one stream judges.
type group struct {
	s    *Stream
	idx  []int // into the batch
	res  []contract.Result
	keys [][]byte // res[i].Key of a record that passed, for dedup
	ids  []sink.RecordID
	dup  []bool
}

// judge judges a batch: each record by its stream's contract, then each
// stream's keyed records by its dedup, in one call per stream.
func (c *Checks) judge(ctx context.Context, sinkName string, b sink.Batch) *verdicts {
	v := &verdicts{token: b.Token, clean: len(b.Records), n: len(b.Records)}
	groups := c.group(b.Records)
	for _, g := range groups {
		g.check(b.Records)
		if g.s.Dedup != nil {
			g.s.Dedup.Judge(ctx, g.keys, g.ids, g.dup)
		}
		c.settle(sinkName, g, v)
	}
	slices.SortFunc(v.rejected, func(a, b sink.Rejection) int { return a.Index - b.Index })
	return v
}

// parallelMin is the fewest records of a group checked on more than one
// goroutine: a JSON Schema validation costs microseconds a record, so a
// batch's checks are spread over the cores (GOMAXPROCS) rather than
// holding the sink's worker alone.
const parallelMin = 64

// check runs the stream's contract on the group's records, spread over
// up to GOMAXPROCS goroutines, each owning a contiguous share and joined
// before check returns.
func (g *group) check(recs []sink.Record) {
	one := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g.res[i] = g.s.Contract.Check(&recs[g.idx[i]])
			if g.res[i].Passed() {
				g.keys[i] = g.res[i].Key
			}
		}
	}
	n := len(g.idx)
	workers := min(runtime.GOMAXPROCS(0), n/parallelMin)
	if workers <= 1 {
		one(0, n)
		return
	}
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for lo := per; lo < n; lo += per {
		wg.Add(1)
		go func() {
			defer wg.Done()
			one(lo, min(lo+per, n))
		}()
	}
	one(0, per)
	wg.Wait()
}

// group sorts the batch's records by the stream whose contract claims
// them, in batch order within each; records no contract claims are left
// out (they pass).
func (c *Checks) group(recs []sink.Record) []*group {
	var groups []*group
	by := map[*Stream]*group{}
	for i := range recs {
		s := c.route(&recs[i])
		if s == nil {
			continue
		}
		g := by[s]
		if g == nil {
			g = &group{s: s}
			by[s] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
		g.ids = append(g.ids, recs[i].ID)
	}
	for _, g := range groups {
		g.res = make([]contract.Result, len(g.idx))
		g.keys = make([][]byte, len(g.idx))
		g.dup = make([]bool, len(g.idx))
	}
	return groups
}

// route is the stream whose contract claims r, or nil.
func (c *Checks) route(r *sink.Record) *Stream {
	for _, s := range c.bySource[r.Source] {
		if s.Contract.Matches(r) {
			return s
		}
	}
	return nil
}

// settle turns a stream's results into the batch's verdicts, and tells
// the observer, the audit trail and the stream's window.
func (c *Checks) settle(sinkName string, g *group, v *verdicts) {
	name := g.s.Contract.Name()
	obs := make([]dqaudit.Obs, len(g.idx))
	byCode := map[record.Code]int{}
	rules := map[ruleKey]int{}
	var passed, warned, dups int
	for i, at := range g.idx {
		r := &g.res[i]
		o := &obs[i]
		o.ID, o.Warned = g.ids[i], r.Warned
		for _, w := range r.Warned {
			rules[ruleKey{w, true}]++
		}
		switch {
		case !r.Passed():
			o.Outcome, o.Code, o.Rule = dqaudit.Rejected, r.Code.String(), r.Rule
			byCode[r.Code]++
			rules[ruleKey{r.Rule, false}]++
			v.drop(at)
			v.rejected = append(v.rejected, sink.Rejection{Index: at, Reason: r.Error, Code: r.Code, Contract: name, Rule: r.Rule})
		case g.dup[i]:
			o.Outcome = dqaudit.Duplicate
			dups++
			v.drop(at)
		case len(r.Warned) > 0:
			o.Outcome = dqaudit.Warned
			warned++
		default:
			o.Outcome = dqaudit.Passed
			passed++
		}
	}
	v.audit = append(v.audit, dqaudit.Batch{Stream: g.s.Name, Sink: sinkName, Contract: name, Obs: obs})
	c.observe(g.s.Name, passed, warned, dups, byCode, rules)
	rejected := 0
	for _, n := range byCode {
		rejected += n
	}
	c.obs.FailRatio(g.s.Name, g.s.tally(c.now(), int64(len(g.idx)), int64(rejected)))
}

type ruleKey struct {
	rule string
	warn bool
}

func (c *Checks) observe(stream string, passed, warned, dups int, byCode map[record.Code]int, rules map[ruleKey]int) {
	if passed > 0 {
		c.obs.Judged(stream, dqaudit.Passed, record.CodeUnknown, passed)
	}
	if warned > 0 {
		c.obs.Judged(stream, dqaudit.Warned, record.CodeUnknown, warned)
	}
	if dups > 0 {
		c.obs.Judged(stream, dqaudit.Duplicate, record.CodeUnknown, dups)
	}
	for code, n := range byCode {
		c.obs.Judged(stream, dqaudit.Rejected, code, n)
	}
	for k, n := range rules {
		c.obs.RuleFailed(stream, k.rule, k.warn, n)
	}
}

// drop leaves record at out of the inner commit (a reject or a
// duplicate).
func (v *verdicts) drop(at int) {
	if v.dropped == nil {
		v.dropped = make([]bool, v.n)
	}
	v.dropped[at] = true
	v.clean--
}
