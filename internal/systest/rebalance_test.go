package systest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/wab"
)

// disruption is one step of a rebalance schedule: after a pause, stop one
// daemon (kill -9 or SIGTERM) and start it again after down.
type disruption struct {
	after  time.Duration
	daemon int
	term   bool
	down   time.Duration
}

func (s disruption) String() string {
	how := "kill -9"
	if s.term {
		how = "SIGTERM"
	}
	return fmt.Sprintf("after %v %s daemon %c, down %v", s.after, how, 'A'+s.daemon, s.down)
}

// groupGenerations counts the generations of a consumer group, as the
// members name them in their SyncGroup requests (every member sends one per
// generation it joins).
type groupGenerations struct {
	mu   sync.Mutex
	seen map[int32]bool
}

func observeGenerations(c *kfake.Cluster, group string) *groupGenerations {
	g := &groupGenerations{seen: map[int32]bool{}}
	c.ControlKey(kmsg.SyncGroup.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		if req := kr.(*kmsg.SyncGroupRequest); req.Group == group {
			g.mu.Lock()
			g.seen[req.Generation] = true
			g.mu.Unlock()
		}
		return nil, nil, false // observe only: the cluster handles it
	})
	return g
}

func (g *groupGenerations) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seen)
}

// durableCache reads what is durable in the data directories of ds, as
// readDurableAll does, but parses each finished raw file (.ndjson) and
// sealed buffer segment once: their content never changes, so a read of
// running daemons parses only what they still append to, and a check costs
// milliseconds rather than a parse of everything. Files that are gone are
// forgotten. Safe for concurrent use.
type durableCache struct {
	mu    sync.Mutex
	ds    []*daemon
	files map[string]map[string]int // path → payload counts, finished files
}

func newDurableCache(ds []*daemon) *durableCache {
	return &durableCache{ds: ds, files: map[string]map[string]int{}}
}

func (c *durableCache) read() (map[string]int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	seen := map[string]bool{}
	for _, d := range c.ds {
		// The buffer first, then raw (see readDurable).
		var wabOut map[string]int
		var err error
		for range 20 {
			wabOut = map[string]int{}
			if err = c.readWAB(d.wabDir(), wabOut, seen); !errors.Is(err, fs.ErrNotExist) {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("read buffer %s: %w", d.wabDir(), err)
		}
		addCounts(out, wabOut)
		if err := c.readRaw(d.outDir(), out, seen); err != nil {
			return nil, fmt.Errorf("read raw %s: %w", d.outDir(), err)
		}
	}
	for p := range c.files {
		if !seen[p] {
			delete(c.files, p)
		}
	}
	return out, nil
}

func (c *durableCache) readWAB(dir string, out map[string]int, seen map[string]bool) error {
	return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return nil
		}
		seen[p] = true
		m, ok := c.files[p]
		if !ok {
			if m, err = segmentPayloads(p); err != nil {
				return err
			}
			if strings.HasSuffix(p, wab.SuffixSealed) {
				c.files[p] = m
			}
		}
		addCounts(out, m)
		return nil
	})
}

