package dqaudit_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/dqaudit"
)

func summaryEntries() []dqaudit.Entry {
	t0 := time.Date(2026, 3, 4, 5, 0, 0, 0, time.UTC)
	win := func(i int) (time.Time, time.Time) {
		return t0.Add(time.Duration(i) * time.Minute), t0.Add(time.Duration(i+1) * time.Minute)
	}
	var es []dqaudit.Entry
	add := func(i int, e dqaudit.Entry) {
		e.From, e.To = win(i)
		es = append(es, e)
	}
	// Out of order on purpose: Summarise sorts by window.
	add(2, dqaudit.Entry{Kind: "outcomes", Stream: "orders", Sink: "pg", Contract: "orders@3",
		Outcomes: map[dqaudit.Outcome]int64{"pass": 50, "reject": 3, "warn": 4},
		Codes:    map[string]int64{"dq": 2, "contract": 1},
		Rules:    map[string]int64{"positive_amount": 2, "schema": 1, "has_currency": 4},
		Sample:   []string{"c1", "c2", "c3"}})
	add(0, dqaudit.Entry{Kind: "outcomes", Stream: "orders", Sink: "pg", Contract: "orders@3",
		Outcomes: map[dqaudit.Outcome]int64{"pass": 100, "reject": 10, "duplicate": 2},
		Codes:    map[string]int64{"dq": 10},
		Rules:    map[string]int64{"positive_amount": 10},
		Sample:   []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"}})
	add(0, dqaudit.Entry{Kind: "outcomes", Stream: "orders", Sink: "s3", Contract: "orders@3",
		Outcomes: map[dqaudit.Outcome]int64{"pass": 110, "reject": 2}, Codes: map[string]int64{"dq": 2},
		Rules: map[string]int64{"positive_amount": 2}})
	add(1, dqaudit.Entry{Kind: "outcomes", Stream: "orders", Sink: "pg", Contract: "orders@2",
		Outcomes: map[dqaudit.Outcome]int64{"pass": 5}})
	add(1, dqaudit.Entry{Kind: "recovery", Sink: "pg", Lo: 300, Hi: 400, Mode: "skip-quarantine"})
	add(0, dqaudit.Entry{Kind: "recovery", Sink: "pg", Lo: 100, Hi: 200, Mode: "skip-quarantine"})
	add(1, dqaudit.Entry{Kind: "recovery", Sink: "pg", Lo: 200, Hi: 250, Mode: "skip-quarantine"})
	add(3, dqaudit.Entry{Kind: "recovery", Sink: "pg", Lo: 500, Hi: 900, Mode: "rehydrate"})
	add(3, dqaudit.Entry{Kind: "recovery", Sink: "s3", Lo: 0, Hi: 10, Mode: "skip-quarantine"})
	return es
}

func TestSummarise(t *testing.T) {
	s := dqaudit.Summarise(summaryEntries())
	t0 := time.Date(2026, 3, 4, 5, 0, 0, 0, time.UTC)
	min := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }
	want := dqaudit.Summary{Entries: 9, From: min(0), To: min(4),
		Streams: []dqaudit.StreamSummary{
			{Stream: "orders", Contract: "orders@2", FirstWindow: min(1), LastWindow: min(2), Windows: 1,
				Outcomes: map[dqaudit.Outcome]int64{"pass": 5},
				BySink:   map[string]map[dqaudit.Outcome]int64{"pg": {"pass": 5}},
				Judged:   map[dqaudit.Outcome]int64{"pass": 5}},
			{Stream: "orders", Contract: "orders@3", FirstWindow: min(0), LastWindow: min(3), Windows: 2,
				Outcomes: map[dqaudit.Outcome]int64{"pass": 260, "reject": 15, "warn": 4, "duplicate": 2},
				Codes:    map[string]int64{"dq": 14, "contract": 1},
				TopRules: []dqaudit.RuleCount{{"positive_amount", 14}, {"has_currency", 4}, {"schema", 1}},
				Sample:   []string{"a4", "a5", "a6", "a7", "a8", "c1", "c2", "c3"},
				BySink: map[string]map[dqaudit.Outcome]int64{
					"pg": {"pass": 150, "reject": 13, "warn": 4, "duplicate": 2},
					"s3": {"pass": 110, "reject": 2}},
				Judged: map[dqaudit.Outcome]int64{"pass": 260, "reject": 15, "warn": 4, "duplicate": 2}},
		},
		SkipQuarantine: []dqaudit.SkippedRecovery{
			{Sink: "pg", Ranges: []dqaudit.PosRange{{100, 250}, {300, 400}}, Positions: 250, From: min(0), To: min(2)},
			{Sink: "s3", Ranges: []dqaudit.PosRange{{0, 10}}, Positions: 10, From: min(3), To: min(4)},
		},
	}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("summary\n%+v\nwant\n%+v", s, want)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back dqaudit.Summary
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, want) {
		t.Fatalf("JSON round trip: %v\n%s", err, b)
	}
}

