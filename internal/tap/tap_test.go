package tap

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counts is an Observer.
type counts struct {
	mu      sync.Mutex
	points  []string
	dropped map[string]int
	readers map[string]int
}

func newCounts() *counts { return &counts{dropped: map[string]int{}, readers: map[string]int{}} }

func (c *counts) Point(name string) func(int) {
	c.mu.Lock()
	c.points = append(c.points, name)
	c.mu.Unlock()
	return func(n int) {
		c.mu.Lock()
		c.dropped[name] += n
		c.mu.Unlock()
	}
}
func (c *counts) Readers(p string, d int) { c.mu.Lock(); c.readers[p] += d; c.mu.Unlock() }

func rec(i int) Record {
	return Record{ID: record.HashID([]byte(fmt.Sprint(i))), HasID: true, Source: "s", Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
}

// TestNoReader: a point nobody watches is not active, and Offer never
// asks for a record.
func TestNoReader(t *testing.T) {
	h := NewHub(nil)
	p := h.Point("gate")
	if p.Active() {
		t.Fatal("active without a reader")
	}
	p.Offer(3, func(int) Record { t.Fatal("asked for a record nobody reads"); return Record{} })
	var nilPoint *Point
	if nilPoint.Active() {
		t.Fatal("a nil point is active")
	}
	nilPoint.Offer(1, func(int) Record { t.Fatal("nil point asked"); return Record{} })
	r, err := h.Subscribe("gate", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Active() {
		t.Fatal("not active with a reader")
	}
	r.Close()
	if p.Active() {
		t.Fatal("active after its only reader closed")
	}
	if _, err := h.Subscribe("nope", Options{}); err == nil || !strings.Contains(err.Error(), `"gate"`) {
		t.Fatalf("unknown point: %v", err)
	}
}

// TestDropsCounted: a reader's buffer holds Buffer lines; what does not
// fit is dropped, counted for the reader and told to the observer, and
// reading makes room again.
func TestDropsCounted(t *testing.T) {
	obs := newCounts()
	h := NewHub(obs)
	p := h.Point("gate")
	r, _ := h.Subscribe("gate", Options{Buffer: 10})
	defer r.Close()
	asked := 0
	p.Offer(25, func(i int) Record { asked++; return rec(i) })
	if asked != 10 {
		t.Errorf("asked for %d records, want only the 10 that fit", asked)
	}
	lines, dropped := r.Next(nil, time.Second, nil)
	if len(lines) != 10 || dropped != 15 || obs.dropped["gate"] != 15 {
		t.Fatalf("%d lines, %d dropped (observer %d); want 10, 15, 15", len(lines), dropped, obs.dropped["gate"])
	}
	if lines[9].Payload != `{"n":9}` || lines[0].ID != record.HashID([]byte("0")).String() {
		t.Errorf("lines %+v … %+v", lines[0], lines[9])
	}
	p.Offer(5, rec)
	lines, dropped = r.Next(lines, time.Second, nil)
	if len(lines) != 5 || dropped != 15 {
		t.Fatalf("after reading: %d lines, %d dropped", len(lines), dropped)
	}
	if obs.readers["gate"] != 1 || len(obs.points) != 1 {
		t.Errorf("observer: %+v", obs)
	}
}

// TestNeverBlocks: a reader that never reads costs the offering
// goroutines no wait: a million records from four goroutines finish,
// all but Buffer counted as dropped.
func TestNeverBlocks(t *testing.T) {
	h := NewHub(nil)
	p := h.Point("gate")
	r, _ := h.Subscribe("gate", Options{Buffer: 100})
	defer r.Close()
	done := make(chan struct{})
	var offered atomic.Int64
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 2500 {
					p.Offer(100, rec)
					offered.Add(100)
				}
			})
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("offering blocked on a reader that never reads (%d offered)", offered.Load())
	}
	if d := r.Dropped(); d != 1_000_000-100 {
		t.Fatalf("dropped %d, want %d", d, 1_000_000-100)
	}
}

// TestReadWhileOffered: readers and offers at once, under -race; every
// record is read or counted dropped.
func TestReadWhileOffered(t *testing.T) {
	h := NewHub(nil)
	p := h.Point("gate")
	const readers, n = 3, 20000
	var wg sync.WaitGroup
	got := make([]int64, readers)
	stop := make(chan struct{})
	rs := make([]*Reader, readers)
	for i := range rs {
		rs[i], _ = h.Subscribe("gate", Options{Buffer: 64})
	}
	for i, r := range rs {
		wg.Go(func() {
			var buf []Line
			for {
				lines, _ := r.Next(buf, 10*time.Millisecond, stop)
				got[i] += int64(len(lines))
				clear(lines)
				buf = lines
				select {
				case <-stop:
					lines, _ := r.Next(buf, 0, stop)
					got[i] += int64(len(lines))
					return
				default:
				}
			}
		})
	}
	for i := range n / 10 {
		p.Offer(10, func(j int) Record { return rec(i*10 + j) })
	}
	close(stop)
	wg.Wait()
	for i, r := range rs {
		if got[i]+r.Dropped() != n {
			t.Errorf("reader %d: %d read + %d dropped != %d", i, got[i], r.Dropped(), n)
		}
		r.Close()
	}
}