func (c *durableCache) readRaw(dir string, out map[string]int, seen map[string]bool) error {
	lfs := &listingFS{FS: vfs.OS, skip: func(name string) bool { _, ok := c.files[filepath.Join(dir, name)]; return ok }}
	var lines []filesink.Line
	var err error
	for range 20 { // a running daemon may rename a file while it is read
		if lines, err = filesink.ReadDirFS(lfs, dir, true); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	fresh := map[string]map[string]int{}
	for _, l := range lines {
		if fresh[l.File] == nil {
			fresh[l.File] = map[string]int{}
		}
		fresh[l.File][string(l.Payload)]++
	}
	for _, name := range lfs.names {
		p := filepath.Join(dir, name)
		seen[p] = true
		m, ok := c.files[p]
		if !ok {
			m = fresh[name]
			if strings.HasSuffix(name, filesink.SuffixDone) {
				c.files[p] = m
			}
		}
		addCounts(out, m)
	}
	return nil
}

// listingFS hides the names skip reports from ReadDir, and keeps the full
// listing of its last call.
type listingFS struct {
	vfs.FS
	skip  func(name string) bool
	names []string
}

func (f *listingFS) ReadDir(dir string) ([]string, error) {
	names, err := f.FS.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	f.names = names
	var keep []string
	for _, n := range names {
		if !f.skip(n) {
			keep = append(keep, n)
		}
	}
	return keep, nil
}

func addCounts(dst, src map[string]int) {
	for k, n := range src {
		dst[k] += n
	}
}

// commitCheck checks every OffsetCommit request of a group when it reaches
// the broker, before the broker applies it: every produced record below an
// offset in the request must already be durable. The request waits (on
// its connection only, kfake.SleepControl) while the disk is read, so a
// commit sent even a moment before its records are durable is caught,
// which polling the committed offsets cannot do.
type commitCheck struct {
	mu       sync.Mutex
	checked  int           // partition offsets checked
	skipped  int           // requests not checked: the disk read failed
	spent    time.Duration // reading the disk, in total
	longest  time.Duration // reading the disk, for one request
	first    string        // the first violation
	violated chan struct{} // closed at the first violation
}

func checkCommitsAtBroker(c *kfake.Cluster, group, topic string, produced func() map[string]kafkaPos,
	durable func() (map[string]int, error)) *commitCheck {
	cc := &commitCheck{violated: make(chan struct{})}
	type result struct {
		bad     []string
		prod    map[string]kafkaPos
		err     error
		elapsed time.Duration
	}
	c.ControlKey(kmsg.OffsetCommit.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.OffsetCommitRequest)
		if req.Group != group {
			return nil, nil, false
		}
		offs := map[int32]int64{}
		for _, tp := range req.Topics {
			if tp.Topic == topic || tp.Topic == "" { // v10+ names the (only) topic by id
				for _, p := range tp.Partitions {
					offs[p.Partition] = p.Offset
				}
			}
		}
		res := make(chan result, 1)
		c.SleepControl(func() {
			start := time.Now()
			prod := produced()
			dur, err := durable()
			var bad []string
			if err == nil {
				bad = committedNotDurable(offs, prod, dur)
			}
			res <- result{bad, prod, err, time.Since(start)}
		})
		var r result
		select {
		case r = <-res:
		default:
			return nil, nil, false // the cluster is closing
		}
		cc.mu.Lock()
		defer cc.mu.Unlock()
		cc.spent += r.elapsed
		cc.longest = max(cc.longest, r.elapsed)
		switch {
		case r.err != nil:
			cc.skipped++
		case len(r.bad) > 0 && cc.first == "":
			pos := r.prod[r.bad[0]]
			cc.first = fmt.Sprintf("member %s (generation %d) commits offset %d of partition %d, but %q (offset %d) is durable in neither daemon "+
				"(raw or buffer); %d such records in the request %v",
				req.MemberID, req.Generation, offs[pos.partition], pos.partition, r.bad[0], pos.offset, len(r.bad), offs)
			close(cc.violated)
		default:
			cc.checked += len(offs)
		}
		return nil, nil, false // checked; the cluster applies it
	})
	return cc
}

func (cc *commitCheck) stats() (checked, skipped int, spent, longest time.Duration, first string) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.checked, cc.skipped, cc.spent, cc.longest, cc.first
}

// partitionMoves counts, per partition, how often the daemon holding the
// partition's records in raw changes from one offset to the next: a lower
// bound of how often the partition moved between the daemons (a move back
// and forth within one uncommitted batch re-read by both is not seen).
func partitionMoves(produced map[string]kafkaPos, raws []map[string]int) map[int32]int {
	byPart := map[int32][]string{}
	for payload, pos := range produced {
		byPart[pos.partition] = append(byPart[pos.partition], payload)
	}
	moves := map[int32]int{}
	for p, payloads := range byPart {
		slices.SortFunc(payloads, func(a, b string) int { return cmp.Compare(produced[a].offset, produced[b].offset) })
		owner := -1
		for _, payload := range payloads {
			var holders []int
			for i, raw := range raws {
				if raw[payload] > 0 {
					holders = append(holders, i)
				}
			}
			switch {
			case len(holders) == 0 || slices.Contains(holders, owner):
			case owner < 0:
				if len(holders) == 1 {
					owner = holders[0]
				}
			default:
				moves[p]++
				owner = holders[0]
			}
		}
	}
	return moves
}

