package systest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/wire"
)

// sourceKillCycles is how many times the source tests kill the daemon: all
// of them while their producers are still publishing.
const sourceKillCycles = 4

// killCycles is how many kill -9 cycles TestKill9UnderLoad runs:
// $WEIR_KILL_CYCLES, 20 in CI (.ci/run), 4 by default.
func killCycles(t *testing.T) int {
	if s := os.Getenv("WEIR_KILL_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("WEIR_KILL_CYCLES=%q: want a positive integer", s)
		}
		return n
	}
	return 4
}

// TestKill9UnderLoad kills the real daemon with SIGKILL while many
// producers push in both tiers, restarts it on the same data directory, and
// after every restart checks that every record ever acked is in the file
// sink (by content). Duplicates are counted and allowed; a missing acked
// record fails the test. The kill instant is drawn from a seeded PRNG; the
// seed is logged so a failing schedule can be replayed with
// WEIR_KILL_SEED. Each restart changes the shard count (4, 2, 1, 3, …, and
// the default, one per CPU, last), so open segments of shards the new
// configuration no longer writes are recovered and delivered too — as after
// an upgrade that changes the default.
func TestKill9UnderLoad(t *testing.T) {
	rng, _ := killRand(t)

	cycles := killCycles(t)
	const producers = 16
	d := newDaemon(t, "--segment-max-age", "100ms")
	base := len(d.args)
	all := newLedger()
	for cycle := 0; cycle < cycles; cycle++ {
		d.args = append(d.args[:base:base], "--shards", strconv.Itoa([]int{4, 2, 1, 3}[cycle%4]))
		d.start()
		// Everything acked before this start must be delivered.
		if cycle > 0 {
			got := waitDelivered(t, d, all.snapshot(), 60*time.Second)
			logDuplicates(t, cycle, got)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for p := 0; p < producers; p++ {
			tier := client.Durable
			if p%3 == 2 {
				tier = client.Buffered
			}
			batch := 1
			if p%4 == 3 {
				batch = 16
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				produce(ctx, t, d.socket, fmt.Sprintf("c%02dp%02d", cycle, p), 0, batch, tier, all, 300*time.Millisecond,
					client.WithWindow(256), client.WithBackoff(5*time.Millisecond, 20*time.Millisecond))
			}()
		}
		time.Sleep(time.Duration(150+rng.IntN(600)) * time.Millisecond)
		d.kill()
		cancel()
		wg.Wait()
		if n := all.ackedCount(); n == 0 {
			t.Fatalf("cycle %d: nothing acked before the kill\n%s", cycle, tail(d.log.String(), 3000))
		}
	}
	d.args = d.args[:base]
	d.start()
	got := waitDelivered(t, d, all.snapshot(), 60*time.Second)
	logDuplicates(t, cycles, got)
	// The drain reads open segments (a Buffered record once written, a
	// Durable one once synced): a kill -9 keeps what was written, so a row
	// may be a record whose answer the kill cut off, never one no
	// producer sent.
	for p := range got {
		var c, pr, i int
		if n, err := fmt.Sscanf(p, "c%02dp%02d-%07d", &c, &pr, &i); n != 3 || err != nil || c >= cycles || pr >= producers {
			t.Errorf("the sink holds %q, which no producer sent", p)
		}
	}
	t.Logf("%d kill -9 cycles, %d acked records, every one delivered; nacks: %v", cycles, all.ackedCount(), all.nacked)
	if err := d.stop(30 * time.Second); err != nil {
		t.Fatalf("final graceful stop: %v", err)
	}
}

// killRand returns the PRNG a kill schedule is drawn from, seeded from
// $WEIR_KILL_SEED or else the clock; the seed is logged, so a failing
// schedule can be replayed. The seed is returned too, for failure messages.
func killRand(t *testing.T) (*rand.Rand, uint64) {
	t.Helper()
	seed := envSeed(t, "WEIR_KILL_SEED", "kill schedule seed")
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), seed
}

// envSeed is the seed in the environment variable name, else the clock's,
// logged as what replays the run.
func envSeed(t *testing.T, name, what string) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(name); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 0, 64); err != nil {
			t.Fatalf("%s=%q: %v", name, s, err)
		}
	}
	t.Logf("%s: %s=%d", what, name, seed)
	return seed
}

func logDuplicates(t *testing.T, cycle int, got map[string]int) {
	dups := 0
	for _, n := range got {
		if n > 1 {
			dups += n - 1
		}
	}
	t.Logf("after restart %d: %d records in the sink, %d duplicate deliveries", cycle, len(got), dups)
}

// TestGracefulShutdownUnderLoad sends SIGTERM while producers push: the
// daemon exits 0 within shutdown_timeout, and every acked record is
// delivered (after a restart, for segments sealed at shutdown).
func TestGracefulShutdownUnderLoad(t *testing.T) {
	d := newDaemon(t, "--shards", "2", "--shutdown-timeout", "20s")
	d.start()
	l := newLedger()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := produceEach(ctx, t, d.socket, 8, func(p int) string { return fmt.Sprintf("gs%02d", p) }, func(p int) int { return 1 + p%3 },
		l, 2*time.Second, client.WithBackoff(5*time.Millisecond, 20*time.Millisecond))
	time.Sleep(700 * time.Millisecond)
	start := time.Now()
	if err := d.stop(25 * time.Second); err != nil {
		t.Fatalf("SIGTERM under load: %v\n%s", err, tail(d.log.String(), 3000))
	}
	t.Logf("graceful shutdown under load took %v", time.Since(start))
	cancel()
	wait()
	if l.ackedCount() == 0 {
		t.Fatal("nothing was acked")
	}
	// Records pushed during the shutdown are refused with ShuttingDown (or
	// never answered), never acked and lost.
	t.Logf("acked %d; nacks %v; unanswered %d", l.ackedCount(), l.nacked, l.other)
	for code := range l.nacked {
		if code != wire.CodeShuttingDown {
			t.Errorf("unexpected Nack code during shutdown: %v", code)
		}
	}
	d.start()
	waitDelivered(t, d, l.snapshot(), 60*time.Second)
	if strings.Contains(d.log.String(), "level=ERROR") {
		t.Errorf("errors logged after restart:\n%s", tail(d.log.String(), 3000))
	}
}
