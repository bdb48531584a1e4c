package systest

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/dqaudit"
	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// ctWeights is TestContractOutcomes' mix, by ctKind: about half clean.
var ctWeights = [ctKinds]int{ctGood: 35, ctWarn: 15, ctNotJSON: 10, ctWrongType: 10, ctMissing: 10, ctRule: 20}

// TestContractOutcomes: a Kafka topic read by a [[source]] with a
// contract (a JSON Schema, a natural key, a fail rule and a warn rule)
// and two Postgres secondaries, one quarantining to its NDJSON directory,
// the other to a Postgres quarantine table. A seeded mix of good,
// warn-only, undecodable, schema-violating and rule-failing records is
// produced. Raw holds every record; each table exactly the clean ones
// (pass and warn) by id; each quarantine every reject once with its code,
// stage check, the contract, the rule and the error; the metrics count
// each outcome once per sink; and after a graceful stop `weir dq` reports
// the same counts.
func TestContractOutcomes(t *testing.T) {
	const (
		topic, group, stream = "orders", "weir-contracts", "orders"
		n, seed              = 600, 12
		contract             = stream + "@3"
	)
	c, cl := startKafka(t, topic, 3)
	pgNDJSON, pgQ := newPGTable(t, "weir_ct"), newPGTable(t, "weir_ctq")
	qtable := newQuarantineTable(t, pgQ.conn)
	cfg := writeConfig(t, kafkaSourceTOML(stream, group, topic, c.ListenAddrs())+
		namedPGSecondaryTOML("pg", pgNDJSON.dsn, pgNDJSON.table, "", "")+
		namedPGSecondaryTOML("pgq", pgQ.dsn, pgQ.table,
			fmt.Sprintf("quarantine_postgres_url = %q\nquarantine_table = %q", pgQ.dsn, qtable), "")+
		contractTOML(t, stream, "3")+"\n[dq_audit]\nwindow = \"1s\"\n")
	d := newDaemon(t, "--config", cfg, "--coverage-flush-interval", "50ms")
	d.start()

	recs := ctMix(seed, n, "k", ctWeights)
	want := countCT(recs)
	t.Logf("produced %d records (seed %d): %v, rejects by code %v", n, seed, want.outcomes, want.codes)
	// In two halves, the second a dq-audit window after the first was
	// judged, so the trail holds more than one window.
	caughtUp := func(n int) map[string]float64 {
		return d.waitScrape("every record in raw, both secondaries caught up", 60*time.Second, func(m map[string]float64) bool {
			return written(m) >= float64(n) && m[`weir_secondary_coverage_end{sink="pg"}`] >= float64(n) &&
				m[`weir_secondary_coverage_end{sink="pgq"}`] >= float64(n) && m["weir_recovery_backlog"] == 0
		})
	}
	produceCT(t, cl, recs[:n/2])
	caughtUp(n / 2)
	time.Sleep(1100 * time.Millisecond)
	produceCT(t, cl, recs[n/2:])
	m := caughtUp(n)

	byPayload := ctByPayload(recs)
	raw := idsByPayload(t, d.outDir())
	if len(raw) != n {
		t.Errorf("raw holds %d distinct payloads, want all %d", len(raw), n)
	}
	for p := range byPayload {
		if _, ok := raw[p]; !ok {
			t.Fatalf("raw lacks %q", p)
		}
	}
	for _, db := range []*pgTable{pgNDJSON, pgQ} {
		checkCleanTable(t, db, byPayload, raw)
	}
	rejects := int(want.outcomes[dqaudit.Rejected])
	checkQuarantineDir(t, filepath.Join(d.dir, "quarantine", "pg"), "pg", contract, rejects, byPayload, raw)
	checkQuarantineTable(t, pgQ, qtable, "pgq", contract, rejects, byPayload, raw)
	checkContractMetrics(t, m, stream, want, 2)

	if err := d.stop(30 * time.Second); err != nil {
		t.Fatalf("graceful stop: %v\n%s", err, tail(d.log.String(), 4000))
	}
	checkDQSummary(t, weirDQ(t, filepath.Join(d.dir, "dq-audit")), stream, contract, want, "pg", "pgq")
}

