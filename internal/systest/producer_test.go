package systest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/wire"
)

// ledger records what producers were told.
type ledger struct {
	mu     sync.Mutex
	acked  map[string]bool
	nacked map[wire.Code]int
	// refused are the payloads of Nacked requests, by code.
	refused map[string]wire.Code
	other   int // errors other than a Nack (connection lost for good, ctx)
	// unknown counts, among other, the records whose outcome the client
	// could not know (client.ErrOutcomeUnknown): they may be stored.
	unknown int
}

func newLedger() *ledger {
	return &ledger{acked: map[string]bool{}, nacked: map[wire.Code]int{}, refused: map[string]wire.Code{}}
}

func (l *ledger) result(payloads [][]byte, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		for _, p := range payloads {
			l.acked[string(p)] = true
		}
		return
	}
	if errors.Is(err, client.ErrOutcomeUnknown) {
		// Possibly stored: neither acked nor refused, whatever its cause.
		l.unknown += len(payloads)
		l.other += len(payloads)
		return
	}
	var ne *client.NackError
	if errors.As(err, &ne) {
		l.nacked[ne.Code] += len(payloads)
		for _, p := range payloads {
			l.refused[string(p)] = ne.Code
		}
		return
	}
	l.other += len(payloads)
}

func (l *ledger) snapshot() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]bool, len(l.acked))
	for k := range l.acked {
		out[k] = true
	}
	return out
}

func (l *ledger) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// produce pushes records named "<name>-<i>" (batch records per frame) on
// one connection until ctx ends or n records were handed over, recording
// every answer in l. It returns after every handed-over record is answered
// or the client gave up.
func produce(ctx context.Context, t testing.TB, socket, name string, n, batch int, tier client.Durability, l *ledger, closeWait time.Duration, opts ...client.Option) {
	c, err := client.Dial(ctx, socket, opts...)
	if err != nil {
		if ctx.Err() == nil {
			t.Errorf("producer %s: dial: %v", name, err)
		}
		return
	}
	for i := 0; n <= 0 || i < n; i += batch {
		payloads := make([][]byte, 0, batch)
		for j := i; j < i+batch && (n <= 0 || j < n); j++ {
			payloads = append(payloads, []byte(fmt.Sprintf("%s-%07d", name, j)))
		}
		err := c.PushAsync(ctx, payloads, tier, func(err error) { l.result(payloads, err) })
		if err != nil {
			break // ctx ended or the client closed
		}
	}
	// Give in-flight requests closeWait to be answered; whatever is left
	// unanswered was never acked.
	closeCtx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	c.Close(closeCtx)
}

// produceEach runs n producers, each with produce: the p-th named
// name(p), batch(p) records a frame, Durable for even p and Buffered for
// odd. wait returns once every one has returned.
func produceEach(ctx context.Context, t testing.TB, socket string, n int, name func(p int) string, batch func(p int) int,
	l *ledger, closeWait time.Duration, opts ...client.Option) (wait func()) {
	var wg sync.WaitGroup
	for p := range n {
		tier := client.Durable
		if p%2 == 1 {
			tier = client.Buffered
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			produce(ctx, t, socket, name(p), 0, batch(p), tier, l, closeWait, opts...)
		}()
	}
	return wg.Wait
}
