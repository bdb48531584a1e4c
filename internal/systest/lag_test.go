package systest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// lagRecordBytes is the value size of the lag test's Kafka records.
const lagRecordBytes = 64 << 10

// produceLag produces records of lagRecordBytes named "lag-<i>|" for i in
// [from, to) to topic.
func produceLag(t *testing.T, cl *kgo.Client, from, to int) {
	t.Helper()
	ctx := ctxTimeout(t, 5*time.Minute)
	fill := make([]byte, lagRecordBytes)
	for i := range fill {
		fill[i] = 'a' + byte(i%26)
	}
	const batch = 64
	for i := from; i < to; i += batch {
		var recs []*kgo.Record
		for j := i; j < min(i+batch, to); j++ {
			v := make([]byte, lagRecordBytes)
			copy(v, fill)
			copy(v, lagHeader(j))
			recs = append(recs, &kgo.Record{Value: v})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
}

func lagHeader(i int) string { return fmt.Sprintf("lag-%07d|", i) }

// rawHeaders counts the lag headers in a file raw (open files included).
func rawHeaders(dir string) (map[string]int, error) {
	lines, err := readSinkLines(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, l := range lines {
		h, _, _ := strings.Cut(string(l.Payload[:min(len(l.Payload), 16)]), "|")
		out[h+"|"]++
	}
	return out, nil
}

// TestKafkaLagRestart: a daemon restarts against a deep backlog — a
// sealed write-ahead buffer backlog left by a kill -9 while its sink hung,
// plus WEIR_LAG_MIB (default 128) MiB of unread 64 KiB records on a
// 4-partition kfake topic — with a 32 MiB budget warming up from a
// quarter. Its memory, sampled every 100 ms with the budget's grantable
// bytes, ramps with warm-up and its peak RSS stays under the idle daemon's
// plus overloadHeadroom × the budget; the consumer group goes through no
// rebalance (one generation, the restart's join) while flow control
// pauses and resumes fetching; and raw ends with every produced record.
// The soak is WEIR_LAG_MIB=1024.
func TestKafkaLagRestart(t *testing.T) {
	const (
		topic  = "lag"
		group  = "weir-lag"
		budget = 32 << 20
	)
	lagMiB := envInt(t, "WEIR_LAG_MIB", 128)
	n := lagMiB << 20 / lagRecordBytes
	c, cl := startKafka(t, topic, 4, "lag-idle")
	cfg := writeConfig(t, kafkaSourceTOML("orders", group, topic, c.ListenAddrs()))
	args := []string{"--config", cfg, "--memory-budget", fmt.Sprint(budget), "--coverage-flush-interval", "100ms"}

	// The buffer backlog: a quarter of the records read into the buffer
	// while the sink's first write hangs, then kill -9.
	produceLag(t, cl, 0, n/4)
	d := newDaemon(t, args...)
	d.env = []string{"WEIR_FAULTS=write:*/out/*:delay=1h"}
	d.startNoSocket()
	d.waitScrape("a quarter of the records in the buffer", 2*time.Minute, func(m map[string]float64) bool {
		return written(m) >= float64(n/4)
	})
	d.kill()
	produceLag(t, cl, n/4, n)

	idle := idleHWM(t, (*daemon).startNoSocket, "--config",
		writeConfig(t, kafkaSourceTOML("orders", group+"-idle", "lag-idle", c.ListenAddrs())),
		"--memory-budget", fmt.Sprint(budget))

	gens := observeGenerations(c, group)
	d.env = nil
	start := time.Now()
	d.startNoSocket()
	mem := d.sampleMemory(100*time.Millisecond, true)
	paused := d.sampleRate(250*time.Millisecond, "weir_flow_source_paused")
	deadline := start.Add(5 * time.Minute)
	for {
		got, err := rawHeaders(d.outDir())
		if err != nil {
			t.Fatal(err)
		}
		missing := 0
		for i := range n {
			if got[lagHeader(i)] == 0 {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records not in raw 5 minutes after the restart\n%s", missing, n, tail(d.log.String(), 4000))
		}
		time.Sleep(250 * time.Millisecond)
	}
	took := time.Since(start)
	samples := mem.finish()
	paused.finish()
	_, peak, err := procMem(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	pausedSamples := 0
	for _, v := range paused.counts() {
		if v > 0 {
			pausedSamples++
		}
	}
	bound := idle + int64(overloadHeadroom()*budget)
	t.Logf("restart against %d MiB of Kafka lag (%d records, a quarter of them in the buffer): all in raw after %v; peak RSS %s (idle %s, budget %s, bound %s); source paused in %d samples of 250 ms; %d group generation(s)",
		lagMiB, n, took.Round(time.Millisecond), mib(float64(peak)), mib(float64(idle)), mib(budget), mib(float64(bound)),
		pausedSamples, gens.count())
	logMemSeries(t, samples)
	logFlowChanges(t, d, 40)
	if peak > bound {
		t.Errorf("peak RSS %s exceeds the bound %s", mib(float64(peak)), mib(float64(bound)))
	}
	if g := gens.count(); g != 1 {
		t.Errorf("the group went through %d generations after the restart, want 1 (no rebalance)", g)
	}
	// Warm-up: the first grantable is a quarter of the budget, and it
	// steps up (after flow.warmup_acks releases or flow.warmup_timeout,
	// 5 s) — never down.
	var first, stepped time.Duration = -1, -1
	var last float64
	for _, s := range samples {
		if s.grantable <= 0 {
			continue
		}
		if first < 0 {
			first = s.at
			if s.grantable > budget/4 {
				t.Errorf("grantable %s at the first sample (+%v), want a quarter of %s", mib(s.grantable), s.at, mib(budget))
			}
		}
		if s.grantable < last {
			t.Errorf("grantable fell from %s to %s at +%v", mib(last), mib(s.grantable), s.at)
		}
		if s.grantable > budget/4 && stepped < 0 {
			stepped = s.at
		}
		last = s.grantable
	}
	if stepped < 0 && took > 6*time.Second {
		t.Errorf("warm-up never stepped up in %v", took)
	}
	t.Logf("warm-up: a quarter grantable at +%v, more from +%v, %s at the end", first, stepped, mib(last))
}