// TestLines: payloads and keys shortened unless Full, text when UTF-8
// and base64 otherwise, a rune never cut in two; a quarantine record's
// reason; the event time.
func TestLines(t *testing.T) {
	h := NewHub(nil)
	p := h.Point("q")
	short, _ := h.Subscribe("q", Options{PayloadBytes: 2})
	full, _ := h.Subscribe("q", Options{PayloadBytes: 2, Full: true})
	defer short.Close()
	defer full.Close()
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	recs := []Record{
		{Source: "s", Payload: []byte("héllo"), Key: []byte("k"), EventTime: at, Code: "contract", Rule: "schema", Error: "missing id"},
		{Source: "s", Payload: []byte{0xff, 0xfe}},
		{Source: "s", Payload: []byte("ab")},
	}
	p.Offer(len(recs), func(i int) Record { return recs[i] })
	s, _ := short.Next(nil, time.Second, nil)
	f, _ := full.Next(nil, time.Second, nil)
	if len(s) != 3 || len(f) != 3 {
		t.Fatalf("%d and %d lines", len(s), len(f))
	}
	if s[0].Payload != "h" || !s[0].Truncated || s[0].Bytes != 6 || s[0].Code != "contract" || s[0].Rule != "schema" || s[0].Error != "missing id" || !s[0].EventTime.Equal(at) || s[0].Key != "k" {
		t.Errorf("short line 0: %+v", s[0])
	}
	if f[0].Payload != "héllo" || f[0].Truncated {
		t.Errorf("full line 0: %+v", f[0])
	}
	if s[1].Payload != "" || s[1].PayloadBase64 != "//4=" || s[1].Truncated {
		t.Errorf("binary line: %+v", s[1])
	}
	if s[2].Payload != "ab" || s[2].Truncated || s[2].ID != "" {
		t.Errorf("short payload: %+v", s[2])
	}
	b, _ := json.Marshal(s[2])
	if string(b) != `{"source":"s","bytes":2,"payload":"ab"}` {
		t.Errorf("JSON %s", b)
	}
}

// TestFilter: a CEL expression over the record's fields and its JSON
// payload; one that is not a bool or does not parse is refused; one that
// fails on a record leaves it out.
func TestFilter(t *testing.T) {
	for _, bad := range []string{"source", "source ==", "nope == 1"} {
		if _, err := Compile(bad); err == nil {
			t.Errorf("Compile(%q) succeeded", bad)
		}
	}
	recs := []Record{
		{Source: "orders", Payload: []byte(`{"amount": 150, "id": "a"}`), Code: "contract"},
		{Source: "orders", Payload: []byte(`{"amount": 50}`)},
		{Source: "socket", Payload: []byte(`not json`), Headers: []sink.Header{{Key: "tenant", Value: []byte("t1")}}},
	}
	for expr, want := range map[string]string{
		`source == "orders"`:                             "01",
		`record.amount > 100`:                            "0",
		`code == "contract"`:                             "0",
		`payload.contains("json")`:                       "2",
		`headers["tenant"] == "t1"`:                      "2",
		`bytes < 20`:                                     "12",
		`record == null`:                                 "2",
		`has(record.id) && record.id == "a"`:             "0",
		`event_time < timestamp("2000-01-01T00:00:00Z")`: "012",
	} {
		f, err := Compile(expr)
		if err != nil {
			t.Errorf("Compile(%q): %v", expr, err)
			continue
		}
		got := ""
		for i := range recs {
			if f(&recs[i]) {
				got += fmt.Sprint(i)
			}
		}
		if got != want {
			t.Errorf("%s keeps %q, want %q", expr, got, want)
		}
	}
}

// TestFromBuffered: a buffered record's source, key, event time and id
// come from its metadata; a producer's without one is "socket".
func TestFromBuffered(t *testing.T) {
	id := record.HashID([]byte("x"))
	m := record.Meta{ID: id, HasID: true, Source: "orders", Key: []byte("k1"), EventTime: 1e18}
	r := FromBuffered([]byte("p"), record.Encode(&m))
	if r.Source != "orders" || !r.HasID || r.ID != id || string(r.Key) != "k1" || r.EventTime.UnixNano() != 1e18 {
		t.Errorf("source record: %+v", r)
	}
	r = FromBuffered([]byte("p"), nil)
	if r.Source != ProducerSource || r.HasID {
		t.Errorf("v1 producer record: %+v", r)
	}
	pm := record.Meta{Producer: record.ProducerID{1}, Seq: 7, HasProducer: true}
	r = FromBuffered([]byte("p"), record.Encode(&pm))
	if want := pm.RecordID([]byte("p"), record.Derivation{TimeOrdered: true}); !r.HasID || r.ID != want {
		t.Errorf("idempotent producer's record: id %v, want %v", r.ID, want)
	}
}

