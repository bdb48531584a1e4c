package httpin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// dialStream opens a stream to url's listener (producer "" lets the
// server choose) and reads its hello.
func dialStream(t *testing.T, url, producer string) (*websocket.Conn, StreamHello) {
	t.Helper()
	u := strings.Replace(strings.TrimSuffix(url, RouteRecords), "http://", "ws://", 1) + RouteStream
	if producer != "" {
		u += "?producer=" + producer
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	var h StreamHello
	readJSON(t, c, &h)
	return c, h
}

func readJSON(t *testing.T, c *websocket.Conn, v any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}

func sendJSON(t *testing.T, c *websocket.Conn, s string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
		t.Fatal(err)
	}
}

// A stream's messages are answered with the ids the sinks will hold;
// after a reconnect the same producer and sequence numbers give the same
// ids; a bad message is refused alone.
func TestStream(t *testing.T) {
	b := &fakeBackend{}
	_, url := start(t, b, Options{})
	c, hello := dialStream(t, url, "")
	if len(hello.Producer) != 32 || hello.MaxMessageBytes != DefaultMaxBodyBytes {
		t.Fatalf("hello %+v", hello)
	}
	sendJSON(t, c, `{"seq":0,"records":[{"payload":{"n":1}},{"payload":{"n":2},"key":"k"}]}`)
	sendJSON(t, c, `{"seq":2,"durability":"buffered","records":[{"payload":"three"}]}`)
	sendJSON(t, c, `{"seq":3,"records":[{"payload":1,"nope":2}]}`)
	acks := map[uint64]StreamAck{}
	for range 3 {
		var a StreamAck
		readJSON(t, c, &a)
		acks[a.Seq] = a
	}
	if acks[0].Records != 2 || acks[2].Records != 1 {
		t.Fatalf("acks %+v", acks)
	}
	if e := acks[3].Error; e == nil || e.Reason != ReasonDecode || e.Index == nil || *e.Index != 0 {
		t.Fatalf("a bad message answered %+v", acks[3])
	}
	reqs := b.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests submitted, want 2", len(reqs))
	}
	var all []string
	for _, r := range reqs {
		all = append(all, sinkIDs(t, r)...)
	}
	answered := append(slices.Clone(acks[0].IDs), acks[2].IDs...)
	slices.Sort(all)
	slices.Sort(answered)
	if !slices.Equal(all, answered) {
		t.Fatalf("answered %v; the sinks will hold %v", answered, all)
	}
	c.Close(websocket.StatusNormalClosure, "")

	// Reconnect as the same producer and resend seq 0: the same ids.
	c2, hello2 := dialStream(t, url, hello.Producer)
	if hello2.Producer != hello.Producer {
		t.Fatalf("asked for producer %s, got %s", hello.Producer, hello2.Producer)
	}
	sendJSON(t, c2, `{"seq":0,"records":[{"payload":{"n":1}},{"payload":{"n":2},"key":"k"}]}`)
	var again StreamAck
	readJSON(t, c2, &again)
	if !slices.Equal(again.IDs, acks[0].IDs) {
		t.Fatalf("a resend after a reconnect got ids %v, first %v", again.IDs, acks[0].IDs)
	}
	c2.Close(websocket.StatusNormalClosure, "")

	// A message without seq closes the stream, saying why.
	c3, _ := dialStream(t, url, "")
	sendJSON(t, c3, `{"records":[{"payload":1}]}`)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := c3.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusInvalidFramePayloadData {
		t.Fatalf("a message without seq: %v", err)
	}
}

// A stream stops reading once its unanswered messages hold
// StreamInflightBytes, and reads on as answers free them.
func TestStreamBackpressure(t *testing.T) {
	b := &fakeBackend{release: make(chan struct{})}
	_, url := start(t, b, Options{StreamInflightBytes: 64 << 10})
	c, _ := dialStream(t, url, "")
	payload := strings.Repeat("x", 8<<10)
	const messages = 40
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := range messages {
			msg := fmt.Sprintf(`{"seq":%d,"records":[{"payload":"%s"}]}`, i, payload)
			if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	held := len(b.requests())
	// Each message holds about 3 × 8 KiB (its body, the copy decoded out
	// of it, its stored record): 64 KiB stops the reader after a few.
	if held == 0 || held > 4 {
		t.Fatalf("%d unanswered messages submitted under a 64 KiB stream cap", held)
	}
	close(b.release)
	seen := map[uint64]bool{}
	for len(seen) < messages {
		var a StreamAck
		readJSON(t, c, &a)
		if a.Error != nil {
			t.Fatalf("seq %d refused: %+v", a.Seq, a.Error)
		}
		seen[a.Seq] = true
	}
	t.Logf("%d messages read before the first answer; all %d answered once answers flowed", held, messages)
}

// Shutdown stops a stream reading, answers what it read and closes it
// going away.
func TestStreamShutdown(t *testing.T) {
	in, url := start(t, &fakeBackend{}, Options{})
	c, _ := dialStream(t, url, "")
	sendJSON(t, c, `{"seq":7,"records":[{"payload":1}]}`)
	var a StreamAck
	readJSON(t, c, &a)
	read := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, err := c.Read(ctx) // a client reads as it goes
		read <- err
	}()
	t0 := time.Now()
	if err := in.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := <-read; websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("after Shutdown the stream read %v, want a going-away close", err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("Shutdown with an open stream took %v", d)
	}
}
