package systest

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
)

// dedupContractTOML is a [[contract]] for stream that declares /id its
// natural key and unique, with content dedup on the Redis server at url,
// its keys under prefix.
func dedupContractTOML(stream, url, prefix string) string {
	return fmt.Sprintf(`
[[contract]]
source = %q
natural_key = ["/id"]
unique = true
[contract.dedup]
store = "redis"
redis_url = %q
redis_prefix = %q
window = "10m"
`, stream, url, prefix)
}

// order is the payload of the order keyed k-<i>; a producer's retry of
// it is the same bytes.
func order(i int) []byte { return fmt.Appendf(nil, `{"id":"k-%04d","amount":%d}`, i, i+1) }

// partitionProducer is a Kafka client that produces each record to the
// partition the record names.
func partitionProducer(t *testing.T, brokers []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceTo produces payloads, in order, to one partition of topic.
func produceTo(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, partition int32, payloads ...[]byte) {
	t.Helper()
	recs := make([]*kgo.Record, len(payloads))
	for i, p := range payloads {
		recs[i] = &kgo.Record{Topic: topic, Partition: partition, Value: p}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s/%d: %v", topic, partition, err)
	}
}

// redisClaims counts the keys under prefix on the Redis server at addr:
// the dedup claims weir made there.
func redisClaims(t *testing.T, addr, prefix string) int {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: addr, DialerRetries: 1, MaxRetries: -1, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n := 0
	it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for it.Next(ctx) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatalf("scan redis %s for %s*: %v", addr, prefix, err)
	}
	return n
}

// groupSplit reports whether group is stable with members members,
// each assigned exactly one partition, and if not, what it is instead.
func groupSplit(cl *kgo.Client, group string, members int) (bool, string) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return false, err.Error()
	}
	if len(resp.Groups) != 1 {
		return false, fmt.Sprintf("%d groups described", len(resp.Groups))
	}
	g := resp.Groups[0]
	if g.State != "Stable" || len(g.Members) != members {
		return false, fmt.Sprintf("state %q with %d members", g.State, len(g.Members))
	}
	for _, m := range g.Members {
		var a kmsg.ConsumerMemberAssignment
		if err := a.ReadFrom(m.MemberAssignment); err != nil {
			return false, fmt.Sprintf("member %s: assignment: %v", m.MemberID, err)
		}
		n := 0
		for _, tp := range a.Topics {
			n += len(tp.Partitions)
		}
		if n != 1 {
			return false, fmt.Sprintf("member %s holds %d partitions", m.MemberID, n)
		}
	}
	return true, ""
}

