package kafkasrc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/source/kafkasrc"
	"github.com/weir-io/weir/source"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const srcName = "kafka"

type env struct {
	t       *testing.T
	c       *kfake.Cluster
	topic   string
	group   string
	wab     *enginetest.WAB
	check   *enginetest.Checker
	commits atomic.Int64
}

// newEnv starts an in-process cluster whose every OffsetCommit request is
// checked against what is durable, before the broker applies it.
func newEnv(t *testing.T, partitions int32) *env { return newEnvWith(t, partitions, nil) }

// newEnvWith collects violations with onViolation instead of failing the
// test when it is not nil.
func newEnvWith(t *testing.T, partitions int32, onViolation func(enginetest.Violation)) *env {
	t.Helper()
	topic, group := "events", "weir"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e := &env{t: t, c: c, topic: topic, group: group}
	e.wab = enginetest.OpenWAB(t, 2)
	if onViolation != nil {
		e.check = enginetest.NewChecker(e.wab.Gate(t), nil, onViolation)
	} else {
		e.check = enginetest.NewTestChecker(t, e.wab.Gate(t), nil)
	}
	topicID := e.topicID()
	c.ControlKey(kmsg.OffsetCommit.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.OffsetCommitRequest)
		for _, tp := range req.Topics {
			if tp.Topic == "" && tp.TopicID == topicID { // v10+ names topics by id
				tp.Topic = e.topic
			}
			for _, p := range tp.Partitions {
				e.commits.Add(1)
				e.check.Committed(srcName, kafkasrc.PartitionKey(tp.Topic, p.Partition), p.Offset)
			}
		}
		return nil, nil, false // observe only; the broker handles it
	})
	return e
}

// topicID asks the cluster for the topic's id.
func (e *env) topicID() [16]byte {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.ListenAddrs()...))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(e.topic)
	req.Topics = []kmsg.MetadataRequestTopic{rt}
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil || len(resp.Topics) != 1 {
		e.t.Fatalf("metadata: %v", err)
	}
	return resp.Topics[0].TopicID
}

func (e *env) source(name string, mod func(*kafkasrc.Options)) *kafkasrc.Source {
	o := kafkasrc.Options{
		Name:           name,
		Brokers:        e.c.ListenAddrs(),
		Topics:         []string{e.topic},
		Group:          e.group,
		MaxPollRecords: 50,
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		ClientOptions: []kgo.Opt{
			kgo.HeartbeatInterval(100 * time.Millisecond),
			kgo.FetchMaxWait(100 * time.Millisecond),
		},
		OnCommit: func(topic string, p int32, next int64) {
			e.check.Committed(srcName, kafkasrc.PartitionKey(topic, p), next)
		},
	}
	if mod != nil {
		mod(&o)
	}
	s, err := kafkasrc.New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// produce writes n unique records and registers their positions.
func (e *env) produce(prefix string, n int) {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.ListenAddrs()...), kgo.DefaultProduceTopic(e.topic))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("%s-%06d", prefix, i))}
	}
	res := cl.ProduceSync(context.Background(), recs...)
	if err := res.FirstErr(); err != nil {
		e.t.Fatal(err)
	}
	for _, r := range res {
		p := enginetest.Position{Source: srcName, Partition: kafkasrc.PartitionKey(r.Record.Topic, r.Record.Partition), Offset: r.Record.Offset}
		e.check.ExpectPayload(r.Record.Value, p)
	}
}

// committed reads the group's committed offsets from the broker.
func (e *env) committed() map[int32]int64 {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.ListenAddrs()...))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = e.group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = e.topic
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = e.group
	rgt := kmsg.NewOffsetFetchRequestGroupTopic()
	rgt.Topic = e.topic
	for p := range e.highWater() {
		rgt.Partitions = append(rgt.Partitions, p)
		rt.Partitions = append(rt.Partitions, p)
	}
	rg.Topics = []kmsg.OffsetFetchRequestGroupTopic{rgt}
	req.Groups = []kmsg.OffsetFetchRequestGroup{rg}
	req.Topics = []kmsg.OffsetFetchRequestTopic{rt}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.Offset >= 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				if p.Offset >= 0 {
					out[p.Partition] = p.Offset
				}
			}
		}
	}
	return out
}

