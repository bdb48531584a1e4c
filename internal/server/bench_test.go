package server

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/weir-io/weir/wire"
)

// BenchmarkConnPush measures the connection handler's per-frame cost:
// one producer pipelining single-record Buffered pushes over a Unix socket
// into a real wab.Log (no fdatasync on the path), answers read as they come.
func BenchmarkConnPush(b *testing.B) {
	e := newEnv(b, envConfig{})
	c := e.dial()
	payload := bytes.Repeat([]byte("p"), 100)
	const chunk = 64
	var frames []byte
	for i := range chunk {
		frames = pushFrame(frames, uint64(i+1), wire.Buffered, payload)
	}
	br := bufio.NewReaderSize(c.nc, 64<<10)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
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
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}
