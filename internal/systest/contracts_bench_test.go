package systest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/testenv"
)

// BenchmarkContractChecks measures what a stream's contract costs on the
// way from raw to a Postgres secondary, in one run: N JSON orders
// (~256 bytes, all clean, each its own natural key) are pushed once into
// raw; then, for each variant, a new secondary (a new name, so it is
// recovered from position 0, and a new table) is filled from raw by the
// real daemon and its rate taken from weir_secondary_coverage_end between
// 10 % and 100 % of N. Variants: no contract (the baseline), five CEL
// rules alone, a JSON Schema plus the five rules, the same with content dedup in memory, and
// with dedup on a private Redis (one pipelined round trip per batch; the
// benchmark reports the records per round trip it saw). ratio_vs_off is
// each variant's rate over the baseline's rate of the same iteration.
//
//	go test -run '^$' -bench ContractChecks -count 5 ./internal/systest/
//
// WEIR_BENCH_RECORDS sets N (default 200000).
func BenchmarkContractChecks(b *testing.B) {
	n := 200_000
	if s := os.Getenv("WEIR_BENCH_RECORDS"); s != "" {
		fmt.Sscan(s, &n)
	}
	dsn := testenv.Postgres(b)
	redis := testenv.StartRedis(b)
	schema := filepath.Join(b.TempDir(), "order.schema.json")
	if err := os.WriteFile(schema, []byte(benchOrderSchema), 0o600); err != nil {
		b.Fatal(err)
	}
	dir := fillRaw(b, n)
	contracts := map[string]string{
		"off":          "",
		"rules":        benchContract("", ""),
		"schema+rules": benchContract(schema, ""),
		"dedup=memory": benchContract(schema, "[contract.dedup]\nstore = \"memory\"\nwindow = \"10m\"\n"),
		"dedup=redis": benchContract(schema, fmt.Sprintf("[contract.dedup]\nstore = \"redis\"\nredis_url = %q\nredis_prefix = %q\nwindow = \"10m\"\n",
			redis.URL(), fmt.Sprintf("weir:bench:%d:", time.Now().UnixNano()))),
	}
	variants := []string{"off", "rules", "schema+rules", "dedup=memory", "dedup=redis"}
	for i := range b.N {
		rates := map[string]float64{}
		for _, v := range variants {
			rate, perTrip := secondaryFillRate(b, dir, dsn, fmt.Sprintf("c%d_%d", i, len(rates)), contracts[v], n)
			rates[v] = rate
			b.ReportMetric(rate, v+"_rec/s")
			if perTrip > 0 {
				b.ReportMetric(perTrip, v+"_rec/roundtrip")
			}
		}
		for _, v := range variants[1:] {
			b.ReportMetric(rates[v]/rates["off"], v+"_ratio_vs_off")
		}
	}
}

const benchOrderSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["order_id", "amount", "currency", "customer", "ts", "items"],
  "properties": {
    "order_id": {"type": "string", "minLength": 1},
    "amount": {"type": "number"},
    "currency": {"enum": ["EUR", "USD", "GBP"]},
    "customer": {"type": "string"},
    "ts": {"type": "string"},
    "items": {"type": "array", "items": {"type": "object", "required": ["sku", "qty"],
      "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}}}},
    "note": {"type": "string"}
  }
}`

// benchContract is a socket contract with the schema (none when ""),
// five rules and dedup as given.
func benchContract(schema, dedup string) string {
	if schema != "" {
		schema = fmt.Sprintf("schema_file = %q", schema)
	}
	return fmt.Sprintf(`
[[contract]]
source = "socket"
%s
natural_key = ["/order_id"]
unique = true
  [[contract.rule]]
  name = "positive_amount"
  expr = "record.amount > 0"
  [[contract.rule]]
  name = "known_currency"
  expr = "record.currency in ['EUR', 'USD', 'GBP']"
  [[contract.rule]]
  name = "has_items"
  expr = "size(record.items) > 0"
  [[contract.rule]]
  name = "customer_prefix"
  expr = "record.customer.startsWith('c-')"
  [[contract.rule]]
  name = "small_order"
  expr = "record.amount < 100000.0"
  severity = "warn"
%s`, schema, dedup)
}

// fillRaw pushes n orders into a daemon's raw (a file secondary puts raw
// in its positions mode) and stops it; it returns the data directory.
func fillRaw(b *testing.B, n int) string {
	d := newDaemon(b, "--config", writeConfigTB(b, "[sink]\ntype = \"file\"\n[[secondary]]\nname = \"seed\"\ntype = \"file\"\n"))
	d.start()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, d.socket)
	if err != nil {
		b.Fatal(err)
	}
	const frame = 256
	for i := 0; i < n; i += frame {
		batch := make([][]byte, 0, frame)
		for j := i; j < min(i+frame, n); j++ {
			batch = append(batch, fmt.Appendf(nil, `{"order_id":"o-%09d","amount":%d.5,"currency":"EUR","customer":"c-%d","ts":"2026-12-03T10:00:00Z","items":[{"sku":"s-%d","qty":2},{"sku":"s-9","qty":1}],"note":"%s"}`,
				j, 1+j%500, j%1000, j%97, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"))
		}
		if err := c.PushBatch(ctx, batch, client.Durable); err != nil {
			b.Fatal(err)
		}
	}
	c.Close(ctx)
	d.waitScrape("raw holds every record", 5*time.Minute, func(m map[string]float64) bool {
		return m[`weir_secondary_coverage_end{sink="seed"}`] >= float64(n)
	})
	if err := d.stop(time.Minute); err != nil {
		b.Fatal(err)
	}
	return d.dir
}

// secondaryFillRate starts a daemon on dir with a new Postgres secondary
// (name) behind the contract, and returns the rate at which it is
// recovered from raw, and the records per dedup round trip (0 without).
func secondaryFillRate(b *testing.B, dir, dsn, name, contract string, n int) (rate, perTrip float64) {
	table := testenv.TableName("weir_cbench")
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize())
		conn.Close(context.Background())
	}()
	cfg := fmt.Sprintf("[sink]\ntype = \"file\"\n[[secondary]]\nname = \"seed\"\ntype = \"file\"\n"+
		"[[secondary]]\nname = %q\ntype = \"postgres\"\n[secondary.postgres]\ndsn = %q\ntable = %q\n%s", name, dsn, table, contract)
	d := newDaemon(b, "--config", writeConfigTB(b, cfg), "--data-dir", dir, "--log-level", "info")
	d.socket = filepath.Join(dir, "weir.sock")
	d.start()
	defer d.stop(time.Minute)
	cov := fmt.Sprintf(`weir_secondary_coverage_end{sink=%q}`, name)
	type point struct {
		at  time.Time
		cov float64
	}
	var pts []point
	deadline := time.Now().Add(10 * time.Minute)
	var m map[string]float64
	for {
		m = d.scrape()
		pts = append(pts, point{time.Now(), m[cov]})
		if m[cov] >= float64(n) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: secondary at %v of %d after 10 minutes", name, m[cov], n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	i := sort.Search(len(pts), func(i int) bool { return pts[i].cov >= float64(n)/10 })
	last := pts[len(pts)-1]
	rate = (last.cov - pts[i].cov) / last.at.Sub(pts[i].at).Seconds()
	if trips := sum(m, "weir_dedup_store_seconds_count"); trips > 0 {
		perTrip = sum(m, "weir_dedup_lookups_total") / trips
	}
	return rate, perTrip
}