// produceCT produces recs to the client's topic, 50 to a call.
func produceCT(t *testing.T, cl *kgo.Client, recs []ctRecord) {
	t.Helper()
	ctx := ctxTimeout(t, 30*time.Second)
	for i := 0; i < len(recs); i += 50 {
		var batch []*kgo.Record
		for _, r := range recs[i:min(i+50, len(recs))] {
			batch = append(batch, &kgo.Record{Value: []byte(r.payload)})
		}
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
}

// checkCleanTable: the secondary's table holds exactly the records the
// contract passes (pass or warn), each once and under its raw id.
func checkCleanTable(t *testing.T, db *pgTable, want map[string]ctRecord, raw map[string]sink.RecordID) {
	t.Helper()
	rows := pgRows(t, db.conn, db.table)
	clean := 0
	for p, r := range want {
		ids := rows[p]
		if r.outcome == dqaudit.Rejected {
			if len(ids) > 0 {
				t.Errorf("%s holds %q, which the contract rejects (%s/%s)", db.table, p, r.code, r.rule)
			}
			continue
		}
		clean++
		if len(ids) != 1 || ids[0] != raw[p] {
			t.Errorf("%s: %q under ids %v, want once under %v", db.table, p, ids, raw[p])
		}
	}
	if len(rows) != clean {
		t.Errorf("%s holds %d payloads, want the %d clean ones", db.table, len(rows), clean)
	}
}

// checkQuarantineDir: the secondary's NDJSON quarantine holds each
// reject once, under its raw id, with its verdict.
func checkQuarantineDir(t *testing.T, dir, sinkName, contract string, rejects int, want map[string]ctRecord, raw map[string]sink.RecordID) {
	t.Helper()
	got := waitQuarantineDir(t, dir, rejects, 15*time.Second)
	seen := map[string]bool{}
	for _, e := range got {
		p := e.Record.Payload
		if seen[p] {
			t.Errorf("quarantine %s holds %q twice", dir, p)
		}
		seen[p] = true
		if e.Sink != sinkName || e.Record.ID != raw[p].String() || e.Record.PayloadEncoding != "utf8" {
			t.Errorf("quarantine entry %+v: want sink %s, id %v", e, sinkName, raw[p])
		}
		checkRejection(t, "quarantine "+sinkName, want[p], e.ReasonCode, e.Stage, e.Component, e.Rule, e.Error, contract)
	}
	if len(got) != rejects {
		t.Errorf("quarantine %s holds %d records, want %d", dir, len(got), rejects)
	}
}

// checkQuarantineTable: the Postgres quarantine table holds each reject
// once, under its raw id and with its original bytes, with its verdict.
func checkQuarantineTable(t *testing.T, db *pgTable, table, sinkName, contract string, rejects int, want map[string]ctRecord, raw map[string]sink.RecordID) {
	t.Helper()
	rows := waitQuarantineRows(t, db.conn, table, rejects, 15*time.Second)
	seen := map[string]bool{}
	for _, r := range rows {
		p := string(r.payload)
		if seen[p] {
			t.Errorf("quarantine table holds %q twice", p)
		}
		seen[p] = true
		if r.sink != sinkName || r.id != raw[p] {
			t.Errorf("quarantine row for %q: sink %s id %v, want %s %v", p, r.sink, r.id, sinkName, raw[p])
		}
		checkRejection(t, "quarantine table", want[p], r.code, r.stage, r.component, r.rule, r.err, contract)
	}
	if len(rows) != rejects {
		t.Errorf("quarantine table holds %d rows, want %d", len(rows), rejects)
	}
}

// checkContractMetrics: weir_contract_records_total by outcome and code,
// weir_contract_rule_failures_total by rule and
// weir_quarantined_records_total by code count every record once per
// sink (sinks of them).
func checkContractMetrics(t *testing.T, m map[string]float64, stream string, want ctCounts, sinks int) {
	t.Helper()
	src := fmt.Sprintf("source=%q", stream)
	for _, o := range []dqaudit.Outcome{dqaudit.Passed, dqaudit.Warned, dqaudit.Rejected, dqaudit.Duplicate} {
		got := sumWhere(m, "weir_contract_records_total", src, fmt.Sprintf("outcome=%q", o))
		if w := float64(want.outcomes[o]) * float64(sinks); got != w {
			t.Errorf("weir_contract_records_total{outcome=%q} = %v, want %v", o, got, w)
		}
	}
	for _, code := range []string{"decode", "contract", "dq"} {
		w := float64(want.codes[code]) * float64(sinks)
		if got := sumWhere(m, "weir_contract_records_total", src, `outcome="reject"`, fmt.Sprintf("code=%q", code)); got != w {
			t.Errorf("weir_contract_records_total{outcome=\"reject\",code=%q} = %v, want %v", code, got, w)
		}
		if got := sumWhere(m, "weir_quarantined_records_total", fmt.Sprintf("code=%q", code)); got != w {
			t.Errorf("weir_quarantined_records_total{code=%q} = %v, want %v", code, got, w)
		}
	}
	for rule, n := range want.rules {
		if got := sumWhere(m, "weir_contract_rule_failures_total", src, fmt.Sprintf("rule=%q", rule)); got != float64(n)*float64(sinks) {
			t.Errorf("weir_contract_rule_failures_total{rule=%q} = %v, want %v", rule, got, n*int64(sinks))
		}
	}
	if got := sum(m, "weir_secondary_quarantine_shed_records_total"); got != 0 {
		t.Errorf("quarantine shed %v records", got)
	}
}

// checkDQSummary: `weir dq` reports the stream's outcomes, codes and
// rules exactly, per sink and summed over the sinks.
func checkDQSummary(t *testing.T, s dqaudit.Summary, stream, contract string, want ctCounts, sinks ...string) {
	t.Helper()
	if len(s.Streams) != 1 || s.Streams[0].Stream != stream || s.Streams[0].Contract != contract {
		t.Fatalf("weir dq: streams %+v, want one: %s under %s", s.Streams, stream, contract)
	}
	st := s.Streams[0]
	times := func(m map[dqaudit.Outcome]int64) map[dqaudit.Outcome]int64 {
		out := map[dqaudit.Outcome]int64{}
		for k, v := range m {
			out[k] = v * int64(len(sinks))
		}
		return out
	}
	if !maps.Equal(nonZero(st.Outcomes), times(want.outcomes)) {
		t.Errorf("weir dq: outcomes %v, want %v", st.Outcomes, times(want.outcomes))
	}
	for _, name := range sinks {
		if !maps.Equal(nonZero(st.BySink[name]), want.outcomes) {
			t.Errorf("weir dq: sink %s: outcomes %v, want %v", name, st.BySink[name], want.outcomes)
		}
	}
	for code, n := range want.codes {
		if st.Codes[code] != n*int64(len(sinks)) {
			t.Errorf("weir dq: code %s: %d, want %d", code, st.Codes[code], n*int64(len(sinks)))
		}
	}
	rules := map[string]int64{}
	for _, r := range st.TopRules {
		rules[r.Rule] = r.Count
	}
	for rule, n := range want.rules {
		if rules[rule] != n*int64(len(sinks)) {
			t.Errorf("weir dq: rule %s: %d, want %d", rule, rules[rule], n*int64(len(sinks)))
		}
	}
	if st.Windows < 2 {
		t.Errorf("weir dq: %d windows, want 2 or more", st.Windows)
	}
	if len(st.Sample) == 0 {
		t.Errorf("weir dq: no sample of rejected ids")
	}
	t.Logf("weir dq: %d entries over %d windows: %v, codes %v, rules %v", s.Entries, st.Windows, st.Outcomes, st.Codes, st.TopRules)
}

// nonZero is m without its zero counts.
func nonZero[K comparable](m map[K]int64) map[K]int64 {
	out := map[K]int64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// TestQuarantineStallNeverSlowsCleanPath: a Postgres secondary behind a
// socket contract that rejects every other record, its quarantine in a
// Postgres table reached through a proxy, its lane small (1024 records,
// 256 KiB) and its batches of 200. The same N records are pushed with the
// quarantine healthy and with it stalled (the proxy stops reading), in
// turns, timing each run until the secondary's coverage reaches raw's
// end. With quarantine healthy every reject reaches the table or is
// counted as shed; stalled, the lane sheds; the clean throughput stalled is within
// 10 % of the healthy one (the best of three runs each: the runs
// share two cores with the rest of the test suite); every clean
// record reaches the table; and the daemon stops within its shutdown
// timeout with quarantine still stalled.
func TestQuarantineStallNeverSlowsCleanPath(t *testing.T) {
	const n, shutdown = 8000, 5 * time.Second
	db := newPGTable(t, "weir_qs")
	qtable := newQuarantineTable(t, db.conn)
	cfg := writeConfig(t, pgSecondaryTOML(db.dsn, db.table, fmt.Sprintf(
		"quarantine_postgres_url = %q\nquarantine_table = %q\nquarantine_buffer = 1024\nquarantine_buffer_bytes = \"256KiB\"",
		db.via, qtable), "batch_records = 200")+contractTOML(t, "socket", "1"))
	d := newDaemon(t, "--config", cfg, "--coverage-flush-interval", "50ms", "--shutdown-timeout", shutdown.String(),
		"--sink-file-batch-records", "200")
	d.start()
	s := &stallRuns{t: t, d: d, n: n, c: dialClient(t, d.socket)}

	var healthy, stalled []time.Duration
	var clean []string
	const rounds = 3
	for i := range rounds {
		shed := s.shed()
		took, recs := s.run(fmt.Sprintf("a%d", i))
		healthy, clean = append(healthy, took), append(clean, cleanPayloads(recs)...)
		s.waitQuarantined(db, qtable, fmt.Sprintf("a%d", i), n/2, shed)
		shed = s.shed()
		db.proxy.Stall()
		took, recs = s.run(fmt.Sprintf("b%d", i))
		stalled, clean = append(stalled, took), append(clean, cleanPayloads(recs)...)
		if s.shed() == shed {
			t.Errorf("run b%d: quarantine stalled, and nothing was shed", i)
		}
		if i < rounds-1 {
			db.proxy.Resume()
		}
	}
	best := func(ds []time.Duration) time.Duration { return slices.Min(ds) }
	rate := func(d time.Duration) float64 { return float64(n/2) / d.Seconds() }
	a, b := rate(best(healthy)), rate(best(stalled))
	t.Logf("clean records/s into the secondary (%d records a run, half rejected): quarantine healthy %.0f (runs %v), stalled %.0f (runs %v); shed %v",
		n, a, healthy, b, stalled, s.shed())
	if b < 0.9*a {
		t.Errorf("clean throughput fell with quarantine stalled: %.0f/s → %.0f/s", a, b)
	}
	checkCleanRows(t, db, clean)
	start := time.Now()
	if err := d.stop(shutdown + 10*time.Second); err != nil {
		t.Fatalf("stop with quarantine stalled: %v after %v\n%s", err, time.Since(start), tail(d.log.String(), 4000))
	}
	if took := time.Since(start); took > shutdown+2*time.Second {
		t.Errorf("stop with quarantine stalled took %v, shutdown_timeout is %v", took, shutdown)
	}
	t.Logf("stopped in %v with quarantine stalled", time.Since(start))
}

// checkCleanRows: the table holds every clean payload, and nothing else.
func checkCleanRows(t *testing.T, db *pgTable, clean []string) {
	t.Helper()
	rows := pgRows(t, db.conn, db.table)
	for _, p := range clean {
		if len(rows[p]) == 0 {
			t.Fatalf("clean record %q is not in the secondary's table", p)
		}
	}
	if len(rows) != len(clean) {
		t.Errorf("the secondary's table holds %d payloads, want the %d clean ones", len(rows), len(clean))
	}
}

// stallRuns pushes runs of records through a daemon and times each.
type stallRuns struct {
	t      *testing.T
	d      *daemon
	c      *client.Client
	n      int
	pushed int
}

// run pushes n records tagged tag, half of them failing the contract's
// fail rule, and returns how long until the secondary's coverage reached
// raw's end, with the records.
func (s *stallRuns) run(tag string) (time.Duration, []ctRecord) {
	s.t.Helper()
	recs := make([]ctRecord, s.n)
	for i := range recs {
		recs[i] = ctMake([]ctKind{ctGood, ctRule}[i%2], tag, i)
	}
	ctx := ctxTimeout(s.t, 30*time.Second)
	start := time.Now()
	for i := 0; i < len(recs); i += 100 {
		batch := make([][]byte, 0, 100)
		for _, r := range recs[i:min(i+100, len(recs))] {
			batch = append(batch, []byte(r.payload))
		}
		if err := s.c.PushBatch(ctx, batch, client.Durable); err != nil {
			s.t.Fatalf("run %s: push: %v", tag, err)
		}
	}
	s.pushed += len(recs)
	for {
		m, err := s.d.tryScrape()
		end := m[`weir_secondary_coverage_end{sink="pg"}`]
		if err == nil && end >= float64(s.pushed) {
			return time.Since(start), recs
		}
		if ctx.Err() != nil {
			s.t.Fatalf("run %s: the secondary's coverage at %.0f of %d after 30s (%v)\n%s", tag, end, s.pushed, err, tail(s.d.log.String(), 4000))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// waitQuarantined waits until each of the n rejects of the run tagged tag
// is in the quarantine table or counted as shed since the shed count was
// shed0.
func (s *stallRuns) waitQuarantined(db *pgTable, table, tag string, n int, shed0 float64) {
	s.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	mark := fmt.Sprintf(`"tag":%q`, tag)
	for {
		got := 0
		for _, r := range pgQuarantineRows(s.t, db.conn, table) {
			if strings.Contains(string(r.payload), mark) {
				got++
			}
		}
		shed := int(s.shed() - shed0)
		if got+shed == n {
			s.t.Logf("run %s: %d rejects in the quarantine table, %d shed", tag, got, shed)
			return
		}
		if got+shed > n || time.Now().After(deadline) {
			s.t.Fatalf("run %s: the quarantine table holds %d of its %d rejects, %d shed", tag, got, n, shed)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// shed is weir_secondary_quarantine_shed_records_total.
func (s *stallRuns) shed() float64 {
	return sum(s.d.scrape(), "weir_secondary_quarantine_shed_records_total")
}

// cleanPayloads are the payloads of recs the contract passes.
func cleanPayloads(recs []ctRecord) []string {
	var out []string
	for _, r := range recs {
		if r.outcome != dqaudit.Rejected {
			out = append(out, r.payload)
		}
	}
	return out
}

// dialClient connects a producer to socket, closed at the end of the
// test.
func dialClient(t *testing.T, socket string) *client.Client {
	t.Helper()
	c, err := client.Dial(ctxTimeout(t, 10*time.Second), socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// TestSingleSinkRejectsGoToDeadLetter: no secondaries — the one file sink
// behind a socket contract. A seeded mix of records is pushed across a
// kill -9 and a restart (the client resends what was not acked). In the
// end every acked record is where its verdict sends it: the clean ones
// (pass and warn) in the sink and nowhere else, the rejects in the
// drain's dead letter — as `weir deadletter show` prints it — with their
// code, stage check, the contract and the rule, and not in the sink.
func TestSingleSinkRejectsGoToDeadLetter(t *testing.T) {
	const n, seed, contract = 3000, 7, "socket@2"
	cfg := writeConfig(t, contractTOML(t, "socket", "2"))
	d := newDaemon(t, "--config", cfg, "--shards", "2", "--segment-max-age", "100ms")
	d.start()
	recs := ctMix(seed, n, "s", ctWeights)
	byPayload := ctByPayload(recs)
	payloads := make([][]byte, n)
	for i, r := range recs {
		payloads[i] = []byte(r.payload)
	}

	ctx := ctxTimeout(t, 90*time.Second)
	c, l, done := pushInBackground(ctx, t, d, payloads, 0)
	killMidPush(t, d, n/10, func() bool { return l.ackedCount() < n })
	<-done
	if got := l.ackedCount(); got != n || len(l.nacked) > 0 || l.other > 0 {
		t.Fatalf("acked %d of %d; nacks %v; other errors %d", got, n, l.nacked, l.other)
	}

	good, bad := map[string]bool{}, map[string]bool{}
	for _, r := range recs {
		if r.outcome == dqaudit.Rejected {
			bad[r.payload] = true
		} else {
			good[r.payload] = true
		}
	}
	inSink := waitDelivered(t, d, good, 60*time.Second)
	dead := waitDeadLettered(t, d, bad, 30*time.Second)
	checkByVerdict(t, byPayload, inSink, dead, c.Resent())

	entries := weirDeadLetters(t, d.wabDir())
	seen := map[string]bool{}
	for _, e := range entries {
		seen[e.payload] = true
		checkRejection(t, "deadletter show", byPayload[e.payload], e.code, e.stage, e.component, e.rule, e.reason, contract)
	}
	if len(seen) != len(bad) {
		t.Errorf("weir deadletter show prints %d distinct records, want the %d rejects", len(seen), len(bad))
	}
}

// checkByVerdict: the sink holds exactly the clean payloads, the dead
// letter exactly the rejected ones; copies (a kill's redelivery) are
// logged.
func checkByVerdict(t *testing.T, want map[string]ctRecord, inSink, dead map[string]int, resent uint64) {
	t.Helper()
	var clean, sinkDups, deadDups int
	for p, n := range inSink {
		if r, ok := want[p]; !ok || r.outcome == dqaudit.Rejected {
			t.Errorf("the sink holds %q (%s/%s)", p, r.code, r.rule)
		}
		sinkDups += n - 1
	}
	for p, n := range dead {
		if r, ok := want[p]; !ok || r.outcome != dqaudit.Rejected {
			t.Errorf("the dead letter holds %q, which the contract passes", p)
		}
		deadDups += n - 1
	}
	for _, r := range want {
		if r.outcome != dqaudit.Rejected {
			clean++
		}
	}
	if len(inSink) != clean || len(dead) != len(want)-clean {
		t.Errorf("sink %d payloads, dead letter %d; want %d and %d", len(inSink), len(dead), clean, len(want)-clean)
	}
	t.Logf("%d records across a kill -9 (%d resent): %d in the sink (%d copies), %d dead-lettered (%d copies)",
		len(want), resent, len(inSink), sinkDups, len(dead), deadDups)
}

// waitDeadLettered waits until every payload of want is in d's dead
// letter and returns what it holds, by payload.
func waitDeadLettered(t *testing.T, d *daemon, want map[string]bool, timeout time.Duration) map[string]int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, err := readDeadLetterPayloads(d.wabDir())
		missing := 0
		for p := range want {
			if got[p] == 0 {
				missing++
			}
		}
		if err == nil && missing == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rejects not in the dead letter after %v (last error %v)\n%s", missing, len(want), timeout, err,
				tail(d.log.String(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readDeadLetterPayloads counts the payloads in a buffer's dead letter.
func readDeadLetterPayloads(wabDir string) (map[string]int, error) {
	files, err := drain.ListDeadLetters(vfs.OS, wabDir)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, f := range files {
		_, recs, err := drain.ReadDeadLetter(vfs.OS, f.Path)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			out[string(r.Payload)]++
		}
	}
	return out, nil
}