func TestSummaryText(t *testing.T) {
	var b strings.Builder
	if err := dqaudit.Summarise(summaryEntries()).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := `dq-audit: 9 entries, windows 2026-03-04T05:00:00Z to 2026-03-04T05:04:00Z

stream orders, contract orders@2: 1 windows, 2026-03-04T05:01:00Z to 2026-03-04T05:02:00Z, sinks pg
  outcomes:  pass 5, warn 0, reject 0, duplicate 0

stream orders, contract orders@3: 2 windows, 2026-03-04T05:00:00Z to 2026-03-04T05:03:00Z, sinks pg, s3
  outcomes:  pass 260, warn 4, reject 15, duplicate 2
    pg:  pass 150, warn 4, reject 13, duplicate 2
    s3:  pass 110, warn 0, reject 2, duplicate 0
  rejected by code:  dq 14, contract 1
  top rules:  positive_amount 14, has_currency 4, schema 1
  sample rejected ids:  a4 a5 a6 a7 a8 c1 c2 c3

recovered in skip-quarantine mode (their rejects are not in the quarantine view; raw keeps them):
  sink pg: positions [100, 250) [300, 400), 250 in all, 2026-03-04T05:00:00Z to 2026-03-04T05:02:00Z
  sink s3: positions [0, 10), 10 in all, 2026-03-04T05:03:00Z to 2026-03-04T05:04:00Z
`
	if b.String() != want {
		t.Fatalf("text\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	if err := dqaudit.Summarise(nil).WriteText(&b); err != nil || b.String() != "dq-audit: no entries\n" {
		t.Fatalf("empty: %q, %v", b.String(), err)
	}
}

// Entries that name their records are counted by record: a batch judged
// again (after a crash) counts once, by its latest verdict, per sink.
func TestSummariseCountsEachRecordOnce(t *testing.T) {
	t0 := time.Date(2026, 3, 4, 5, 0, 0, 0, time.UTC)
	entry := func(min int, sinkName string, obs ...dqaudit.Obs) dqaudit.Entry {
		c := newClock()
		w := &memWriter{}
		tr := dqaudit.New(dqaudit.Options{Writer: w, Now: c.Now})
		if err := tr.Append(context.Background(), []dqaudit.Batch{{Stream: "orders", Sink: sinkName, Contract: "orders@3", Obs: obs}}); err != nil {
			t.Fatal(err)
		}
		closeTrail(t, tr)
		e := w.got()[0]
		e.From, e.To = t0.Add(time.Duration(min)*time.Minute), t0.Add(time.Duration(min+1)*time.Minute)
		return e
	}
	pass := func(n int) dqaudit.Obs { return dqaudit.Obs{Outcome: dqaudit.Passed, ID: id(n)} }
	dup := func(n int) dqaudit.Obs { return dqaudit.Obs{Outcome: dqaudit.Duplicate, ID: id(n)} }
	rej := func(n int) dqaudit.Obs {
		return dqaudit.Obs{Outcome: dqaudit.Rejected, Code: "dq", Rule: "positive_amount", ID: id(n)}
	}
	warn := func(n int) dqaudit.Obs {
		return dqaudit.Obs{Outcome: dqaudit.Warned, Warned: []string{"small"}, ID: id(n)}
	}
	es := []dqaudit.Entry{
		entry(0, "pg", pass(1), rej(2), warn(3), dup(4)),
		entry(0, "pg", pass(5), rej(6)),
		// A crash: the second batch and a part of the first judged again;
		// record 4's claim had expired, so it passes now.
		entry(1, "pg", warn(3), pass(4), pass(5), rej(6), pass(7)),
		entry(1, "s3", pass(1), rej(2)),
		// An entry of an older version: counts only.
		{Kind: "outcomes", Stream: "orders", Sink: "s3", Contract: "orders@3", From: t0, To: t0.Add(time.Minute),
			Outcomes: map[dqaudit.Outcome]int64{"pass": 10}},
	}
	s := dqaudit.Summarise(es)
	if len(s.Streams) != 1 {
		t.Fatalf("%+v", s)
	}
	st := s.Streams[0]
	wantOut := map[dqaudit.Outcome]int64{"pass": 15, "warn": 1, "reject": 3}
	wantPG := map[dqaudit.Outcome]int64{"pass": 4, "warn": 1, "reject": 2}
	wantJudged := map[dqaudit.Outcome]int64{"pass": 16, "warn": 2, "reject": 4, "duplicate": 1}
	if !reflect.DeepEqual(st.Outcomes, wantOut) || !reflect.DeepEqual(st.BySink["pg"], wantPG) ||
		!reflect.DeepEqual(st.Judged, wantJudged) || st.Rejudged != 4 || st.Codes["dq"] != 3 {
		t.Fatalf("outcomes %v (want %v), pg %v (want %v), judged %v (want %v), rejudged %d (want 4), codes %v",
			st.Outcomes, wantOut, st.BySink["pg"], wantPG, st.Judged, wantJudged, st.Rejudged, st.Codes)
	}
	if !reflect.DeepEqual(st.TopRules, []dqaudit.RuleCount{{"positive_amount", 3}, {"small", 1}}) {
		t.Fatalf("rules %v", st.TopRules)
	}
	var b strings.Builder
	if err := s.WriteText(&b); err != nil || !strings.Contains(b.String(), "(4 judgements of records judged before") {
		t.Fatalf("text %v:\n%s", err, b.String())
	}
}
