package systest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/wire"
)

// TestKill9UnderOverload kills the daemon with SIGKILL and restarts it a
// few times while producers push into a memory budget too small for them,
// so that many requests are refused Overloaded — among them, after each
// restart, copies resent because the kill cut off their answer, some of
// which the killed daemon had stored (issue 24). The clients report
// refusals instead of retrying them (WithOverloadRetries(0)). Afterwards
// every acked record is in the file sink (raw), and no record the client
// reported refused is: a record the daemon may hold must come back as
// client.ErrOutcomeUnknown, never as ErrOverloaded.
func TestKill9UnderOverload(t *testing.T) {
	rng, seed := killRand(t)
	// A 4 MiB budget in which every record counts 16 KiB, a quarter of it
	// grantable after each start; slow buffer syncs keep it full.
	d := newDaemon(t, "--shards", "2", "--segment-max-age", "100ms", "--live-stall-timeout", "1h",
		"--memory-budget", "4MiB", "--max-frame-bytes", "64KiB", "--record-size-estimate", "16KiB",
		"--flow-admission-wait", "5ms", "--flow-retry-after", "10ms")
	d.env = []string{"WEIR_FAULTS=sync:*.wab:delay=30ms"}
	d.start()

	const producers, kills = 8, 4
	l := newLedger()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := produceEach(ctx, t, d.socket, producers, func(p int) string { return fmt.Sprintf("ovk%02d", p) }, func(p int) int { return 1 + p%4 },
		l, 30*time.Second, client.WithWindow(256), client.WithOverloadRetries(0), client.WithBackoff(5*time.Millisecond, 20*time.Millisecond))
	for range kills {
		time.Sleep(time.Duration(400+rng.IntN(600)) * time.Millisecond)
		d.kill()
		time.Sleep(100 * time.Millisecond) // redials fail meanwhile
		d.start()
	}
	// Let the last restart's resends be answered before the producers stop.
	time.Sleep(time.Second)
	cancel()
	wait()

	l.mu.Lock()
	acked, overloaded, unknown := len(l.acked), l.nacked[wire.CodeOverloaded], l.unknown
	nacked := fmt.Sprint(l.nacked)
	refused := make(map[string]wire.Code, len(l.refused))
	for p, c := range l.refused {
		refused[p] = c
	}
	l.mu.Unlock()
	t.Logf("seed %d: %d acked, nacks %s, %d outcome unknown", seed, acked, nacked, unknown)
	if acked == 0 || overloaded == 0 {
		t.Fatalf("acked %d, refused Overloaded %d: the run proves nothing\n%s", acked, overloaded, tail(d.log.String(), 3000))
	}

	got := waitDelivered(t, d, l.snapshot(), 60*time.Second)
	var stored []string
	for p, code := range refused {
		if got[p] > 0 {
			stored = append(stored, fmt.Sprintf("%s (%s)", p, code))
		}
	}
	if len(stored) > 0 {
		t.Fatalf("%d of %d records reported refused are in the sink, e.g. %v", len(stored), len(refused), stored[:min(len(stored), 5)])
	}
	if err := d.stop(30 * time.Second); err != nil {
		t.Fatalf("final graceful stop: %v", err)
	}
}