// TestKafkaRebalanceTwoDaemons: two real weir daemons (own data and raw
// directories) in one consumer group share a 6-partition topic while a
// producer publishes at a bounded rate. A seeded schedule stops one daemon
// at a time, kill -9 or SIGTERM, and restarts it, so partitions move back
// and forth. Throughout, a checker reads the group's committed offsets from
// the broker and then what is durable in both daemons (raw and buffer, read
// from disk while they run): every produced record below a committed offset
// must be durable in one of them. Every OffsetCommit request is also
// checked the same way when it reaches the broker, before it is applied
// (commitCheck), which catches a commit sent before its write; the polling
// checker catches records that were committed and never, or no longer,
// durable. At the end every produced record is in
// one of the raws; duplicates are counted and allowed; at least one
// partition must have moved between the daemons. Replay a schedule with
// WEIR_KILL_SEED.
func TestKafkaRebalanceTwoDaemons(t *testing.T) {
	const (
		topic       = "orders"
		group       = "weir-rebal"
		partitions  = 6
		n           = 4800 // records, 20 per batch every 100 ms: 25 s or more
		disruptions = 6
	)
	rng, seed := killRand(t)
	schedule := make([]disruption, disruptions)
	for i := range schedule {
		schedule[i] = disruption{
			after:  time.Duration(1000+rng.IntN(1500)) * time.Millisecond,
			daemon: rng.IntN(2),
			term:   rng.IntN(2) == 0,
			down:   time.Duration(200+rng.IntN(1000)) * time.Millisecond,
		}
		t.Logf("schedule %d: %v", i+1, schedule[i])
	}

	c, cl := startKafka(t, topic, partitions)
	gens := observeGenerations(c, group)
	// A revoke-time commit must give up well within the rebalance timeout
	// (8s), or it stalls the rebalance it runs in.
	cfg := writeConfig(t, kafkaSourceTOML("orders", group, topic, c.ListenAddrs(), `commit_timeout = "2s"`))
	ds := []*daemon{newDaemon(t, "--config", cfg), newDaemon(t, "--config", cfg)}
	l := &kafkaLedger{bySrc: map[string]kafkaPos{}}
	durable := newDurableCache(ds)
	commits := checkCommitsAtBroker(c, group, topic, l.snapshot, durable.read)
	for _, d := range ds {
		d.start()
	}
	start := time.Now()
	since := func() float64 { return time.Since(start).Seconds() }

	pctx, cancelProduce := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancelProduce()
	var produced sync.WaitGroup
	produced.Add(1)
	go func() {
		defer produced.Done()
		produceKafka(pctx, t, cl, "r", n, 20, 100*time.Millisecond, l)
	}()

	// The checker: committed offsets first, then the durable set, which
	// only grows, so a correct system can never trip it.
	stopCheck, checkDone, violated := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var rounds, skipped int // the checker's; read after checkDone
	var lastSkip error
	go func() {
		defer close(checkDone)
		tick := time.NewTicker(150 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopCheck:
				return
			case <-tick.C:
			}
			committed, err := fetchCommitted(cl, group, topic)
			if err != nil {
				skipped, lastSkip = skipped+1, err
				continue
			}
			prod := l.snapshot()
			dur, err := durable.read()
			if err != nil {
				skipped, lastSkip = skipped+1, err
				continue
			}
			rounds++
			bad := committedNotDurable(committed, prod, dur)
			if len(bad) == 0 {
				continue
			}
			pos := prod[bad[0]]
			again, err := readDurableAll(ds)
			t.Errorf("%.1fs: %q (partition %d offset %d) is below the group's committed offset %d but durable in neither daemon "+
				"(raw or buffer); %d such records; read again right after: %d copies (err %v); committed %v; replay with WEIR_KILL_SEED=%d",
				since(), bad[0], pos.partition, pos.offset, committed[pos.partition], len(bad), again[bad[0]], err, committed, seed)
			close(violated)
			return
		}
	}()
	stopChecker := func() {
		select {
		case <-stopCheck:
		default:
			close(stopCheck)
		}
		<-checkDone
	}
	defer stopChecker()
	dump := func() string {
		var b []byte
		for i, d := range ds {
			b = fmt.Appendf(b, "--- daemon %c log (tail) ---\n%s\n", 'A'+i, tail(d.log.String(), 3000))
		}
		return string(b)
	}
	failIfViolated := func() {
		t.Helper()
		select {
		case <-violated:
			t.Fatalf("commit ahead of durable (WEIR_KILL_SEED=%d)\n%s", seed, dump())
		case <-commits.violated:
			_, _, _, _, first := commits.stats()
			t.Fatalf("%.1fs: commit ahead of durable at the broker: %s; replay with WEIR_KILL_SEED=%d\n%s", since(), first, seed, dump())
		default:
		}
	}
	// wait sleeps d, failing the test the moment a checker finds a
	// violation.
	wait := func(d time.Duration) {
		t.Helper()
		select {
		case <-time.After(d):
		case <-violated:
		case <-commits.violated:
		}
		failIfViolated()
	}

	// Group trouble the daemons logged, over all their runs: members that
	// lost their partitions (e.g. a JoinGroup that timed out).
	var trouble []string
	scanTrouble := func(i int) {
		for _, line := range strings.Split(ds[i].log.String(), "\n") {
			if strings.Contains(line, `msg="partitions lost"`) || strings.Contains(line, "unable to join group") {
				trouble = append(trouble, fmt.Sprintf("%c: %s", 'A'+i, line))
			}
		}
	}

	for i, s := range schedule {
		wait(s.after)
		// A stop during a rebalance waits for it (up to the rebalance
		// timeout): keep the whole test within about a minute.
		if since() > 30 {
			t.Logf("%5.1fs: time budget spent, disruptions %d to %d skipped", since(), i+1, len(schedule))
			break
		}
		d := ds[s.daemon]
		t0 := time.Now()
		if s.term {
			if err := d.stop(30 * time.Second); err != nil {
				t.Errorf("disruption %d: SIGTERM: %v\n%s", i+1, err, tail(d.log.String(), 3000))
			}
		} else {
			d.kill()
		}
		stopped := time.Since(t0)
		t.Logf("%5.1fs disruption %d: %v (stopped in %v); %d produced, committed %v", since(), i+1, s,
			stopped.Round(time.Millisecond), len(l.snapshot()), committedOffsets(t, cl, group, topic))
		wait(s.down)
		scanTrouble(s.daemon)
		t0 = time.Now()
		d.start()
		t.Logf("%5.1fs daemon %c restarted (ready in %v)", since(), 'A'+s.daemon, time.Since(t0).Round(time.Millisecond))
	}
	produced.Wait()
	prod := l.snapshot()
	if len(prod) != n {
		t.Fatalf("produced %d of %d", len(prod), n)
	}
	t.Logf("%5.1fs producer done", since())

	// Drain: every record in one of the raws, every partition committed at
	// its high water.
	high := map[int32]int64{}
	for _, pos := range prod {
		high[pos.partition] = max(high[pos.partition], pos.offset+1)
	}
	drainStart := time.Now()
	deadline := drainStart.Add(45 * time.Second)
	evicted := false
	for {
		committed := committedOffsets(t, cl, group, topic)
		raws := make([]map[string]int, len(ds))
		for i, d := range ds {
			raws[i] = sinkPayloads(t, d.outDir())
		}
		missing, example := 0, ""
		for payload := range prod {
			if raws[0][payload] == 0 && raws[1][payload] == 0 {
				missing, example = missing+1, payload
			}
		}
		behind := 0
		for p, hw := range high {
			if committed[p] != hw {
				behind++
			}
		}
		if missing == 0 && behind == 0 {
			break
		}
		if !evicted && behind > 0 && time.Since(drainStart) > 10*time.Second {
			// A member the broker still lists this long after the last
			// restart (session timeout 6s) that neither live daemon is
			// — kfake has kept a member killed mid-rebalance, holding
			// partitions no one fetches — is evicted, loudly.
			evicted = true
			if gone := evictStrangers(t, cl, group, liveMembers(ds)); len(gone) > 0 {
				t.Logf("%5.1fs the broker still listed members no live daemon is, %v past the last restart; evicted %v",
					since(), time.Since(drainStart).Round(time.Second), gone)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 45s: %d records in neither raw (e.g. %q); %d partitions committed below their high water: committed %v, high %v\n%s\n%s",
				missing, example, behind, committed, high, describeGroup(cl, group), dump())
		}
		wait(200 * time.Millisecond)
	}
	t.Logf("%5.1fs drained: every record in raw, committed at high water %v", since(), high)
	stopChecker()
	failIfViolated()
	if rounds < 20 {
		t.Fatalf("the checker completed only %d rounds (%d skipped, last: %v)", rounds, skipped, lastSkip)
	}

	for i, d := range ds {
		if err := d.stop(30 * time.Second); err != nil {
			t.Errorf("final SIGTERM of daemon %c: %v\n%s", 'A'+i, err, tail(d.log.String(), 3000))
		}
	}
	checkCommittedBehindDurable(t, 0, committedOffsets(t, cl, group, topic), prod, readDurableUnion(t, ds))
	for i := range ds {
		scanTrouble(i)
	}
	for _, line := range trouble {
		t.Logf("group trouble: %s", tail(line, 400))
	}

	raws := make([]map[string]int, len(ds))
	for i, d := range ds {
		raws[i] = sinkPayloads(t, d.outDir())
	}
	dups, both, missing := 0, 0, 0
	for payload := range prod {
		a, b := raws[0][payload], raws[1][payload]
		if a+b == 0 {
			t.Errorf("%q (partition %d offset %d) in neither raw", payload, prod[payload].partition, prod[payload].offset)
			missing++
		}
		if a+b > 1 {
			dups += a + b - 1
		}
		if a > 0 && b > 0 {
			both++
		}
	}
	failIfViolated() // the final stops commit too
	checked, cskipped, spent, longest, _ := commits.stats()
	moves := partitionMoves(prod, raws)
	total := 0
	for _, m := range moves {
		total += m
	}
	t.Logf("%5.1fs: %d records, %d missing, %d duplicates (%d records in both raws); daemon A wrote %d distinct, B %d; "+
		"%d group generations; %d partition moves between the daemons %v; %d group trouble lines; polling checker: %d rounds, %d skipped; "+
		"commits checked at the broker: %d partition offsets, %d requests skipped, %v reading the disk (longest %v)",
		since(), n, missing, dups, both, len(raws[0]), len(raws[1]), gens.count(), total, moves, len(trouble), rounds, skipped,
		checked, cskipped, spent.Round(time.Millisecond), longest.Round(time.Millisecond))
	if total == 0 {
		t.Errorf("no partition moved between the daemons (WEIR_KILL_SEED=%d)", seed)
	}
}

