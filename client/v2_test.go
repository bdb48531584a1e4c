package client

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wire"
)

// seqs lists the (producer id, sequence number) of every record the
// server saw, by payload.
func seqs(t *testing.T, s *testServer, rs []received) map[string][]uint64 {
	t.Helper()
	out := map[string][]uint64{}
	for _, r := range rs {
		if r.version != 2 {
			t.Fatalf("request %d is version %d", r.id, r.version)
		}
		for i, p := range r.payloads {
			out[string(p)] = append(out[string(p)], r.firstSeq+uint64(i))
		}
	}
	return out
}

func TestHelloNamesTheProducer(t *testing.T) {
	s := newUnixServer(t, nil)
	p := NewProducer()
	c := dialT(t, s, WithProducer(p))
	if c.Producer() != p || c.ProtocolVersion() != 2 {
		t.Fatalf("producer %p version %d", c.Producer(), c.ProtocolVersion())
	}
	ctx := ctxT(t, 5*time.Second)
	if err := c.Push(ctx, []byte("x"), Durable); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	hs := append([]hello(nil), s.hellos...)
	s.mu.Unlock()
	if len(hs) != 1 || hs[0].h.Producer != p.ID() || hs[0].h.MaxVersion != 2 ||
		hs[0].h.Flags != wire.FlagIdempotent|wire.FlagReplay {
		t.Fatalf("hellos %+v", hs)
	}
	if p.ID() == (wire.ProducerID{}) || NewProducer().ID() == p.ID() {
		t.Fatal("producer ids are not random")
	}
}

