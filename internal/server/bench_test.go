package server

import (
	"bufio"
	"bytes"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/wire"
)

// BenchmarkConnPush measures the connection handler's per-frame cost:
// one producer pipelining single-record Buffered pushes over a Unix socket
// into a real wab.Log (no fdatasync on the path), answers read as they
// come — in wire version 1, and in version 2 after a Hello (each record
// then stored with its producer id, sequence number and event time) —
// with admission off (no budget) and on (every frame reserved from a
// 512 MiB budget, the daemon's fallback, warmed up). Besides the wall
// time it reports the process's CPU time per frame (cpu-ns/op: producer,
// connection and flusher together), steadier on a shared machine.
//
//	go test -run '^$' -bench ConnPush -count 10 ./internal/server
func BenchmarkConnPush(b *testing.B) {
	for _, v := range []uint8{1, 2} {
		for _, admission := range []bool{false, true} {
			name := fmt.Sprintf("v%d/admission=%v", v, admission)
			b.Run(name, func(b *testing.B) { benchConnPush(b, v, admission) })
		}
	}
}

func benchConnPush(b *testing.B, version uint8, admission bool) {
	var opts Options
	if admission {
		budget := flow.NewBudget(flow.BudgetOptions{Limit: flow.FallbackLimit, WarmupFraction: 1})
		b.Cleanup(budget.Close)
		opts.Budget, opts.AdmissionWait = budget, 100*time.Millisecond
	}
	e := newEnv(b, envConfig{opts: opts})
	c := e.dial()
	if version == 2 {
		c.hello(wire.FlagIdempotent, testProducer)
	}
	payload := bytes.Repeat([]byte("p"), 100)
	const chunk = 64
	var frames []byte
	for i := range chunk {
		frames = wire.AppendPush(frames, wire.Push{Version: version, RequestID: uint64(i + 1), Durability: wire.Buffered,
			FirstSeq: uint64(i), EventTime: 1, Payloads: [][]byte{payload}})
	}
	br := bufio.NewReaderSize(c.nc, 64<<10)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	errc := make(chan error, 1)
	go func() {
		for sent := 0; sent < b.N; sent += chunk {
			n := min(chunk, b.N-sent)
			if _, err := c.nc.Write(frames[:n*len(frames)/chunk]); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i := 0; i < b.N; i++ {
		resp, err := wire.ReadResponse(br)
		if err != nil {
			b.Fatal(err)
		}
		if resp.Type != wire.TypeAck {
			b.Fatalf("response %d: %+v", i, resp)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