// readDurableAll is what is durable in any of ds (readDurable of each).
func readDurableAll(ds []*daemon) (map[string]int, error) {
	out := map[string]int{}
	for _, d := range ds {
		m, err := readDurable(d)
		if err != nil {
			return nil, err
		}
		for p, c := range m {
			out[p] += c
		}
	}
	return out, nil
}

func readDurableUnion(t *testing.T, ds []*daemon) map[string]int {
	t.Helper()
	out, err := readDurableAll(ds)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// describeGroup says what the broker holds for group: its state,
// generation and each member's client and assigned partitions, for a
// failure message.
func describeGroup(cl *kgo.Client, group string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Sprintf("describe group %s: %v", group, err)
	}
	var b strings.Builder
	for _, g := range resp.Groups {
		fmt.Fprintf(&b, "group %s: state %s, protocol %s, error %d, %d members\n", g.Group, g.State, g.Protocol, g.ErrorCode, len(g.Members))
		for _, m := range g.Members {
			var a kmsg.ConsumerMemberAssignment
			parts := "undecodable"
			if err := a.ReadFrom(m.MemberAssignment); err == nil {
				parts = fmt.Sprint(a.Topics)
				var ps []string
				for _, t := range a.Topics {
					ps = append(ps, fmt.Sprintf("%s%v", t.Topic, t.Partitions))
				}
				parts = strings.Join(ps, " ")
			}
			fmt.Fprintf(&b, "  member %s (%s %s): %s\n", m.MemberID, m.ClientID, m.ClientHost, parts)
		}
	}
	return b.String()
}

