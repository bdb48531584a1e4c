package server

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/weir-io/weir/source"
	"github.com/weir-io/weir/wab"
	"github.com/weir-io/weir/wire"
)

// bufferGate is a gate that is the write-ahead buffer, as engine.WABGate is.
type bufferGate struct{ *wab.Log }

func (bufferGate) Write(context.Context, []source.Record) error {
	return errors.New("bufferGate: Write unused by the ingress")
}

// notBuffer is a gate that is not a buffer (a primary-raw sink, say).
type notBuffer struct{}

func (notBuffer) Write(context.Context, []source.Record) error { return nil }

func TestIngressIsAProducerManagedSource(t *testing.T) {
	e := newEnv(t, envConfig{nolis: true})
	in := NewIngress(IngressOptions{SocketPath: e.sock, StopTimeout: answerTimeout,
		Server: Options{Logger: discardLogger()}})
	if in.Name() != "socket" || in.Regime() != source.ProducerManaged || in.Replayable() {
		t.Fatalf("name %q regime %v replayable %v", in.Name(), in.Regime(), in.Replayable())
	}
	if err := in.Run(context.Background(), notBuffer{}, nil); !errors.Is(err, ErrIngressGate) {
		t.Fatalf("Run with a gate that is not a buffer: %v, want ErrIngressGate", err)
	}
	if _, err := os.Lstat(e.sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket bound although the gate was refused: %v", err)
	}

	// Two rounds: Run serves until its context ends and shuts down; a
	// second Run (a restart) binds again and serves the same buffer.
	for round := 1; round <= 2; round++ {
		if err := in.Listen(bufferGate{e.log}); err != nil {
			t.Fatalf("round %d: listen: %v", round, err)
		}
		// A second ingress on the same socket fails at Listen.
		other := NewIngress(IngressOptions{SocketPath: e.sock, StopTimeout: answerTimeout})
		if err := other.Listen(bufferGate{e.log}); err == nil {
			other.Shutdown()
			t.Fatalf("round %d: a second ingress bound the socket in use", round)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- in.Run(ctx, bufferGate{e.log}, nil) }()
		c := e.dial()
		c.push(uint64(round), wire.Durable, []byte(`{"round":1}`), []byte(`{"round":2}`))
		c.expectAck(uint64(round), 2)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("round %d: Run: %v", round, err)
		}
		c.expectClosed(answerTimeout)
		if _, err := net.Dial("unix", e.sock); err == nil {
			t.Fatalf("round %d: socket still accepts after Run returned", round)
		}
	}
	// What was acked is in the buffer: 4 records in shard 0's segments.
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	if err := e.log.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var n uint64
	segs, _ := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(e.sock)), "wab", "*", "*.sealed"))
	for _, p := range segs {
		info, err := wab.InspectSegment(e.fs, p)
		if err != nil {
			t.Fatal(err)
		}
		n += uint64(info.Records)
	}
	if n != 4 {
		t.Fatalf("%d records in the buffer, want 4 (segments %v)", n, segs)
	}
}