// waitGroupSplit waits until groupSplit holds.
func waitGroupSplit(t *testing.T, cl *kgo.Client, group string, members int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := groupSplit(cl, group, members)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s not split one partition per member after %v: %s", group, timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// caughtUp reports whether every record d's sources wrote (at least want)
// is in raw and durably received by its secondary "pg", judged and all.
func caughtUp(m map[string]float64, want float64) bool {
	w := written(m)
	return w >= want && m[`weir_secondary_coverage_end{sink="pg"}`] >= w && m["weir_recovery_backlog"] == 0
}

// rawLines is every line of d's primary raw.
func rawLines(t *testing.T, d *daemon) []filesink.Line {
	t.Helper()
	lines, err := readSinkLines(d.outDir())
	if err != nil {
		t.Fatalf("read raw %s: %v", d.outDir(), err)
	}
	return lines
}

// payloadCounts counts the payloads of the lines of stream.
func payloadCounts(lines []filesink.Line, stream string) map[string]int {
	out := map[string]int{}
	for _, l := range lines {
		if l.Source == stream {
			out[string(l.Payload)]++
		}
	}
	return out
}

// dedupGauge is weir_dedup_degraded of stream, or -1 when absent.
func dedupGauge(m map[string]float64, stream string) float64 {
	v, ok := m[fmt.Sprintf(`weir_dedup_degraded{source=%q}`, stream)]
	if !ok {
		return -1
	}
	return v
}

// checkOncePerKey fails t unless the table's rows of stream are exactly
// want's payloads, each once.
func checkOncePerKey(t *testing.T, rows map[string][]sink.RecordID, want map[string]bool) {
	t.Helper()
	for p, ids := range rows {
		if !want[p] {
			t.Errorf("table holds %q, which was never produced", p)
		} else if len(ids) != 1 {
			t.Errorf("table holds %q %d times, want once", p, len(ids))
		}
	}
	for p := range want {
		if len(rows[p]) == 0 {
			t.Errorf("table lacks %q", p)
		}
	}
}

// dedupRun is what TestDedupAcrossDaemonsOnRedis produced.
type dedupRun struct {
	want     map[string]bool   // every distinct order payload
	parts    [2]map[string]int // payload counts per partition of orders
	retries  int               // orders produced again, to the other partition
	produced int               // records on orders, retries included
}

// produceOrdersWithRetries produces n distinct orders, order i to
// partition i%2, in rounds of 20 every 50ms; after each round, every
// order of it whose number is a multiple of every is produced again, as a
// producer's retry would, to the other partition.
func produceOrdersWithRetries(ctx context.Context, t *testing.T, cl *kgo.Client, n, every int) dedupRun {
	t.Helper()
	r := dedupRun{want: map[string]bool{}, parts: [2]map[string]int{{}, {}}}
	add := func(p int, payload []byte, batch *[2][][]byte) {
		batch[p] = append(batch[p], payload)
		r.parts[p][string(payload)]++
		r.produced++
	}
	for lo := 0; lo < n; lo += 20 {
		var originals, retries [2][][]byte
		for i := lo; i < min(lo+20, n); i++ {
			add(i%2, order(i), &originals)
			r.want[string(order(i))] = true
			if i%every == 0 {
				add(1-i%2, order(i), &retries)
				r.retries++
			}
		}
		for _, b := range [][2][][]byte{originals, retries} {
			for p := range b {
				if len(b[p]) > 0 {
					produceTo(ctx, t, cl, "orders", int32(p), b[p]...)
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return r
}

// waitCaughtUp waits until the daemons' sources wrote at least want
// records between them and each daemon's secondary holds all of its raw.
func waitCaughtUp(t *testing.T, want int, timeout time.Duration, ds ...*daemon) []map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ms := make([]map[string]float64, len(ds))
		var w float64
		ok := true
		for i, d := range ds {
			ms[i] = d.scrape()
			w += written(ms[i])
			ok = ok && caughtUp(ms[i], 0)
		}
		if ok && w >= float64(want) {
			return ms
		}
		if time.Now().After(deadline) {
			for _, d := range ds {
				t.Logf("--- daemon %s log (tail) ---\n%s", d.dir, tail(d.log.String(), 3000))
			}
			t.Fatalf("after %v: the sources wrote %v of %d records, or a secondary lags raw", timeout, w, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDedupAcrossDaemonsOnRedis: two daemons in one consumer group each
// read one partition of a 2-partition topic into their own raw, and both
// write one Postgres table as their secondary, with content dedup of the
// stream on one shared Redis. Every fifth order is produced again to the
// other partition — a producer's retry, with another record id, read by
// the other daemon. Each order reaches the table exactly once; the
// duplicates dropped over both daemons are exactly the retries; each raw
// holds every record its daemon read, retries included. A stream whose
// contract declares no uniqueness cannot have dedup (weir serve refuses
// the configuration, naming the stream), and two distinct heartbeats with
// identical payloads on it both reach the table.
func TestDedupAcrossDaemonsOnRedis(t *testing.T) {
	const (
		group = "weir-dedup"
		n     = 200 // distinct orders
		every = 5   // every fifth order is retried
	)
	rs := testenv.StartRedis(t)
	prefix := "weir:systest:" + testenv.Suffix() + ":"
	db := newPGTable(t, "weir_dedup")
	c, _ := startKafka(t, "orders", 2, "hb")
	brokers := c.ListenAddrs()
	gens := observeGenerations(c, group)
	orders := kafkaSourceTOML("orders", group, "orders", brokers) + pgSecondaryTOML(db.dsn, db.table, "", "") +
		dedupContractTOML("orders", rs.URL(), prefix)
	beats := kafkaSourceTOML("heartbeats", "weir-hb", "hb", brokers) + "\n[[contract]]\nsource = \"heartbeats\"\n"
	refuseDedupWithoutUniqueness(t, orders+beats+fmt.Sprintf("[contract.dedup]\nstore = \"redis\"\nredis_url = %q\n", rs.URL()))

	args := []string{"--coverage-flush-interval", "50ms"}
	a := newDaemon(t, append([]string{"--config", writeConfig(t, orders+beats)}, args...)...)
	b := newDaemon(t, append([]string{"--config", writeConfig(t, orders)}, args...)...)
	a.start()
	b.start()
	pc := partitionProducer(t, brokers)
	waitGroupSplit(t, pc, group, 2, 45*time.Second)
	gen0 := gens.count()

	ctx := ctxTimeout(t, 90*time.Second)
	start := time.Now()
	run := produceOrdersWithRetries(ctx, t, pc, n, every)
	beat := []byte(`{"beat":"tick"}`)
	produceTo(ctx, t, pc, "hb", 0, beat)
	produceTo(ctx, t, pc, "hb", 0, beat)
	ms := waitCaughtUp(t, run.produced+2, 60*time.Second, a, b)
	t.Logf("%d orders, %d retries, 2 heartbeats through two daemons in %v", n, run.retries, time.Since(start).Round(time.Millisecond))
	if g := gens.count(); g != gen0 {
		t.Errorf("the group rebalanced during the run (generations %d → %d): a partition may have been read by both daemons", gen0, g)
	}

	dropped := sum(ms[0], "weir_dedup_dropped_total") + sum(ms[1], "weir_dedup_dropped_total")
	if dropped != float64(run.retries) {
		t.Errorf("weir_dedup_dropped_total over both daemons = %v, want %d (the retries)", dropped, run.retries)
	}
	rows := pgSourceRows(t, db.conn, db.table, "orders")
	checkOncePerKey(t, rows, run.want)
	checkRawPerPartition(t, run, rows, a, b)
	hb := pgSourceRows(t, db.conn, db.table, "heartbeats")
	if ids := hb[string(beat)]; len(hb) != 1 || len(ids) != 2 || ids[0] == ids[1] {
		t.Errorf("heartbeats in the table: %v; want %s twice, under two record ids", hb, beat)
	}
	logRoundTrips(t, db, ms)
}

// refuseDedupWithoutUniqueness runs weir serve with cfg, whose last
// contract, for the stream "heartbeats", declares no natural key or
// uniqueness but asks for dedup: it must exit, naming the stream and
// what is missing.
func refuseDedupWithoutUniqueness(t *testing.T, cfg string) {
	t.Helper()
	_, stderr, code := weirCmd(t, nil, "serve", "--config", writeConfig(t, cfg), "--data-dir", t.TempDir(),
		"--metrics-port", fmt.Sprint(freePort(t)), "--http-listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	if code == 0 || !strings.Contains(stderr, `"heartbeats"`) || !strings.Contains(stderr, "unique") {
		t.Fatalf("weir serve with dedup on a stream without uniqueness: exit %d, stderr:\n%s", code, stderr)
	}
	t.Logf("refused: %s", strings.TrimSpace(tail(stderr, 600)))
}

// checkRawPerPartition: each daemon's raw holds exactly one partition's
// records, retries included, under ids the other's raw does not have; every
// table row is one of them.
func checkRawPerPartition(t *testing.T, run dedupRun, rows map[string][]sink.RecordID, ds ...*daemon) {
	t.Helper()
	ids := map[sink.RecordID]int{}
	taken := map[int]bool{}
	for i, d := range ds {
		lines := rawLines(t, d)
		got := payloadCounts(lines, "orders")
		p := -1
		for q := range run.parts {
			if !taken[q] && maps.Equal(got, run.parts[q]) {
				p = q
			}
		}
		if p < 0 {
			t.Errorf("daemon %d: raw holds %d distinct orders, which is neither partition's records", i, len(got))
			continue
		}
		taken[p] = true
		for _, l := range lines {
			if l.Source == "orders" {
				ids[l.ID]++
			}
		}
	}
	for id, k := range ids {
		if k > 1 {
			t.Errorf("record id %x is in %d raws", id, k)
		}
	}
	for p, rids := range rows {
		for _, id := range rids {
			if ids[id] == 0 {
				t.Errorf("table row %q has id %x, in no raw", p, id)
			}
		}
	}
}

// logRoundTrips logs the dedup store's round trips against the secondary
// commits that carried the stream's rows (one transaction each: the
// distinct xmin of its rows) and the keys each round trip claimed.
func logRoundTrips(t *testing.T, db *pgTable, ms []map[string]float64) {
	t.Helper()
	var trips, keys, judged float64
	for _, m := range ms {
		trips += sum(m, "weir_dedup_store_seconds_count")
		keys += sum(m, "weir_dedup_lookups_total")
		judged += sumWhere(m, "weir_contract_records_total", `source="orders"`)
	}
	var commits int
	err := db.conn.QueryRow(context.Background(), "SELECT count(DISTINCT xmin::text) FROM "+
		pgx.Identifier{db.table}.Sanitize()+" WHERE source = 'orders'").Scan(&commits)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dedup on Redis: %v round trips for %d secondary commits of the stream (%.2f per commit); %v keys, %v records judged: %.1f keys, %.1f records per round trip",
		trips, commits, trips/float64(commits), keys, judged, keys/trips, judged/trips)
}

// orders is the payloads of orders lo to hi-1.
func orders(lo, hi int) [][]byte {
	out := make([][]byte, 0, hi-lo)
	for i := lo; i < hi; i++ {
		out = append(out, order(i))
	}
	return out
}

// firstIDs is the id of the first raw line of each payload of stream.
func firstIDs(lines []filesink.Line, stream string) map[string]sink.RecordID {
	out := map[string]sink.RecordID{}
	for _, l := range lines {
		if _, seen := out[string(l.Payload)]; !seen && l.Source == stream {
			out[string(l.Payload)] = l.ID
		}
	}
	return out
}

// TestDedupKill9BetweenClaimAndCommit: a daemon with a Postgres secondary
// and dedup on Redis claims a batch's keys and is killed (-9) while the
// secondary's commit of that batch hangs on a stalled connection, so the
// claims are in Redis and the rows never land. Restarted with Postgres
// back, it redelivers the batch from raw: each record finds its own claim
// (a redelivery, not a duplicate), so every order is in the table exactly
// once, under the id of the record that first claimed it, and the
// duplicates the restarted daemon drops are exactly the genuine ones.
func TestDedupKill9BetweenClaimAndCommit(t *testing.T) {
	const group = "weir-dedup-kill"
	rs := testenv.StartRedis(t)
	prefix := "weir:systest:" + testenv.Suffix() + ":"
	db := newPGTable(t, "weir_dedup_kill")
	c, cl := startKafka(t, "orders", 1)
	cfg := writeConfig(t, kafkaSourceTOML("orders", group, "orders", c.ListenAddrs())+
		pgSecondaryTOML(db.via, db.table, "", "")+dedupContractTOML("orders", rs.URL(), prefix))
	d := newDaemon(t, "--config", cfg, "--coverage-flush-interval", "50ms")
	d.start()
	ctx := ctxTimeout(t, 90*time.Second)
	pc := partitionProducer(t, c.ListenAddrs())

	// Postgres reachable: orders 0–29, and 0–4 again (genuine upstream
	// duplicates: new offsets, new record ids).
	phase1 := append(orders(0, 30), orders(0, 5)...)
	produceTo(ctx, t, pc, "orders", 0, phase1...)
	m := d.waitScrape("the first records in the table", 30*time.Second, func(m map[string]float64) bool { return caughtUp(m, float64(len(phase1))) })
	if got := sum(m, "weir_dedup_dropped_total"); got != 5 {
		t.Fatalf("before the stall: %v duplicates dropped, want 5", got)
	}
	time.Sleep(250 * time.Millisecond) // five coverage flushes: the restart must not replay these

	// Postgres stalled: orders 30–59, 30–34 again, and 5–9 again.
	db.proxy.Stall()
	phase2 := append(append(orders(30, 60), orders(30, 35)...), orders(5, 10)...)
	produceTo(ctx, t, pc, "orders", 0, phase2...)
	total := len(phase1) + len(phase2)
	claims := waitClaimsBeforeCommit(t, d, rs, prefix, cl, group, total, 30, 60)
	if got := len(pgSourceRows(t, db.conn, db.table, "orders")); got != 30 {
		t.Fatalf("the table holds %d orders while its connection is stalled, want the 30 committed before", got)
	}
	killedDropped := sum(d.scrape(), "weir_dedup_dropped_total") - 5
	d.kill()
	db.proxy.Resume()
	d.start()

	m = d.waitScrape("every record in the table after the restart", 60*time.Second, func(m map[string]float64) bool {
		return m[`weir_secondary_coverage_end{sink="pg"}`] >= float64(total) && m["weir_recovery_backlog"] == 0
	})
	want := map[string]bool{}
	for _, p := range orders(0, 60) {
		want[string(p)] = true
	}
	rows := pgSourceRows(t, db.conn, db.table, "orders")
	checkOncePerKey(t, rows, want)
	first := firstIDs(rawLines(t, d), "orders")
	for p, ids := range rows {
		if len(ids) == 1 && ids[0] != first[p] {
			t.Errorf("table holds %q under id %x, not its first record's %x", p, ids[0], first[p])
		}
	}
	if got := sum(m, "weir_dedup_dropped_total"); got != 10 {
		t.Errorf("after the restart: %v duplicates dropped, want the 10 genuine ones of the redelivered batch", got)
	}
	t.Logf("killed with %d of the %d stalled keys claimed in Redis and none of their rows committed (%v duplicates dropped before the kill); after the restart the table holds %d orders once each",
		claims-30, 30, killedDropped, len(rows))
}

// waitClaimsBeforeCommit waits until d's raw holds total records, the
// group has committed them all (so nothing is read again after a kill),
// and Redis holds all keys claims. The secondary delivers its batches one
// at a time, so should the stalled records have come in more than one
// batch, only the first is judged: then more than before claims (some of
// the stalled records claimed) do, after a 2s grace. It returns the
// claims.
func waitClaimsBeforeCommit(t *testing.T, d *daemon, rs *testenv.RedisServer, prefix string, cl *kgo.Client, group string, total, before, keys int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var grace time.Time
	for {
		raw := len(rawLines(t, d))
		var committed int64
		for _, o := range committedOffsets(t, cl, group, "orders") {
			committed += o
		}
		claims := redisClaims(t, rs.Addr, prefix)
		if raw >= total && committed >= int64(total) && claims > before {
			if grace.IsZero() {
				grace = time.Now().Add(2 * time.Second)
			}
			if claims >= keys || time.Now().After(grace) {
				return claims
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: raw %d of %d records, %d committed, %d keys claimed (want more than %d)\n%s",
				raw, total, committed, claims, before, tail(d.log.String(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDedupRedisStoppedMidRun: the dedup store (a private Redis) is
// stopped while a daemon runs. The pipeline goes on: every record, the
// duplicates included, reaches the secondary; weir_dedup_degraded is 1 and
// the secondary reports Degraded (weir_secondary_health). Once Redis is
// back (empty), dedup resumes by itself: a new order's retry is dropped
// again, and the secondary is healthy.
func TestDedupRedisStoppedMidRun(t *testing.T) {
	rs := testenv.StartRedis(t)
	prefix := "weir:systest:" + testenv.Suffix() + ":"
	db := newPGTable(t, "weir_dedup_down")
	c, _ := startKafka(t, "orders", 1)
	cfg := writeConfig(t, kafkaSourceTOML("orders", "weir-dedup-down", "orders", c.ListenAddrs())+
		pgSecondaryTOML(db.dsn, db.table, "", "")+dedupContractTOML("orders", rs.URL(), prefix))
	d := newDaemon(t, "--config", cfg, "--coverage-flush-interval", "50ms", "--sink-health-interval", "100ms")
	d.start()
	ctx := ctxTimeout(t, 90*time.Second)
	pc := partitionProducer(t, c.ListenAddrs())
	produced := 0
	produce := func(ps ...[]byte) {
		produceTo(ctx, t, pc, "orders", 0, ps...)
		produced += len(ps)
	}
	caught := func(what string) map[string]float64 {
		return d.waitScrape(what, 30*time.Second, func(m map[string]float64) bool { return caughtUp(m, float64(produced)) })
	}

	produce(append(orders(0, 20), orders(0, 2)...)...)
	m := caught("the first orders in the table")
	if got, g := sum(m, "weir_dedup_dropped_total"), dedupGauge(m, "orders"); got != 2 || g != 0 {
		t.Fatalf("with Redis up: %v duplicates dropped (want 2), weir_dedup_degraded %v (want 0)", got, g)
	}

	rs.Stop()
	produce(append(append(orders(20, 40), orders(2, 4)...), orders(20, 21)...)...)
	m = caught("the orders produced while Redis is down in the table")
	if g := dedupGauge(m, "orders"); g != 1 {
		t.Errorf("Redis down: weir_dedup_degraded = %v, want 1", g)
	}
	if got := sum(m, "weir_dedup_dropped_total"); got != 2 {
		t.Errorf("Redis down: %v duplicates dropped in all, want still 2", got)
	}
	if sum(m, "weir_dedup_store_errors_total") == 0 {
		t.Error("Redis down: no store error counted")
	}
	rows := pgSourceRows(t, db.conn, db.table, "orders")
	for i, n := range map[int]int{2: 2, 3: 2, 20: 2, 39: 1} {
		if got := len(rows[string(order(i))]); got != n {
			t.Errorf("Redis down: order %d is in the table %d times, want %d (duplicates pass, nothing is lost)", i, got, n)
		}
	}
	if !strings.Contains(d.log.String(), "dedup: store failed") {
		t.Error("Redis down: no log line says the dedup store failed")
	}
	d.waitScrape("the secondary reported Degraded", 10*time.Second, func(m map[string]float64) bool {
		return m[`weir_secondary_health{sink="pg",state="degraded"}`] == 1
	})

	rs.Start()
	next := waitDedupResumed(t, d, produce, caught, 40)
	produce(order(next))
	m = caught("the retry of an order claimed after Redis returned")
	if got := sum(m, "weir_dedup_dropped_total"); got != 3 {
		t.Errorf("Redis back: %v duplicates dropped in all, want 3", got)
	}
	if got := len(pgSourceRows(t, db.conn, db.table, "orders")[string(order(next))]); got != 1 {
		t.Errorf("Redis back: order %d is in the table %d times, want once", next, got)
	}
	d.waitScrape("the secondary healthy again", 10*time.Second, func(m map[string]float64) bool {
		return m[`weir_secondary_health{sink="pg",state="healthy"}`] == 1
	})
}

// waitDedupResumed produces one new order at a time, from order first
// on, until the secondary has all and weir_dedup_degraded is 0 again, and
// returns the last order's number: it was judged with the store back, so
// its claim is there.
func waitDedupResumed(t *testing.T, d *daemon, produce func(...[]byte), caught func(string) map[string]float64, first int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i := first; ; i++ {
		produce(order(i))
		if dedupGauge(caught("a new order in the table"), "orders") == 0 {
			return i
		}
		if time.Now().After(deadline) {
			t.Fatalf("dedup not resumed 20s after Redis returned\n%s", tail(d.log.String(), 4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