// highWater is the next offset of every partition, from what was produced.
func (e *env) highWater() map[int32]int64 {
	out := map[int32]int64{}
	for _, p := range e.check.Positions() {
		var part int32
		fmt.Sscanf(p.Partition[len(e.topic)+1:], "%d", &part)
		out[part] = max(out[part], p.Offset+1)
	}
	return out
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("timed out waiting for %s", what)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type running = enginetest.Running

func start(s *kafkasrc.Source, g source.Gate) *running {
	return enginetest.Start(context.Background(), s, g, nil)
}

func (e *env) waitAllCommitted() {
	e.t.Helper()
	want := e.highWater()
	waitFor(e.t, "every record durable", 15*time.Second, func() bool { return len(e.check.Missing()) == 0 })
	var got map[int32]int64
	waitFor(e.t, "offsets committed at high water", 15*time.Second, func() bool {
		got = e.committed()
		for p, hw := range want {
			if got[p] != hw {
				return false
			}
		}
		return true
	})
	if e.t.Failed() {
		e.t.Logf("committed %v, high water %v, %d commits seen", got, want, e.commits.Load())
	}
}

func TestConsumeCommitsHighWater(t *testing.T) {
	e := newEnv(t, 3)
	e.produce("a", 500)
	r := start(e.source("kafka", nil), e.check)
	e.waitAllCommitted()
	r.Stop(t)
	copies := enginetest.Summary(t, e.wab.Records(t))
	if len(copies) != 500 {
		t.Fatalf("%d distinct records stored, want 500", len(copies))
	}
	for p, n := range copies {
		if n != 1 {
			t.Fatalf("%s stored %d times", p, n)
		}
	}
}

func TestPerRecordCommit(t *testing.T) {
	e := newEnv(t, 1)
	e.produce("a", 40)
	r := start(e.source("kafka", func(o *kafkasrc.Options) { o.PerRecordCommit = true }), e.check)
	e.waitAllCommitted()
	r.Stop(t)
	if n := e.commits.Load(); n < 40 {
		t.Fatalf("%d partition commits for 40 records, want one per record", n)
	}
}

// Two instances in one group: A alone, then B joins mid-stream, then A
// leaves. Every commit on the broker is checked against what is durable.
func TestRebalanceLosesNothingCommitsNothingAhead(t *testing.T) {
	e := newEnv(t, 4)
	const waves, per = 20, 100
	var prod sync.WaitGroup
	produced := make(chan int, waves)
	prod.Add(1)
	go func() {
		defer prod.Done()
		for i := range waves {
			e.produce(fmt.Sprintf("w%02d", i), per)
			produced <- i
			time.Sleep(30 * time.Millisecond)
		}
	}()
	ga, gb := &enginetest.CountGate{Inner: e.check}, &enginetest.CountGate{Inner: e.check}
	a := start(e.source("kafka", nil), ga)
	waitFor(t, "A to write", 30*time.Second, func() bool { return ga.N.Load() >= 300 })
	b := start(e.source("kafka", nil), gb)
	waitFor(t, "B to write", 30*time.Second, func() bool { return gb.N.Load() >= 200 })
	a.Stop(t)
	prod.Wait()
	e.waitAllCommitted()
	b.Stop(t)
	if ga.N.Load() == 0 || gb.N.Load() == 0 {
		t.Fatalf("A wrote %d, B wrote %d: the group did not share the partitions", ga.N.Load(), gb.N.Load())
	}
	copies := enginetest.Summary(t, e.wab.Records(t))
	if len(copies) != waves*per {
		t.Fatalf("%d distinct records stored, want %d", len(copies), waves*per)
	}
	t.Logf("A wrote %d, B wrote %d, %d duplicates absorbed by id, %d commits checked",
		ga.N.Load(), gb.N.Load(), int(ga.N.Load()+gb.N.Load())-waves*per, e.commits.Load())
}

// The broker answers one OffsetCommit with a retriable error for every
// partition: the source retries, loses nothing, leads nothing.
func TestFailedCommitIsRetried(t *testing.T) {
	e := newEnv(t, 2)
	var injected atomic.Int64
	e.c.ControlKey(kmsg.OffsetCommit.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.OffsetCommitRequest)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, tp := range req.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = tp.Topic
			for _, p := range tp.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		injected.Add(1)
		return resp, nil, true // handled: this control is then dropped
	})
	e.produce("a", 200)
	r := start(e.source("kafka", func(o *kafkasrc.Options) { o.CommitRetryBackoff = 10 * time.Millisecond }), e.check)
	e.waitAllCommitted()
	r.Stop(t)
	if injected.Load() != 1 {
		t.Fatalf("injected %d failures, want 1", injected.Load())
	}
	if len(enginetest.Summary(t, e.wab.Records(t))) != 200 {
		t.Fatal("records missing")
	}
}

// A crash between the durable write and the commit: the restarted source
// re-reads exactly the uncommitted batch, with the same ids.
func TestRestartRereadsFromCommitted(t *testing.T) {
	e := newEnv(t, 2)
	e.produce("a", 300)
	crash := &enginetest.CrashAfter{Inner: e.check, N: 3}
	r := start(e.source("kafka", nil), crash)
	select {
	case err := <-r.Done():
		if !errors.Is(err, enginetest.ErrCrashed) {
			t.Fatalf("Run = %v, want the crash", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("source did not stop on the gate error")
	}
	r.Cancel()
	lost := map[string]bool{}
	for _, rec := range crash.Lost {
		lost[string(rec.Payload)] = true
	}
	r = start(e.source("kafka", nil), e.check)
	e.waitAllCommitted()
	r.Stop(t)
	copies := enginetest.Summary(t, e.wab.Records(t))
	if len(copies) != 300 {
		t.Fatalf("%d distinct records stored, want 300", len(copies))
	}
	for p, n := range copies {
		if want := map[bool]int{true: 2, false: 1}[lost[p]]; n != want {
			t.Fatalf("%s stored %d times, want %d (in the uncommitted batch: %v)", p, n, want, lost[p])
		}
	}
}

func TestOptionsRequired(t *testing.T) {
	if _, err := kafkasrc.New(kafkasrc.Options{}); err == nil {
		t.Fatal("New without brokers, topics and group succeeded")
	}
}

// The broker-side observation catches a commit that leads, whoever makes it.
func TestCheckerCatchesLeadingCommit(t *testing.T) {
	var mu sync.Mutex
	var viols []enginetest.Violation
	e := newEnvWith(t, 1, func(v enginetest.Violation) { mu.Lock(); viols = append(viols, v); mu.Unlock() })
	e.produce("a", 10)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.ListenAddrs()...), kgo.ConsumerGroup(e.group),
		kgo.ConsumeTopics(e.topic), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fs := cl.PollFetches(ctx) // join the group; nothing goes through the gate
	if len(fs.Records()) == 0 {
		t.Fatal("no records polled")
	}
	if err := cl.CommitRecords(ctx, fs.Records()...); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(viols) == 0 || viols[0].Kind != "lead" {
		t.Fatalf("violations = %v, want a lead (%d commits seen, %d records polled)", viols, e.commits.Load(), len(fs.Records()))
	}
}
