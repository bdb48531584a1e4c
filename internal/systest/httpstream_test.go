package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestHTTPStreamResendAfterKill: a WebSocket producer streams batches,
// the daemon is killed with SIGKILL with some unanswered, and the
// producer reconnects under its producer id and resends every batch —
// those answered too. Every record is in Postgres once, under the id its
// first answer gave.
func TestHTTPStreamResendAfterKill(t *testing.T) {
	d, conn, table := pgDaemon(t)
	waitHTTP(t, d)
	const batches, per = 200, 4
	msg := func(b int) []byte {
		recs := make([]string, per)
		for i := range recs {
			recs[i] = fmt.Sprintf(`{"payload":{"b":%d,"i":%d}}`, b, i)
		}
		return fmt.Appendf(nil, `{"seq":%d,"records":[%s,%s,%s,%s]}`, b*per, recs[0], recs[1], recs[2], recs[3])
	}
	type ack struct {
		Seq   uint64   `json:"seq"`
		IDs   []string `json:"ids"`
		Error any      `json:"error"`
	}
	dial := func(producer string) (*websocket.Conn, string) {
		u := fmt.Sprintf("ws://127.0.0.1:%d/v1/stream", d.httpPort)
		if producer != "" {
			u += "?producer=" + producer
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var h struct{ Producer string }
		json.Unmarshal(b, &h)
		return c, h.Producer
	}
	first := map[uint64][]string{} // seq -> ids of its first answer
	readAcks := func(c *websocket.Conn, into map[uint64][]string, until func() bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for !until() {
			_, b, err := c.Read(ctx)
			if err != nil {
				return // the kill
			}
			var a ack
			if err := json.Unmarshal(b, &a); err != nil || a.Error != nil {
				t.Fatalf("answer %s", b)
			}
			into[a.Seq] = a.IDs
		}
	}

	var writers sync.WaitGroup
	defer writers.Wait()
	sendAll := func(c *websocket.Conn) {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for b := range batches {
				if c.Write(context.Background(), websocket.MessageText, msg(b)) != nil {
					return
				}
			}
		}()
	}
	c, producer := dial("")
	sendAll(c)
	readAcks(c, first, func() bool { return len(first) >= batches/4 })
	d.kill()
	readAcks(c, first, func() bool { return false }) // what arrived before the kill
	c.CloseNow()
	t.Logf("killed with %d of %d batches answered", len(first), batches)

	d.start()
	waitHTTP(t, d)
	c2, again := dial(producer)
	defer c2.CloseNow() // before writers.Wait: it ends the writer
	if again != producer {
		t.Fatalf("resumed producer %s, asked for %s", again, producer)
	}
	second := map[uint64][]string{}
	sendAll(c2)
	readAcks(c2, second, func() bool { return len(second) == batches })
	for seq, ids := range first {
		if !slices.Equal(second[seq], ids) {
			t.Fatalf("seq %d: answered %v before the kill, %v on the resend", seq, ids, second[seq])
		}
	}
	want := map[string]bool{}
	for _, ids := range second {
		for _, id := range ids {
			want[id] = true
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var rows, distinct int
		if err := conn.QueryRow(context.Background(), fmt.Sprintf(
			"SELECT count(*), count(DISTINCT payload) FROM %s", table)).Scan(&rows, &distinct); err != nil {
			t.Fatal(err)
		}
		if rows != distinct {
			t.Fatalf("%d rows for %d distinct payloads: a resent record got a second id", rows, distinct)
		}
		if rows == batches*per {
			var missing int
			for id := range want {
				var n int
				if err := conn.QueryRow(context.Background(), fmt.Sprintf(
					"SELECT count(*) FROM %s WHERE replace(weir_record_id::text, '-', '') = $1", table), id).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 1 {
					missing++
				}
			}
			if missing > 0 {
				t.Fatalf("%d answered ids are not in Postgres", missing)
			}
			t.Logf("%d records, one row each, under the ids answered before and after the kill", rows)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows, want %d", rows, batches*per)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
