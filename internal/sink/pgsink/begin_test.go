package pgsink

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
)

// cutOnError forwards PostgreSQL connections and, once armed, drops a
// connection right after passing on the first server message that holds
// the SQLSTATE it waits for: the client reads the error, then finds the
// connection gone when it begins its next transaction.
type cutOnError struct {
	ln     net.Listener
	target string
	state  []byte // "C" + SQLSTATE + NUL, as in an ErrorResponse
	armed  atomic.Bool
	cuts   atomic.Int64
	wg     sync.WaitGroup
}

func newCutOnError(t *testing.T, target, sqlstate string) *cutOnError {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutOnError{ln: ln, target: target, state: []byte("C" + sqlstate + "\x00")}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.serve(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *cutOnError) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	go func() { _, _ = io.Copy(s, c); s.Close() }()
	buf := make([]byte, 64<<10)
	seen := false
	for {
		n, err := s.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
			chunk := buf[:n]
			if !seen && p.armed.Load() {
				if i := bytes.Index(chunk, p.state); i >= 0 {
					seen, chunk = true, chunk[i:]
				}
			}
			// Cut once the ReadyForQuery after the error has gone
			// through: the client has the whole answer.
			if seen && bytes.Contains(chunk, readyForQuery) {
				p.cuts.Add(1)
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// readyForQuery begins a ReadyForQuery message: 'Z', length 5.
var readyForQuery = []byte{'Z', 0, 0, 0, 5}

// TestBeginFailsAfterRefusedBatch: when the COPY or INSERT of a batch is
// refused — a row stored already (a replay), or a data error to isolate —
// the sink rolls back and begins another transaction on the same
// connection. If that connection is gone by then, Commit must fail
// transiently (the drain retries the batch), not crash the daemon; the
// retry on a fresh connection then stores the batch.
func TestBeginFailsAfterRefusedBatch(t *testing.T) {
	for _, tc := range []struct {
		name, method, sqlstate string
	}{
		{"copy meets a stored row", InsertCopy, "23505"},
		{"copy refused with a data error", InsertCopy, "23514"},
		{"unnest refused with a data error", InsertUnnest, "23514"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			target, err := testenv.PostgresTarget(e.dsn)
			if err != nil {
				t.Fatal(err)
			}
			proxy := newCutOnError(t, target, tc.sqlstate)
			via, err := testenv.PostgresVia(e.dsn, proxy.ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			s := e.open(t, via, Options{InsertMethod: tc.method, Timeout: 10 * time.Second})
			ctx := context.Background()
			e.exec(ctx, fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT no_poison CHECK (payload <> '\x706f69736f6e'::bytea)`,
				pgx.Identifier{e.table}.Sanitize()))
			batch := mkRecords("b", 10)
			if tc.sqlstate == "23505" {
				if _, err := s.Commit(ctx, sink.NewBatch(batch)); err != nil {
					t.Fatalf("first commit: %v", err)
				}
			} else {
				batch[4].Payload = []byte("poison")
			}
			proxy.armed.Store(true)
			_, err = s.Commit(ctx, sink.NewBatch(batch))
			if proxy.cuts.Load() == 0 {
				t.Fatalf("the batch was never refused with %s (commit: %v)", tc.sqlstate, err)
			}
			if err == nil || !sink.IsTransient(err) {
				t.Fatalf("commit over a connection lost after the refusal: %v, want a transient error", err)
			}
			proxy.armed.Store(false)
			res, err := s.Commit(ctx, sink.NewBatch(batch))
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			want := 0
			if tc.sqlstate != "23505" {
				want = 1
			}
			if len(res.Rejected) != want {
				t.Fatalf("retry rejected %v, want %d", res.Rejected, want)
			}
			if rows, distinct := e.countDistinct(ctx); rows != 10-want || distinct != rows {
				t.Fatalf("table holds %d rows (%d distinct), want %d", rows, distinct, 10-want)
			}
		})
	}
}