// TestHandler: the HTTP stream — records as NDJSON lines, the drop
// count of a reader that fell behind, limit and its last line, the
// answers to a bad request.
func TestHandler(t *testing.T) {
	h := NewHub(nil)
	p := h.Point("gate")
	h.Point("source:orders")
	srv := httptest.NewServer(Handler(h, nil))
	defer srv.Close()

	for q, code := range map[string]int{
		"":                       400,
		"?at=nope":               404,
		"?at=gate&filter=source": 400,
		"?at=gate&limit=-1":      400,
		"?at=gate&buffer=0":      400,
		"?at=gate&rate=x":        400,
		"?at=gate&full=maybe":    400,
	} {
		resp, err := http.Get(srv.URL + q)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("%s: %d %s, want %d", q, resp.StatusCode, body, code)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"?at=gate&limit=30&buffer=20&filter="+urlQuery(`int(record.n) % 2 == 0`), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "application/x-ndjson" {
		t.Fatalf("%d %s", resp.StatusCode, ct)
	}
	waitActive(t, p)
	// 100 records at once into a buffer of 20: the 20 even ones up to
	// 38 kept, the 61 from 39 on dropped unseen.
	p.Offer(100, rec)
	sc := bufio.NewScanner(resp.Body)
	var lines []Line
	var last Dropped
	sentMore := false
	for sc.Scan() {
		var probe map[string]any
		if err := json.Unmarshal(sc.Bytes(), &probe); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if _, ok := probe["dropped"]; ok {
			json.Unmarshal(sc.Bytes(), &last)
			if last.End != "" {
				break
			}
			continue
		}
		var l Line
		json.Unmarshal(sc.Bytes(), &l)
		lines = append(lines, l)
		if len(lines) == 10 && !sentMore {
			sentMore = true
			go p.Offer(100, func(i int) Record { return rec(i + 100) })
		}
	}
	if len(lines) != 30 || last.End != "limit" || last.Dropped < 61 {
		t.Fatalf("%d lines, last control line %+v; want 30 and limit with >= 61 dropped", len(lines), last)
	}
	for _, l := range lines {
		var x struct{ N int }
		json.Unmarshal([]byte(l.Payload), &x)
		if x.N%2 != 0 {
			t.Errorf("the filter let %s through", l.Payload)
		}
	}
}

// TestHandlerReportsDrops: a reader that falls behind gets a
// {"dropped":N} line within a second or two of the drops.
func TestHandlerReportsDrops(t *testing.T) {
	h := NewHub(nil)
	p := h.Point("gate")
	srv := httptest.NewServer(Handler(h, nil))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"?at=gate&buffer=5", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	waitActive(t, p)
	p.Offer(50, rec)
	sc := bufio.NewScanner(resp.Body)
	n := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), `{"dropped":`) {
			var d Dropped
			json.Unmarshal(sc.Bytes(), &d)
			if d.Dropped != 45 || n != 5 {
				t.Fatalf("%d lines, then %s; want 5 and 45 dropped", n, sc.Text())
			}
			cancel()
			return
		}
		n++
	}
	t.Fatalf("no dropped line: %v", sc.Err())
}

// TestHandlerRate: rate paces the lines.
func TestHandlerRate(t *testing.T) {
	h := NewHub(nil)
	p := h.Point("gate")
	srv := httptest.NewServer(Handler(h, nil))
	defer srv.Close()
	start := time.Now()
	done := make(chan int)
	go func() {
		resp, err := http.Get(srv.URL + "?at=gate&rate=20&limit=10")
		if err != nil {
			done <- -1
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- strings.Count(string(b), "\n")
	}()
	waitActive(t, p)
	p.Offer(10, rec)
	if n := <-done; n != 11 {
		t.Fatalf("%d lines, want 10 and the last", n)
	}
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Errorf("10 lines at 20/s took %v", took)
	}
}

func waitActive(t *testing.T, p *Point) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !p.Active(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reader never attached")
		}
	}
}

func urlQuery(s string) string {
	r := strings.NewReplacer("%", "%25", " ", "%20", "=", "%3D", "&", "%26", "\"", "%22")
	return r.Replace(s)
}

// BenchmarkInactive is what a tap point costs a batch when nobody
// watches: the Active check.
func BenchmarkInactive(b *testing.B) {
	p := NewHub(nil).Point("gate")
	n := 0
	for b.Loop() {
		if p.Active() {
			n++
		}
	}
	if n != 0 {
		b.Fatal(n)
	}
}

// BenchmarkOfferNotRead is what a batch of 100 costs when a reader is
// attached but never reads (its buffer full: each record is counted as
// dropped).
func BenchmarkOfferNotRead(b *testing.B) {
	h := NewHub(nil)
	p := h.Point("gate")
	r, _ := h.Subscribe("gate", Options{Buffer: 1})
	defer r.Close()
	for b.Loop() {
		if p.Active() {
			p.Offer(100, rec)
		}
	}
}