// liveMembers returns the group member id each daemon's current run
// logged last with its assignment.
func liveMembers(ds []*daemon) map[string]bool {
	live := map[string]bool{}
	for _, d := range ds {
		log := d.log.String()
		i := strings.LastIndex(log, `msg="partitions assigned"`)
		if i < 0 {
			continue
		}
		line := log[i:]
		if j := strings.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		if k := strings.Index(line, " member="); k >= 0 {
			live[strings.Fields(line[k+len(" member="):])[0]] = true
		}
	}
	return live
}

// evictStrangers removes from group, with a LeaveGroup naming them,
// the members that are not in live, and returns their ids.
func evictStrangers(t *testing.T, cl *kgo.Client, group string, live map[string]bool) []string {
	t.Helper()
	if len(live) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Groups) != 1 {
		t.Logf("describe group %s: %v", group, err)
		return nil
	}
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group = group
	var gone []string
	for _, m := range resp.Groups[0].Members {
		if !live[m.MemberID] {
			lm := kmsg.NewLeaveGroupRequestMember()
			lm.MemberID = m.MemberID
			leave.Members = append(leave.Members, lm)
			gone = append(gone, m.MemberID)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	if _, err := leave.RequestWith(ctx, cl); err != nil {
		t.Logf("leave group for %v: %v", gone, err)
	}
	return gone
}
