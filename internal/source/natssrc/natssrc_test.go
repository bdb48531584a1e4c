package natssrc_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/source/natssrc"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/source"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const srcName = "nats"

// natsURL is the test server's URL, or skips the test loudly (fails it
// under WEIR_REQUIRE_SERVICES=1) when no JetStream server answers there.
func natsURL(t *testing.T) string {
	t.Helper()
	return testenv.NATS(t)
}

type env struct {
	t       *testing.T
	url     string
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  string
	subject string
	wab     *enginetest.WAB
	check   *enginetest.Checker
}

// newEnv creates a stream of its own for the test, deleted at the end.
func newEnv(t *testing.T) *env {
	t.Helper()
	url := natsURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	e := &env{t: t, url: url, stream: "WEIR_TEST_" + suffix, subject: "weir.test." + suffix}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	e.nc = nc
	if e.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: e.stream, Subjects: []string{e.subject + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.js.DeleteStream(ctx, e.stream)
		nc.Close()
	})
	e.wab = enginetest.OpenWAB(t, 2)
	e.check = enginetest.NewTestChecker(t, e.wab.Gate(t), nil)
	return e
}

func (e *env) publish(prefix string, n int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		p := []byte(fmt.Sprintf("%s-%06d", prefix, i))
		ack, err := e.js.Publish(ctx, fmt.Sprintf("%s.%d", e.subject, i%3), p)
		if err != nil {
			e.t.Fatal(err)
		}
		e.check.ExpectPayload(p, enginetest.Position{Source: srcName, Partition: e.stream, Offset: int64(ack.Sequence)})
	}
}

func (e *env) source(mod func(*natssrc.Options)) *natssrc.Source {
	e.t.Helper()
	o := natssrc.Options{
		URL:          e.url,
		Stream:       e.stream,
		Consumer:     "weir",
		FetchBatch:   64,
		FetchMaxWait: 200 * time.Millisecond,
		AckWait:      2 * time.Second,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnAck: func(stream string, seq uint64) {
			e.check.Acked(srcName, stream, int64(seq))
		},
	}
	if mod != nil {
		mod(&o)
	}
	s, err := natssrc.New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// settled waits until every message is durable and the consumer has
// nothing pending or unacked.
func (e *env) settled() {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		cons, err := e.js.Consumer(ctx, e.stream, "weir")
		var info *jetstream.ConsumerInfo
		if err == nil {
			info, err = cons.Info(ctx)
		}
		cancel()
		if err == nil && len(e.check.Missing()) == 0 && info.NumAckPending == 0 && info.NumPending == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("not settled: %d missing, consumer %+v, err %v", len(e.check.Missing()), info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type running = enginetest.Running

func start(ctx context.Context, s *natssrc.Source, g source.Gate) *running {
	return enginetest.Start(ctx, s, g, nil)
}

func TestAllPublishedDurable(t *testing.T) {
	e := newEnv(t)
	e.publish("a", 500)
	r := start(context.Background(), e.source(nil), e.check)
	e.publish("b", 100) // while consuming
	e.settled()
	r.Stop(t)
	copies := enginetest.Summary(t, e.wab.Records(t))
	if len(copies) != 600 {
		t.Fatalf("%d distinct records stored, want 600", len(copies))
	}
	for p, n := range copies {
		if n != 1 {
			t.Fatalf("%s stored %d times", p, n)
		}
	}
}

// The source dies after a batch is durable and before it is acked; the
// restarted source gets the batch again after AckWait, with the same ids.
func TestCrashBeforeAckRedelivers(t *testing.T) {
	e := newEnv(t)
	e.publish("a", 300)
	ctx, cancel := context.WithCancel(context.Background())
	crash := &enginetest.CrashAfter{Inner: e.check, N: 2, OnCrash: func([]source.Record) { cancel() }}
	r := start(ctx, e.source(nil), crash)
	select {
	case err := <-r.Done():
		if err != nil {
			t.Fatalf("Run after the crash: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("source did not stop")
	}
	if len(crash.Lost) == 0 {
		t.Fatal("no batch crashed")
	}
	lost := map[string]bool{}
	for _, rec := range crash.Lost {
		lost[string(rec.Payload)] = true
	}
	e.publish("b", 100) // the stream moves on while the source is down
	r = start(context.Background(), e.source(nil), e.check)
	e.settled()
	r.Stop(t)
	copies := enginetest.Summary(t, e.wab.Records(t))
	if len(copies) != 400 {
		t.Fatalf("%d distinct records stored, want 400", len(copies))
	}
	for p, n := range copies {
		if want := map[bool]int{true: 2, false: 1}[lost[p]]; n != want {
			t.Fatalf("%s stored %d times, want %d (unacked at the crash: %v)", p, n, want, lost[p])
		}
	}
}

func TestOptionsValidated(t *testing.T) {
	for _, o := range []natssrc.Options{
		{},
		{Stream: "S", Consumer: "c", AckWait: time.Second, FetchMaxWait: 2 * time.Second},
		{Stream: "S", Consumer: "c", FetchBatch: 100, MaxAckPending: 10},
	} {
		if _, err := natssrc.New(o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
}
