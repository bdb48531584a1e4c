package systest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/wab"
)

// kafkaPos is where a produced record landed.
type kafkaPos struct {
	partition int32
	offset    int64
}

// kafkaLedger remembers every record the brokers acknowledged.
type kafkaLedger struct {
	mu    sync.Mutex
	bySrc map[string]kafkaPos // payload → position
}

func (l *kafkaLedger) add(payload string, p kafkaPos) {
	l.mu.Lock()
	l.bySrc[payload] = p
	l.mu.Unlock()
}

func (l *kafkaLedger) snapshot() map[string]kafkaPos {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]kafkaPos, len(l.bySrc))
	for k, v := range l.bySrc {
		out[k] = v
	}
	return out
}

// startKafka starts an in-process cluster with topic (and the others,
// with as many partitions); the client produces to topic.
func startKafka(t *testing.T, topic string, partitions int, others ...string) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), append([]string{topic}, others...)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c, cl
}

// produceKafka produces n records named prefix-i in batches of batch,
// pausing between batches, until done or ctx ends.
func produceKafka(ctx context.Context, t *testing.T, cl *kgo.Client, prefix string, n, batch int, pause time.Duration, l *kafkaLedger) {
	for i := 0; i < n; i += batch {
		var recs []*kgo.Record
		for j := i; j < min(i+batch, n); j++ {
			recs = append(recs, &kgo.Record{Value: []byte(fmt.Sprintf("%s-%06d", prefix, j))})
		}
		res := cl.ProduceSync(ctx, recs...)
		for _, r := range res {
			if r.Err != nil {
				if ctx.Err() == nil {
					t.Errorf("produce: %v", r.Err)
				}
				return
			}
			l.add(string(r.Record.Value), kafkaPos{r.Record.Partition, r.Record.Offset})
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

// committedOffsets asks the cluster for the group's committed offsets.
func committedOffsets(t *testing.T, cl *kgo.Client, group, topic string) map[int32]int64 {
	t.Helper()
	out, err := fetchCommitted(cl, group, topic)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fetchCommitted is committedOffsets for any goroutine: it returns the
// error instead of failing the test.
func fetchCommitted(cl *kgo.Client, group, topic string) (map[int32]int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	rt.Partitions = []int32{0, 1, 2, 3, 4, 5, 6, 7}
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("offset fetch: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		if errors.Is(err, kerr.GroupIDNotFound) {
			// No member has joined yet: nothing is committed.
			return map[int32]int64{}, nil
		}
		return nil, fmt.Errorf("offset fetch: %w", err)
	}
	out := map[int32]int64{}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
				return nil, fmt.Errorf("offset fetch: partition %d: %w", p.Partition, err)
			}
			if p.Offset >= 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out, nil
}

// waitCommitted waits until the group's committed offsets sum past
// before.
func waitCommitted(t *testing.T, cl *kgo.Client, group, topic string, before int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		// A fetch can fail while the group forms (a coordinator loading,
		// say): look again until the deadline.
		committed, err := fetchCommitted(cl, group, topic)
		var sum int64
		for _, o := range committed {
			sum += o
		}
		if err == nil && sum > before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed offsets stuck at %d for %v (last fetch error: %v)", sum, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wabPayloads reads every record still in the write-ahead buffer's
// segments (open and sealed).
func wabPayloads(t *testing.T, dir string) map[string]int {
	t.Helper()
	out, err := readWABPayloads(dir)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readWABPayloads is wabPayloads for any goroutine, and for the buffer of a
// running daemon: a torn or half-written tail ends a segment's records, and
// a listed segment that is gone when opened (sealed, i.e. renamed, or
// removed) is an error wrapping fs.ErrNotExist, so the caller reads again.
func readWABPayloads(dir string) (map[string]int, error) {
	out := map[string]int{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return nil
		}
		m, err := segmentPayloads(p)
		if errors.Is(err, fs.ErrNotExist) {
			return err
		}
		for payload, n := range m {
			out[payload] += n
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// segmentPayloads counts the records of one buffer segment up to its end
// or its first torn or half-written record. A file that is not a segment
// (LOCK, sidecars) or has no header yet has none; a file that is gone is
// an error wrapping fs.ErrNotExist.
func segmentPayloads(path string) (map[string]int, error) {
	r, err := wab.OpenSegment(vfs.OS, path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, nil
	}
	defer r.Close()
	out := map[string]int{}
	for {
		rec, err := r.Next()
		if err != nil {
			return out, nil
		}
		out[string(rec.Payload)]++
	}
}

// durableNow is what a crash has left on disk: raw plus the buffer.
func durableNow(t *testing.T, d *daemon) map[string]int {
	t.Helper()
	got, err := readDurable(d)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// readDurable counts what is durable in d's data directory, raw plus the
// buffer, and may run while d does. The buffer is read first: a record
// that leaves it (the drain delivered it and removed its segment) is in
// raw before that, so reading raw second cannot miss it. A segment sealed
// or removed under the read makes it read the buffer again.
func readDurable(d *daemon) (map[string]int, error) {
	var got map[string]int
	var err error
	for range 20 {
		if got, err = readWABPayloads(d.wabDir()); !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read buffer %s: %w", d.wabDir(), err)
	}
	raw, err := readSinkPayloads(d.outDir())
	if err != nil {
		return nil, fmt.Errorf("read raw %s: %w", d.outDir(), err)
	}
	for p, n := range raw {
		got[p] += n
	}
	return got, nil
}

func writeConfig(t testing.TB, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "weir.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// kafkaSourceTOML is a [[source]] of type kafka; extra lines are added to
// its [source.kafka] table.
func kafkaSourceTOML(name, group, topic string, brokers []string, extra ...string) string {
	return fmt.Sprintf(`
[[source]]
name = %q
type = "kafka"
[source.kafka]
brokers = ["%s"]
topics = [%q]
group = %q
cluster = "systest"
max_poll_records = 200
# A killed member holds its partitions until its session expires.
session_timeout = "6s"
rebalance_timeout = "8s"
`, name, strings.Join(brokers, `", "`), topic, group) + strings.Join(append(extra, ""), "\n")
}

// checkCommittedBehindDurable: after a kill, every record below the
// group's committed offset of its partition is durable in raw or the
// buffer. A committed offset ahead of that would be silent loss.
func checkCommittedBehindDurable(t *testing.T, cycle int, committed map[int32]int64, produced map[string]kafkaPos, durable map[string]int) {
	t.Helper()
	bad := committedNotDurable(committed, produced, durable)
	for _, payload := range bad[:min(5, len(bad))] {
		pos := produced[payload]
		t.Errorf("cycle %d: %q (partition %d offset %d) is below the committed offset %d but in neither raw nor the buffer",
			cycle, payload, pos.partition, pos.offset, committed[pos.partition])
	}
	if len(bad) > 0 {
		t.Fatalf("cycle %d: %d committed records not durable", cycle, len(bad))
	}
}

// committedNotDurable lists, by partition and offset, the produced records
// below their partition's committed offset that durable lacks.
func committedNotDurable(committed map[int32]int64, produced map[string]kafkaPos, durable map[string]int) []string {
	var bad []string
	for payload, pos := range produced {
		if pos.offset < committed[pos.partition] && durable[payload] == 0 {
			bad = append(bad, payload)
		}
	}
	slices.SortFunc(bad, func(a, b string) int {
		pa, pb := produced[a], produced[b]
		if c := cmp.Compare(pa.partition, pb.partition); c != 0 {
			return c
		}
		return cmp.Compare(pa.offset, pb.offset)
	})
	return bad
}

// TestKafkaSourceKill9: a Kafka source under the daemon, killed -9 again
// and again mid-stream; every produced record ends in raw, and the group's
// committed offsets never lead what is durable. A file secondary is fed
// from raw and also ends complete.
func TestKafkaSourceKill9(t *testing.T) {
	const (
		topic = "orders"
		group = "weir-sys"
		n     = 6000
	)
	c, cl := startKafka(t, topic, 3)
	cfg := writeConfig(t, kafkaSourceTOML("orders", group, topic, c.ListenAddrs())+`
[[secondary]]
name = "copy"
type = "file"
`)
	d := newDaemon(t, "--config", cfg, "--coverage-flush-interval", "50ms")
	d.start()

	produced := produceAndKill(t, d, cl, group, topic, "k", n, func() map[string]int { return durableNow(t, d) }, d.start)
	want := make(map[string]bool, n)
	for p := range produced {
		want[p] = true
	}
	got := waitDelivered(t, d, want, 90*time.Second)
	dups := 0
	for _, c := range got {
		dups += c - 1
	}
	t.Logf("all %d records in raw after %d kills (%d duplicates)", n, sourceKillCycles, dups)

	// The secondary catches up from raw.
	copyDir := filepath.Join(d.dir, "secondary", "copy")
	deadline := time.Now().Add(60 * time.Second)
	for {
		sec := sinkPayloads(t, copyDir)
		missing := 0
		for p := range want {
			if sec[p] == 0 {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("secondary still misses %d records\n%s", missing, tail(d.log.String(), 4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	m := d.waitScrape("backlog 0", 30*time.Second, func(m map[string]float64) bool {
		_, ok := m["weir_recovery_backlog"]
		return ok && m["weir_recovery_backlog"] == 0
	})
	if sum(m, "weir_source_records_written_total") == 0 {
		t.Errorf("weir_source_records_written_total is 0 after the last restart")
	}
	if err := d.stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, tail(d.log.String(), 4000))
	}
	committed := committedOffsets(t, cl, group, topic)
	checkCommittedBehindDurable(t, 0, committed, produced, durableNow(t, d))
}

// produceAndKill produces n records named prefix-i into topic at a steady
// pace while d is killed -9 sourceKillCycles times, each a little after
// the group has committed past what it had at the last kill. Right after
// each kill every record below the committed offsets must be in durable()
// (what survived the kill); restart starts d again. The number of kills is
// fixed (WEIR_KILL_CYCLES sizes TestKill9UnderLoad only): the producer
// runs for about n/200 seconds. It returns every produced record once the
// producer is done.
func produceAndKill(t *testing.T, d *daemon, cl *kgo.Client, group, topic, prefix string, n int,
	durable func() map[string]int, restart func()) map[string]kafkaPos {
	t.Helper()
	l := &kafkaLedger{bySrc: map[string]kafkaPos{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		produceKafka(ctx, t, cl, prefix, n, 20, 100*time.Millisecond, l)
	}()
	var before int64
	for cycle := 1; cycle <= sourceKillCycles; cycle++ {
		// Kill only once this run consumes (a restarted member waits for
		// the group to drop the killed one), a little after that.
		waitCommitted(t, cl, group, topic, min(before, int64(n-1)), 30*time.Second)
		time.Sleep(time.Duration(200+cycle*137%400) * time.Millisecond)
		d.kill()
		committed := committedOffsets(t, cl, group, topic)
		produced := l.snapshot()
		checkCommittedBehindDurable(t, cycle, committed, produced, durable())
		t.Logf("cycle %d: produced %d, committed %v", cycle, len(produced), committed)
		before = 0
		for _, o := range committed {
			before += o
		}
		restart()
	}
	wg.Wait()
	produced := l.snapshot()
	if len(produced) != n {
		t.Fatalf("produced %d of %d", len(produced), n)
	}
	return produced
}