// TestResendKeepsSequenceAndEventTime: requests cut off by a dropped
// connection go out again on the next connection with the same producer
// id, sequence numbers and event time, so the daemon derives the same
// record ids.
func TestResendKeepsSequenceAndEventTime(t *testing.T) {
	s := newUnixServer(t, func(r received) action {
		if r.conn == 0 && r.id >= 3 {
			if r.id == 5 {
				return action{kind: actDrop}
			}
			return action{kind: actSilent}
		}
		return action{}
	})
	c := dialT(t, s)
	ctx := ctxT(t, 10*time.Second)
	for i := range 2 {
		if err := c.Push(ctx, []byte(fmt.Sprint("r", i)), Durable); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := 2; i < 6; i++ {
		wg.Add(1)
		batch := [][]byte{[]byte(fmt.Sprint("r", 2*i)), []byte(fmt.Sprint("r", 2*i+1))}
		if err := c.PushAsync(ctx, batch, Durable, func(err error) {
			if err != nil {
				t.Errorf("batch %d: %v", i, err)
			}
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	rs := s.received()
	first := map[uint64]received{} // by request id, on connection 0
	// Every request on a later connection is a resend (nothing new is
	// pushed after the drop); one whose first copy the server had not read
	// when it dropped the connection has no first copy to compare with.
	resent, resentRecords := 0, 0
	for _, r := range rs {
		if r.conn == 0 {
			first[r.id] = r
			continue
		}
		resentRecords += len(r.payloads)
		f, ok := first[r.id]
		if !ok {
			continue
		}
		resent++
		if f.firstSeq != r.firstSeq || f.eventTime != r.eventTime || f.eventTime == 0 || string(f.payloads[0]) != string(r.payloads[0]) {
			t.Errorf("request %d resent as seq %d time %d, first sent as seq %d time %d", r.id, r.firstSeq, r.eventTime, f.firstSeq, f.eventTime)
		}
	}
	if resent == 0 {
		t.Fatal("nothing was resent")
	}
	if got := c.Resent(); got != uint64(resentRecords) {
		t.Errorf("Resent() = %d, the server saw %d records resent", got, resentRecords)
	}
	// Every record has one sequence number, and no number is used twice.
	used := map[uint64]string{}
	for p, ss := range seqs(t, s, rs) {
		for _, q := range ss[1:] {
			if q != ss[0] {
				t.Errorf("%s sent with sequence numbers %v", p, ss)
			}
		}
		if other, dup := used[ss[0]]; dup {
			t.Errorf("sequence %d used by %s and %s", ss[0], p, other)
		}
		used[ss[0]] = p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.hellos) < 2 || s.hellos[0].h.Producer != s.hellos[len(s.hellos)-1].h.Producer {
		t.Fatalf("reconnect changed the producer id: %+v", s.hellos)
	}
}

// TestSharedProducerNeverReusesSequence: clients sharing one Producer (one
// producer on several connections, as weir push --concurrency does)
// number their records from one counter.
func TestSharedProducerNeverReusesSequence(t *testing.T) {
	s := newUnixServer(t, nil)
	p := NewProducer()
	const clients, per = 4, 200
	ctx := ctxT(t, 10*time.Second)
	var wg sync.WaitGroup
	for k := range clients {
		c := dialT(t, s, WithProducer(p))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i += 1 + i%3 {
				batch := [][]byte{[]byte(fmt.Sprintf("c%d-%d", k, i))}
				for j := 1; j <= i%3 && i+j < per; j++ {
					batch = append(batch, []byte(fmt.Sprintf("c%d-%d", k, i+j)))
				}
				if err := c.PushBatch(ctx, batch, Buffered); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	used := map[uint64]string{}
	for payload, ss := range seqs(t, s, s.received()) {
		if len(ss) != 1 {
			t.Fatalf("%s sent %d times", payload, len(ss))
		}
		if other, dup := used[ss[0]]; dup {
			t.Fatalf("sequence %d used by %s and %s", ss[0], payload, other)
		}
		used[ss[0]] = payload
	}
	if len(used) != clients*per {
		t.Fatalf("%d records", len(used))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.hellos {
		if h.h.Producer != p.ID() {
			t.Fatalf("hello with producer %x", h.h.Producer)
		}
	}
}

func TestPushRecordsMetadata(t *testing.T) {
	s := newUnixServer(t, nil)
	c := dialT(t, s)
	if !c.CanReplay() {
		t.Error("CanReplay false on a connection granted replay")
	}
	ctx := ctxT(t, 5*time.Second)
	et := time.Unix(1700000000, 5)
	recs := []Record{
		{Payload: []byte("plain")},
		{Payload: []byte("keyed"), Key: []byte("k"), Headers: []Header{{Key: "a", Value: []byte("1")}, {Key: "a", Value: []byte("2")}}, EventTime: et},
		{Payload: []byte("empty key"), Key: []byte{}},
		{Payload: []byte("replayed"), Replay: &Replay{ID: sink.RecordID{1, 2}, Source: "kafka:orders", OriginPos: "orders/0@7"}},
	}
	if err := c.PushRecords(ctx, recs, Durable); err != nil {
		t.Fatal(err)
	}
	rs := s.received()
	if len(rs) != 1 || len(rs[0].metas) != 4 {
		t.Fatalf("received %+v", rs)
	}
	ms := rs[0].metas
	if len(ms[0]) != 0 {
		t.Errorf("plain record sent with metadata %x", ms[0])
	}
	m, err := record.Decode(ms[1], record.LegacyOrigin)
	if err != nil || string(m.Key) != "k" || len(m.Headers) != 2 || string(m.Headers[1].Value) != "2" || m.EventTime != et.UnixNano() {
		t.Errorf("keyed record: %+v, %v", m, err)
	}
	if m, err := record.Decode(ms[2], record.LegacyOrigin); err != nil || m.Key == nil || len(m.Key) != 0 {
		t.Errorf("empty key: %+v, %v", m, err)
	}
	if m, err := record.Decode(ms[3], record.LegacyOrigin); err != nil || !m.HasID || m.ID != (sink.RecordID{1, 2}) ||
		m.Source != "kafka:orders" || m.OriginPos != "orders/0@7" {
		t.Errorf("replayed: %+v, %v", m, err)
	}
	// Records without metadata travel without any.
	if err := c.PushRecords(ctx, []Record{{Payload: []byte("a")}, {Payload: []byte("b")}}, Durable); err != nil {
		t.Fatal(err)
	}
	if rs := s.received(); rs[1].metas != nil {
		t.Errorf("metadata sent for records without any: %x", rs[1].metas)
	}
}

func TestPushRecordsLocalRefusals(t *testing.T) {
	s := newUnixServer(t, nil)
	noReplay := wire.FlagIdempotent
	s.mu.Lock()
	s.grant = &noReplay
	s.mu.Unlock()
	c := dialT(t, s)
	if c.CanReplay() {
		t.Error("CanReplay on a connection not granted replay")
	}
	ctx := ctxT(t, 5*time.Second)
	cases := []struct {
		name string
		recs []Record
		want error
	}{
		{"empty", []Record{}, ErrEmptyBatch},
		{"header name not UTF-8", []Record{{Payload: []byte("x"), Headers: []Header{{Key: "\xff"}}}}, ErrBadMeta},
		{"key too large", []Record{{Payload: []byte("x"), Key: make([]byte, wire.MaxMetaBytes)}}, ErrBadMeta},
		{"replay not granted", []Record{{Payload: []byte("x"), Replay: &Replay{ID: sink.RecordID{1}}}}, ErrNotPermitted},
		{"frame too large", []Record{{Payload: make([]byte, wire.DefaultMaxFrameBytes)}}, ErrFrameTooLarge},
	}
	for _, tt := range cases {
		if err := c.PushRecords(ctx, tt.recs, Durable); !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
	if n := len(s.received()); n != 0 {
		t.Errorf("server saw %d requests", n)
	}
}

// TestFallbackToVersion1: a daemon that speaks only version 1 refuses the
// Hello (BadVersion, closing the connection); the client reconnects and
// speaks version 1 to it.
func TestFallbackToVersion1(t *testing.T) {
	s := newUnixServer(t, nil)
	s.mu.Lock()
	s.maxVersion = 1
	s.mu.Unlock()
	c := dialT(t, s)
	if c.ProtocolVersion() != 1 || c.CanReplay() {
		t.Fatalf("negotiated version %d (replay %v) with a version-1 daemon", c.ProtocolVersion(), c.CanReplay())
	}
	ctx := ctxT(t, 5*time.Second)
	if err := c.Push(ctx, []byte("one"), Durable); err != nil {
		t.Fatal(err)
	}
	if err := c.PushRecords(ctx, []Record{{Payload: []byte("two")}, {Payload: []byte("three")}}, Buffered); err != nil {
		t.Fatal(err)
	}
	if err := c.PushRecords(ctx, []Record{{Payload: []byte("keyed"), Key: []byte("k")}}, Durable); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("metadata to a version-1 daemon: %v", err)
	}
	rs := s.received()
	if len(rs) != 2 || rs[0].version != 1 || rs[1].version != 1 || len(rs[1].payloads) != 2 {
		t.Fatalf("received %+v", rs)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.hellos) != 0 {
		t.Fatalf("a version-1 daemon decoded a Hello: %+v", s.hellos)
	}
}

// TestDowngradeOnReconnect: requests pushed while the daemon spoke
// version 2 and still unanswered when it comes back speaking only version
// 1 are resent as version-1 frames; those with metadata fail BadVersion.
func TestDowngradeOnReconnect(t *testing.T) {
	s := newUnixServer(t, func(r received) action {
		if r.conn == 0 {
			return action{kind: actSilent}
		}
		return action{}
	})
	c := dialT(t, s)
	ctx := ctxT(t, 10*time.Second)
	results := make(chan error, 3)
	for _, recs := range [][]Record{
		{{Payload: []byte("plain")}},
		{{Payload: []byte("keyed"), Key: []byte("k")}},
		{{Payload: []byte("a")}, {Payload: []byte("b")}},
	} {
		if err := c.PushRecordsAsync(ctx, recs, Durable, func(err error) { results <- err }); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return len(s.received()) == 3 })
	s.mu.Lock()
	s.maxVersion = 1
	s.mu.Unlock()
	s.dropAll()
	var oks, badVersion int
	for range 3 {
		switch err := <-results; {
		case err == nil:
			oks++
		case errors.Is(err, ErrBadVersion):
			badVersion++
		default:
			t.Fatalf("unexpected %v", err)
		}
	}
	if oks != 2 || badVersion != 1 || c.ProtocolVersion() != 1 {
		t.Fatalf("%d acked, %d BadVersion, version %d", oks, badVersion, c.ProtocolVersion())
	}
	for _, r := range s.received()[3:] {
		if r.version != 1 || string(r.payloads[0]) == "keyed" {
			t.Fatalf("resent as %+v", r)
		}
	}
}

func TestHelloRefused(t *testing.T) {
	s := newUnixServer(t, nil)
	s.mu.Lock()
	s.helloNack = wire.CodeInternal
	s.mu.Unlock()
	_, err := Dial(ctxT(t, 5*time.Second), s.addr)
	if !errors.Is(err, ErrInternal) {
		t.Fatalf("Dial with a refused Hello: %v", err)
	}
}

// TestHelloTimeout: a peer that accepts but never answers the Hello makes
// Dial fail within the dial timeout.
func TestHelloTimeout(t *testing.T) {
	path := shortSocketPath(t)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	start := time.Now()
	if _, err := Dial(ctxT(t, 5*time.Second), path, WithDialTimeout(100*time.Millisecond)); err == nil {
		t.Fatal("Dial succeeded without a HelloAck")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Dial took %v", d)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}
