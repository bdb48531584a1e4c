package systest

import (
	"encoding/base64"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/dqaudit"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// TestDQAuditExactAcrossKill9: producers push a seeded mix of clean,
// warn-only, undecodable, schema-violating and rule-failing records —
// and, after every tenth, a producer's retry of an earlier one (the same
// payload under a new record id) — into a daemon whose Postgres
// secondary is behind a contract with content dedup on Redis. The daemon
// is killed (-9) $WEIR_DQ_KILL_CYCLES times (3) while the push runs, each
// time once the secondary has covered more of raw than before, and
// restarted; the producers resend what was not acked. Once the
// secondary holds all of raw, the dq-audit trail, read by record id with
// the documented rule (a record's latest verdict per sink counts), holds
// for every record of raw exactly the outcome the truth gives it: in the
// table → pass or warn by its payload; not in the table → reject by its
// payload, else duplicate. `weir dq` reports the same counts, and the
// repeats the kills caused show as re-judgements, not as outcomes.
// $WEIR_DQ_RECORDS sets how many distinct records are pushed (6000).
func TestDQAuditExactAcrossKill9(t *testing.T) {
	cycles := envInt(t, "WEIR_DQ_KILL_CYCLES", 3)
	n := envInt(t, "WEIR_DQ_RECORDS", 6000)
	const seed, stream, contract = 23, "socket", "socket@1"
	rs := testenv.StartRedis(t)
	db := newPGTable(t, "weir_dqkill")
	ct := strings.Replace(contractTOML(t, stream, "1"), `natural_key = ["/id"]`, "natural_key = [\"/id\"]\nunique = true", 1) +
		fmt.Sprintf("[contract.dedup]\nstore = \"redis\"\nredis_url = %q\nredis_prefix = %q\nwindow = \"10m\"\n",
			rs.URL(), "weir:systest:"+testenv.Suffix()+":")
	cfg := writeConfig(t, "[sink]\ntype = \"file\"\n"+pgSecondaryTOML(db.dsn, db.table, "", "")+ct)
	d := newDaemon(t, "--config", cfg, "--shards", "2", "--segment-max-age", "100ms", "--coverage-flush-interval", "50ms")
	d.start()

	recs := ctMix(seed, n, "q", ctWeights)
	byPayload := ctByPayload(recs)
	var payloads [][]byte
	retries := 0
	for i, r := range recs {
		payloads = append(payloads, []byte(r.payload))
		if i%10 == 9 {
			payloads = append(payloads, []byte(recs[i-5].payload))
			retries++
		}
	}
	ctx := ctxTimeout(t, 100*time.Second)
	_, l, done := pushInBackground(ctx, t, d, payloads, 15*time.Millisecond)
	start := time.Now()
	var covered float64
	for range cycles {
		covered = killAfterCoverage(t, d, float64(len(payloads)/(2*cycles+2)), covered, func() bool { return l.ackedCount() < n })
	}
	<-done
	if got := l.ackedCount(); got != n || len(l.nacked) > 0 || l.other > 0 {
		t.Fatalf("acked %d of %d payloads; nacks %v; other errors %d", got, n, l.nacked, l.other)
	}
	all := map[string]bool{}
	for p := range byPayload {
		all[p] = true
	}
	waitDelivered(t, d, all, 60*time.Second)
	waitCleanRows(t, d, db, recs, 60*time.Second)
	d.waitScrape("the secondary holds all of raw", 60*time.Second, func(m map[string]float64) bool {
		return m[`weir_secondary_coverage_end{sink="pg"}`] > 0 && m[`weir_secondary_lag_positions{sink="pg"}`] == 0 &&
			m["weir_recovery_backlog"] == 0
	})
	elapsed := time.Since(start)
	if err := d.stop(30 * time.Second); err != nil {
		t.Fatalf("graceful stop: %v\n%s", err, tail(d.log.String(), 4000))
	}

	truth := dqTruth(t, d, db, byPayload)
	entries, err := dqaudit.ReadDir(vfs.OS, filepath.Join(d.dir, "dq-audit"))
	if err != nil {
		t.Fatal(err)
	}
	got, judged := latestVerdicts(t, entries, "pg")
	want := map[dqaudit.Outcome]int64{}
	var wrong []string
	for id, o := range truth {
		want[o]++
		if got[id] != o {
			wrong = append(wrong, fmt.Sprintf("%s: trail %q, truth %q", id, got[id], o))
		}
	}
	for id := range got {
		if _, ok := truth[id]; !ok {
			wrong = append(wrong, fmt.Sprintf("%s: in the trail (%s), not in raw", id, got[id]))
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%d records whose latest verdict in the trail is not their truth, e.g. %v", len(wrong), wrong[:min(len(wrong), 8)])
	}
	if want[dqaudit.Duplicate] == 0 || want[dqaudit.Rejected] == 0 || want[dqaudit.Passed] == 0 {
		t.Errorf("the truth %v lacks an outcome: the run proves less than it should", want)
	}
	s := weirDQ(t, filepath.Join(d.dir, "dq-audit"))
	if len(s.Streams) != 1 || s.Streams[0].Contract != contract || !maps.Equal(s.Streams[0].Outcomes, want) {
		t.Errorf("weir dq: %+v; want %s with outcomes %v", s.Streams, contract, want)
	} else {
		t.Logf("weir dq: outcomes %v, %d judgements in all, %d of them repeats", s.Streams[0].Outcomes, sumCounts(s.Streams[0].Judged), s.Streams[0].Rejudged)
	}
	t.Logf("%d records (%d producer retries) across %d kill -9 cycles in %v: %d record ids in raw; the trail counts each once by id (%d judgements, %d entries)",
		len(payloads), retries, cycles, elapsed.Round(time.Millisecond), len(truth), judged, len(entries))
}

// killAfterCoverage waits until d's secondary "pg" has covered more than
// covered — so that the kill finds judged batches both covered and in
// flight — then kills and restarts d as killMidPush does, once it has
// acked at least min records. It returns the coverage it saw.
func killAfterCoverage(t *testing.T, d *daemon, min, covered float64, running func() bool) float64 {
	t.Helper()
	const cov = `weir_secondary_coverage_end{sink="pg"}`
	covered = d.waitScrape("the secondary past its coverage at the last kill", 60*time.Second,
		func(m map[string]float64) bool { return m[cov] > covered })[cov]
	killMidPush(t, d, min, running)
	return covered
}

// waitCleanRows waits until the table holds every payload of recs the
// contract passes.
func waitCleanRows(t *testing.T, d *daemon, db *pgTable, recs []ctRecord, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		rows := pgRows(t, db.conn, db.table)
		missing := 0
		for _, r := range recs {
			if r.outcome != dqaudit.Rejected && len(rows[r.payload]) == 0 {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d clean records not in the table after %v\n%s", missing, timeout, tail(d.log.String(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dqTruth is the outcome every record of d's raw owes the secondary's
// trail: pass or warn when the table holds it (by id), else reject by
// its payload's verdict, else duplicate — and then the table holds
// another record of its payload.
func dqTruth(t *testing.T, d *daemon, db *pgTable, byPayload map[string]ctRecord) map[sink.RecordID]dqaudit.Outcome {
	t.Helper()
	inTable := map[sink.RecordID]bool{}
	tablePayloads := map[string]bool{}
	for p, ids := range pgRows(t, db.conn, db.table) {
		tablePayloads[p] = true
		for _, id := range ids {
			inTable[id] = true
		}
	}
	truth := map[sink.RecordID]dqaudit.Outcome{}
	for _, line := range rawLines(t, d) {
		r, ok := byPayload[string(line.Payload)]
		switch {
		case !ok:
			t.Fatalf("raw holds %q, never produced", line.Payload)
		case inTable[line.ID] && r.outcome == dqaudit.Rejected:
			t.Errorf("the table holds %q (%s), which the contract rejects", line.Payload, r.rule)
		case inTable[line.ID]:
			truth[line.ID] = r.outcome
		case r.outcome == dqaudit.Rejected:
			truth[line.ID] = dqaudit.Rejected
		case !tablePayloads[string(line.Payload)]:
			t.Errorf("clean %q (id %s) is not in the table under any id", line.Payload, line.ID)
		default:
			truth[line.ID] = dqaudit.Duplicate
		}
	}
	return truth
}

// latestVerdicts is the latest outcome the trail entries give each
// record on its way to sinkName (entries are in the order written), and
// how many judgements they hold in all.
func latestVerdicts(t *testing.T, es []dqaudit.Entry, sinkName string) (map[sink.RecordID]dqaudit.Outcome, int) {
	t.Helper()
	out := map[sink.RecordID]dqaudit.Outcome{}
	judged := 0
	for _, e := range es {
		if e.Kind != dqaudit.KindOutcomes || e.Sink != sinkName {
			continue
		}
		if len(e.Records) == 0 {
			t.Fatalf("an outcomes entry names no records: %+v", e)
		}
		for _, g := range e.Records {
			b, err := base64.StdEncoding.DecodeString(g.IDs)
			if err != nil || len(b)%16 != 0 {
				t.Fatalf("entry ids %q: %v", g.IDs, err)
			}
			for i := 0; i < len(b); i += 16 {
				out[sink.RecordID(b[i:i+16])] = g.Outcome
				judged++
			}
		}
	}
	return out, judged
}

func sumCounts(m map[dqaudit.Outcome]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
