package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/dqaudit"
	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// ctSchema is the contract tests' JSON Schema: an object with an integer
// id, a number amount and an integer qty.
const ctSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["id", "amount", "qty"],
  "properties": {
    "id": {"type": "integer"},
    "tag": {"type": "string"},
    "amount": {"type": "number"},
    "qty": {"type": "integer"}
  }
}`

// The contract tests' rules: one fail, one warn.
const (
	ctFailRule = "positive_amount"
	ctFailExpr = "record.amount > 0"
	ctWarnRule = "small_qty"
	ctWarnExpr = "record.qty < 100"
)

// contractTOML is a [[contract]] for stream at version: ctSchema (written
// to a file of the test's), the natural key /id and the two rules.
func contractTOML(t testing.TB, stream, version string) string {
	t.Helper()
	schema := filepath.Join(t.TempDir(), "orders.schema.json")
	if err := os.WriteFile(schema, []byte(ctSchema), 0o600); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`
[[contract]]
source = %q
version = %q
schema_file = %q
natural_key = ["/id"]
  [[contract.rule]]
  name = %q
  expr = %q
  severity = "fail"
  [[contract.rule]]
  name = %q
  expr = %q
  severity = "warn"
`, stream, version, schema, ctFailRule, ctFailExpr, ctWarnRule, ctWarnExpr)
}

// ctKind is a kind of record the contract tests produce.
type ctKind int

const (
	ctGood      ctKind = iota // passes
	ctWarn                    // fails the warn rule only
	ctNotJSON                 // undecodable
	ctWrongType               // amount is a string
	ctMissing                 // no amount
	ctRule                    // fails the fail rule
	ctKinds
)

// ctRecord is one produced record and the verdict its contract owes it.
type ctRecord struct {
	payload    string
	outcome    dqaudit.Outcome
	code, rule string // a reject's reason code and rule
	errHas     string // a part of a reject's error ("": any non-empty one)
}

// ctMake is record i of kind k, its payload unique by tag and i.
func ctMake(k ctKind, tag string, i int) ctRecord {
	body := func(amount string, qty int) string {
		return fmt.Sprintf(`{"id":%d,"tag":%q,"amount":%s,"qty":%d}`, i, tag, amount, qty)
	}
	switch k {
	case ctWarn:
		return ctRecord{payload: body(strconv.Itoa(i%900+1), 100+i%50), outcome: dqaudit.Warned}
	case ctNotJSON:
		p := fmt.Sprintf("not json %s-%d", tag, i)
		if i%2 == 1 {
			p = fmt.Sprintf(`{"id":%d,"tag":%q,"amount":`, i, tag) // cut short
		}
		return ctRecord{payload: p, outcome: dqaudit.Rejected, code: "decode", rule: "decode"}
	case ctWrongType:
		return ctRecord{payload: body(strconv.Quote(strconv.Itoa(i)), 1), outcome: dqaudit.Rejected,
			code: "contract", rule: "schema", errHas: "/properties/amount/type"}
	case ctMissing:
		return ctRecord{payload: fmt.Sprintf(`{"id":%d,"tag":%q,"qty":1}`, i, tag), outcome: dqaudit.Rejected,
			code: "contract", rule: "schema", errHas: "/required"}
	case ctRule:
		return ctRecord{payload: body(strconv.Itoa(-(i % 50)), 1), outcome: dqaudit.Rejected,
			code: "dq", rule: ctFailRule, errHas: ctFailExpr + " is false"}
	}
	return ctRecord{payload: body(strconv.Itoa(i%900+1), i%99+1), outcome: dqaudit.Passed}
}

// ctMix is n records of kinds drawn by weight (one per ctKind) from a
// generator seeded with seed, in the order drawn.
func ctMix(seed uint64, n int, tag string, weights [ctKinds]int) []ctRecord {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	total := 0
	for _, w := range weights {
		total += w
	}
	out := make([]ctRecord, n)
	for i := range out {
		x, k := rng.IntN(total), ctKind(0)
		for ; x >= weights[k]; k++ {
			x -= weights[k]
		}
		out[i] = ctMake(k, tag, i)
	}
	return out
}

// ctByPayload indexes recs by payload.
func ctByPayload(recs []ctRecord) map[string]ctRecord {
	out := make(map[string]ctRecord, len(recs))
	for _, r := range recs {
		out[r.payload] = r
	}
	return out
}

// ctCounts are the outcomes a stream's records are owed: by outcome, by
// reject code, and by rule (rejects and warns).
type ctCounts struct {
	outcomes map[dqaudit.Outcome]int64
	codes    map[string]int64
	rules    map[string]int64
}

func countCT(recs []ctRecord) ctCounts {
	c := ctCounts{outcomes: map[dqaudit.Outcome]int64{}, codes: map[string]int64{}, rules: map[string]int64{}}
	for _, r := range recs {
		c.outcomes[r.outcome]++
		switch r.outcome {
		case dqaudit.Rejected:
			c.codes[r.code]++
			c.rules[r.rule]++
		case dqaudit.Warned:
			c.rules[ctWarnRule]++
		}
	}
	return c
}

// checkRejection checks one lane's record of a rejected payload: the
// verdict's code and rule, stage check, the contract as the component and
// an error that says why.
func checkRejection(t *testing.T, where string, want ctRecord, code, stage, component, rule, errText, wantComponent string) {
	t.Helper()
	if want.outcome != dqaudit.Rejected {
		t.Errorf("%s holds %q, which the contract passes (%s)", where, want.payload, want.outcome)
		return
	}
	if code != want.code || stage != "check" || component != wantComponent || rule != want.rule ||
		errText == "" || !strings.Contains(errText, want.errHas) {
		t.Errorf("%s: %q: code=%s stage=%s component=%s rule=%s error=%q; want code=%s stage=check component=%s rule=%s error with %q",
			where, want.payload, code, stage, component, rule, errText, want.code, wantComponent, want.rule, want.errHas)
	}
}

// waitQuarantineDir waits until dir holds n quarantine entries (the lane
// writes on its own goroutine) and returns them.
func waitQuarantineDir(t *testing.T, dir string, n int, timeout time.Duration) []quarantine.Entry {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, err := quarantine.ReadDir(vfs.OS, dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pgQuarantineRow is a row of a Postgres quarantine table.
type pgQuarantineRow struct {
	sink, code, stage, component, rule, err string
	payload                                 []byte
	id                                      sink.RecordID
}

// newQuarantineTable names a quarantine table for the test and drops it
// at the end.
func newQuarantineTable(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	table := testenv.TableName("weir_quar")
	t.Cleanup(func() {
		conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize())
	})
	return table
}

// pgQuarantineRows reads a quarantine table (none while it does not
// exist).
func pgQuarantineRows(t *testing.T, conn *pgx.Conn, table string) []pgQuarantineRow {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT sink, reason_code, stage, component, rule, error, payload, record_id FROM "+
		pgx.Identifier{table}.Sanitize())
	if err != nil {
		return nil // not created yet
	}
	defer rows.Close()
	var out []pgQuarantineRow
	for rows.Next() {
		var r pgQuarantineRow
		var id [16]byte
		if err := rows.Scan(&r.sink, &r.code, &r.stage, &r.component, &r.rule, &r.err, &r.payload, &id); err != nil {
			t.Fatal(err)
		}
		r.id = id
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitQuarantineRows waits until table holds n rows and returns them.
func waitQuarantineRows(t *testing.T, conn *pgx.Conn, table string, n int, timeout time.Duration) []pgQuarantineRow {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := pgQuarantineRows(t, conn, table)
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// weirDQ runs `weir dq --json` on a trail directory and decodes its
// summary.
func weirDQ(t *testing.T, dir string) dqaudit.Summary {
	t.Helper()
	out, errOut, code := weirCmd(t, nil, "dq", "--json", "--dir", dir)
	if code != 0 {
		t.Fatalf("weir dq: exit %d\n%s\n%s", code, out, errOut)
	}
	var s dqaudit.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("weir dq --json: %v\n%s", err, out)
	}
	return s
}

// dlEntry is one dead-letter record as `weir deadletter show` prints it.
type dlEntry struct {
	code, stage, component, rule, reason, payload string
}

// weirDeadLetters runs `weir deadletter show --all` on a buffer directory
// and parses what it prints of each record.
func weirDeadLetters(t *testing.T, wabDir string) []dlEntry {
	t.Helper()
	out, errOut, code := weirCmd(t, nil, "deadletter", "show", "--wab-dir", wabDir, "--all", "--max-payload", "4096")
	if code != 0 {
		t.Fatalf("weir deadletter show: exit %d\n%s\n%s", code, out, errOut)
	}
	var es []dlEntry
	var cur *dlEntry
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "code="):
			es = append(es, dlEntry{})
			cur = &es[len(es)-1]
			for _, f := range strings.Fields(line) {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "code":
					cur.code = v
				case "stage":
					cur.stage = v
				case "component":
					cur.component = v
				case "rule":
					cur.rule = v
				}
			}
		case cur != nil && strings.HasPrefix(line, "reason: "):
			cur.reason = strings.TrimPrefix(line, "reason: ")
		case cur != nil && strings.HasPrefix(line, "payload: "):
			p, err := strconv.Unquote(strings.TrimPrefix(line, "payload: "))
			if err != nil {
				t.Fatalf("deadletter show: payload line %q: %v", line, err)
			}
			cur.payload = p
		}
	}
	return es
}

// pushInBackground dials d's socket and, on a goroutine, pushes payloads
// (pushAll, resending across restarts) — pausing pace after each hundred,
// when pace is not 0 — and closes the client; done is closed once it is
// over, l holds what the producer was told.
func pushInBackground(ctx context.Context, t *testing.T, d *daemon, payloads [][]byte, pace time.Duration) (c *client.Client, l *ledger, done chan struct{}) {
	t.Helper()
	c, err := client.Dial(ctx, d.socket, client.WithWindow(64), client.WithBackoff(5*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	l, done = newLedger(), make(chan struct{})
	go func() {
		defer close(done)
		step := len(payloads)
		if pace > 0 {
			step = 100
		}
		for i := 0; i < len(payloads); i += step {
			pushAll(ctx, t, c, payloads[i:min(i+step, len(payloads))], 0, l)
			time.Sleep(pace)
		}
		if err := c.Close(ctx); err != nil {
			t.Errorf("client close: %v", err)
		}
	}()
	return c, l, done
}
