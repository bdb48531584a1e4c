package kafkasink_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-io/weir/internal/sink/kafkasink"
	"github.com/weir-io/weir/sink"
)

// records makes n records named prefix-i with distinct ids.
func records(prefix string, n int) []sink.Record {
	out := make([]sink.Record, n)
	for i := range out {
		p := fmt.Sprintf("%s-%06d", prefix, i)
		sum := sha256.Sum256([]byte(p))
		out[i] = sink.Record{Payload: []byte(p), Source: "test", Received: time.Unix(1700000000, int64(i)).UTC()}
		copy(out[i].ID[:], sum[:])
	}
	return out
}

// slack is what a commit may take beyond the delivery timeout on a loaded
// machine (the race detector, other tests).
const slack = 3 * time.Second

// commitBounded commits b and fails the test if Commit takes longer than
// the delivery timeout plus slack; it returns Commit's error.
func commitBounded(t *testing.T, s *kafkasink.Sink, b sink.Batch, timeout time.Duration) error {
	t.Helper()
	start := time.Now()
	_, err := s.Commit(context.Background(), b)
	if took := time.Since(start); took > timeout+slack {
		t.Fatalf("Commit took %v, delivery timeout %v (err %v)", took.Round(time.Millisecond), timeout, err)
	}
	return err
}

// TestBrokerStopped: the broker goes away while batches stream in. The
// Commit under way and every one after it fail transient within the
// delivery timeout, never hang, and Health says the brokers are gone.
func TestBrokerStopped(t *testing.T) {
	c := newCluster(t, 3)
	const timeout = 2 * time.Second
	s := open(t, c, nil, func(o *kafkasink.Options) { o.DeliveryTimeout = timeout })
	var stopped atomic.Bool
	failures := 0
	for i := 0; failures < 3; i++ {
		if i == 5 {
			// Stop the broker while the sixth batch or one after it is
			// on its way.
			go func() {
				time.Sleep(time.Duration(i) * time.Millisecond)
				c.close()
				stopped.Store(true)
			}()
		}
		if i > 1000 {
			t.Fatalf("%d batches and the broker still takes them (stopped %v)", i, stopped.Load())
		}
		err := commitBounded(t, s, sink.NewBatch(records(fmt.Sprintf("stop-%d", i), 500)), timeout)
		switch {
		case err == nil && failures > 0:
			t.Fatalf("Commit succeeded after the broker stopped and a Commit failed")
		case err != nil && !sink.IsTransient(err):
			t.Fatalf("Commit with the broker stopped: permanent error %v", err)
		case err != nil && i < 5:
			t.Fatalf("Commit %d before the broker stopped: %v", i, err)
		case err != nil:
			failures++
			t.Logf("batch %d: %v", i, err)
		}
	}
	if h := s.Health(context.Background()); h.State != sink.Down || h.Reason == "" {
		t.Errorf("Health with the broker stopped: %v %q, want down with a reason", h.State, h.Reason)
	}
}

// TestBrokerSilent: the broker takes produce requests and never answers
// them (a hung broker, a black-holed network). Commit still returns, with
// a transient error, within the delivery timeout: the requests in flight
// are cancelled with the Commit's context, not left to the client's
// request timeout. When the broker answers again, the same batch commits.
func TestBrokerSilent(t *testing.T) {
	c := newCluster(t, 3)
	const timeout = 2 * time.Second
	s := open(t, c, nil, func(o *kafkasink.Options) { o.DeliveryTimeout = timeout })
	if err := commitBounded(t, s, sink.NewBatch(records("before", 100)), timeout); err != nil {
		t.Fatal(err)
	}
	var silent atomic.Bool
	silent.Store(true)
	c.kfake().ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.kfake().KeepControl()
		// Handled without a response or an error: the broker reads on
		// and never replies.
		return nil, nil, silent.Load()
	})
	b := sink.NewBatch(records("silent", 300))
	err := commitBounded(t, s, b, timeout)
	if err == nil || !sink.IsTransient(err) {
		t.Fatalf("Commit to a silent broker: %v, want a transient error", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("Commit to a silent broker: %v, want the delivery deadline's error", err)
	}
	silent.Store(false)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := commitBounded(t, s, b, timeout)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Commit still failing after the broker answers again: %v", err)
		}
	}
	got := readTopic(t, c)
	for _, r := range b.Records {
		if got[string(r.Payload)] == 0 {
			t.Fatalf("record %s missing after the retried Commit", r.Payload)
		}
	}
}

// readTopic counts the payloads in the topic.
func readTopic(t *testing.T, c *cluster) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stored, err := readBack(c)(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range stored {
		out[string(r.Payload)]++
	}
	return out
}

// TestMissingTopic: New refuses a topic the cluster does not have, and
// says so.
func TestMissingTopic(t *testing.T) {
	c := newCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := kafkasink.New(ctx, kafkasink.Options{Brokers: c.addrs(), Topic: "no-such-topic", DeliveryTimeout: 2 * time.Second})
	if err == nil {
		s.Close()
		t.Fatal("New with a missing topic succeeded")
	}
	if !strings.Contains(err.Error(), `topic "no-such-topic" does not exist`) {
		t.Errorf("New with a missing topic: %v", err)
	}
}
