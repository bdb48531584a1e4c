package httpin

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

func decodeAnswer(t *testing.T, resp *http.Response) Answer {
	t.Helper()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var a Answer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return a
}

func decodeProblem(t *testing.T, resp *http.Response, status int, reason Reason) problemBody {
	t.Helper()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var p problemBody
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if p.Reason != reason || p.Status != status {
		t.Fatalf("problem %+v, want reason %s", p, reason)
	}
	return p
}

// sinkIDs are the ids the drain gives the records of req, as the sinks
// will hold them.
func sinkIDs(t *testing.T, req *wab.Request) []string {
	t.Helper()
	h := wab.Header{Flags: wab.FlagSyncMarks | wab.FlagTimeOrderedIDs, Seq: 7, UID: 99}
	var ids []string
	for i := range req.Payloads {
		r, err := drain.SinkRecord(h, uint64(i), wab.Record{Durability: req.Durability, Received: req.Received, Meta: req.Metas[i], Payload: req.Payloads[i]})
		if err != nil {
			t.Fatal(err)
		}
		if r.Source != DefaultStream {
			t.Errorf("record %d: source %q, want the stream", i, r.Source)
		}
		// The id stored in the meta is the one the drain derives from
		// the producer, sequence number and payload without it.
		m, err := record.Decode(req.Metas[i], record.LegacyOrigin)
		if err != nil || !m.HasID {
			t.Fatalf("record %d: meta %v, id stored %v", i, err, m.HasID)
		}
		m.HasID = false
		if d := m.RecordID(req.Payloads[i], record.Derivation{TimeOrdered: true, Received: req.Received}); d != r.ID {
			t.Errorf("record %d: stored id %s, derived %s", i, r.ID, d)
		}
		ids = append(ids, r.ID.String())
	}
	return ids
}

func TestPostFormats(t *testing.T) {
	b := &fakeBackend{}
	_, url := start(t, b, Options{})
	gz := func(s string) string {
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		w.Write([]byte(s))
		w.Close()
		return buf.String()
	}
	zs := func(s string) string {
		e, _ := zstd.NewWriter(nil)
		defer e.Close()
		return string(e.EncodeAll([]byte(s), nil))
	}
	ndjson := `{"payload":{"n":1},"key":"a"}` + "\n" + `{"payload":{"n":2},"headers":{"h":"v"}}` + "\n"
	tests := []struct {
		name     string
		body     string
		kv       []string
		payloads []string
		tier     wab.Durability
	}{
		{"ndjson", ndjson, []string{"Content-Type", "application/x-ndjson"}, []string{`{"n":1}`, `{"n":2}`}, wab.Durable},
		{"json array buffered", `[{"payload":"s"},{"payload_base64":"aGk="}]`, []string{"Content-Type", "application/json", HeaderDurability, "buffered"}, []string{`"s"`, "hi"}, wab.Buffered},
		{"raw", "plain text\n", []string{"Content-Type", "text/plain", HeaderKey, "k"}, []string{"plain text\n"}, wab.Durable},
		{"gzip ndjson", gz(ndjson), []string{"Content-Type", "application/x-ndjson", "Content-Encoding", "gzip"}, []string{`{"n":1}`, `{"n":2}`}, wab.Durable},
		{"zstd raw", zs("zstd body"), []string{"Content-Encoding", "zstd"}, []string{"zstd body"}, wab.Durable},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := decodeAnswer(t, post(t, url, tt.body, tt.kv...))
			reqs := b.requests()
			if len(reqs) != i+1 {
				t.Fatalf("%d requests submitted, want %d", len(reqs), i+1)
			}
			req := reqs[i]
			var got []string
			for _, p := range req.Payloads {
				got = append(got, string(p))
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.payloads) || req.Durability != tt.tier {
				t.Fatalf("stored %q tier %d, want %q tier %d", got, req.Durability, tt.payloads, tt.tier)
			}
			if a.Records != len(tt.payloads) || fmt.Sprint(a.IDs) != fmt.Sprint(sinkIDs(t, req)) {
				t.Fatalf("answer %+v; the sinks will hold %v", a, sinkIDs(t, req))
			}
		})
	}
}

func TestIdempotencyKey(t *testing.T) {
	b := &fakeBackend{}
	_, url := start(t, b, Options{})
	body := `{"payload":1}` + "\n" + `{"payload":2}` + "\n"
	ct := []string{"Content-Type", "application/x-ndjson"}
	first := decodeAnswer(t, post(t, url, body, append(ct, HeaderIdempotency, "order-42")...))
	time.Sleep(2 * time.Millisecond) // a retry arrives later
	retry := decodeAnswer(t, post(t, url, body, append(ct, HeaderIdempotency, "order-42")...))
	other := decodeAnswer(t, post(t, url, body, append(ct, HeaderIdempotency, "order-43")...))
	fresh1 := decodeAnswer(t, post(t, url, body, ct...))
	fresh2 := decodeAnswer(t, post(t, url, body, ct...))
	if fmt.Sprint(first.IDs) != fmt.Sprint(retry.IDs) {
		t.Fatalf("a retry with the same Idempotency-Key got %v, first %v", retry.IDs, first.IDs)
	}
	if first.IDs[0] == first.IDs[1] || first.IDs[0] == other.IDs[0] || fresh1.IDs[0] == fresh2.IDs[0] {
		t.Fatalf("ids repeat where they must not: %v %v %v %v", first.IDs, other.IDs, fresh1.IDs, fresh2.IDs)
	}
	reqs := b.requests()
	for i, a := range []Answer{first, retry, other, fresh1, fresh2} {
		if fmt.Sprint(a.IDs) != fmt.Sprint(sinkIDs(t, reqs[i])) {
			t.Errorf("request %d: answered %v, the sinks will hold %v", i, a.IDs, sinkIDs(t, reqs[i]))
		}
	}
	// Fresh ids are laid out at the receive time; idempotent ones at the
	// event time given.
	id, _ := sink.ParseRecordID(fresh1.IDs[0])
	if at := time.UnixMilli(int64(id[0])<<40 | int64(id[1])<<32 | int64(id[2])<<24 | int64(id[3])<<16 | int64(id[4])<<8 | int64(id[5])); time.Since(at) > time.Minute {
		t.Errorf("a fresh id carries %v, not its receive time", at)
	}
	timed := decodeAnswer(t, post(t, url, body, append(ct, HeaderIdempotency, "order-44", HeaderEventTime, "1700000000000")...))
	if !strings.HasPrefix(timed.IDs[0], "018bcfe56800") {
		t.Errorf("id %s does not carry Weir-Event-Time 1700000000000 ms", timed.IDs[0])
	}
	noIDs := decodeAnswer(t, post(t, url+"?ids=false", body, ct...))
	if noIDs.Records != 2 || noIDs.IDs != nil {
		t.Errorf("?ids=false answered %+v", noIDs)
	}
}

func TestRefusals(t *testing.T) {
	b := &fakeBackend{}
	_, url := start(t, b, Options{MaxBodyBytes: 1 << 10, MaxDecodedBytes: 4 << 10, MaxRecords: 2})
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	zw.Write(make([]byte, 1<<20))
	zw.Close()
	var zbomb []byte
	{
		e, _ := zstd.NewWriter(nil)
		zbomb = e.EncodeAll(make([]byte, 1<<20), nil)
		e.Close()
	}
	tests := []struct {
		name   string
		body   string
		kv     []string
		status int
		reason Reason
	}{
		{"bad line", `{"payload":1}` + "\n" + `{oops}`, []string{"Content-Type", "application/x-ndjson"}, 400, ReasonDecode},
		{"too many records", "[" + strings.Repeat(`{"payload":1},`, 2) + `{"payload":1}]`, []string{"Content-Type", "application/json"}, 413, ReasonTooManyRecords},
		{"body too large", strings.Repeat("x", 2<<10), nil, 413, ReasonBodyTooLarge},
		{"gzip bomb", bomb.String(), []string{"Content-Encoding", "gzip"}, 413, ReasonBodyTooLarge},
		{"zstd bomb", string(zbomb), []string{"Content-Encoding", "zstd"}, 413, ReasonBodyTooLarge},
		{"not gzip", "plain text, not gzip at all", []string{"Content-Encoding", "gzip"}, 400, ReasonDecode},
		{"truncated gzip", bomb.String()[:20], []string{"Content-Encoding", "gzip"}, 400, ReasonTruncated},
		{"brotli", "x", []string{"Content-Encoding", "br"}, 415, ReasonMediaType},
		{"two encodings", "x", []string{"Content-Encoding", "gzip, zstd"}, 415, ReasonMediaType},
		{"bad content type", "x", []string{"Content-Type", "a/b; ="}, 415, ReasonMediaType},
		{"bad tier", "x", []string{HeaderDurability, "eventually"}, 400, ReasonBadRequest},
		{"bad event time", "x", []string{HeaderEventTime, "later"}, 400, ReasonBadRequest},
		{"bad key", "x", []string{HeaderIdempotency, strings.Repeat("k", 256)}, 400, ReasonBadRequest},
		{"empty body, Content-Length 0", "", nil, 400, ReasonDecode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := decodeProblem(t, post(t, url, tt.body, tt.kv...), tt.status, tt.reason)
			if tt.reason == ReasonDecode && tt.name == "bad line" && p.Line != 2 {
				t.Errorf("line %d, want 2", p.Line)
			}
			if tt.status == 413 && p.Limit == 0 {
				t.Errorf("a 413 names its limit: %+v", p)
			}
		})
	}
	if n := len(b.requests()); n != 0 {
		t.Fatalf("%d refused requests reached the buffer", n)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	decodeProblem(t, resp, 405, ReasonMethod)
	resp2, err := http.Post(strings.TrimSuffix(url, RouteRecords)+"/v1/nothing", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	decodeProblem(t, resp2, 404, ReasonNotFound)
}

func TestLengthRequired(t *testing.T) {
	_, url := start(t, &fakeBackend{}, Options{})
	c, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(url, RouteRecords), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\n\r\n", RouteRecords)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, _ := io.ReadAll(io.LimitReader(c, 12))
	if string(line) != "HTTP/1.1 411" {
		t.Fatalf("answered %q, want 411", line)
	}
}

type throttle bool

func (t throttle) Throttled() bool { return bool(t) }

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name   string
		b      *fakeBackend
		opts   Options
		status int
		reason Reason
	}{
		{"critical", &fakeBackend{}, Options{Throttle: throttle(true)}, 429, ReasonOverloaded},
		{"budget", &fakeBackend{}, Options{Budget: flow.NewBudget(flow.BudgetOptions{Limit: 1 << 10, WarmupFraction: 1})}, 429, ReasonOverloaded},
		{"queue full", &fakeBackend{submitErr: wab.ErrQueueTimeout}, Options{}, 429, ReasonOverloaded},
		{"disk full", &fakeBackend{done: fmt.Errorf("write: %w", wab.ErrDiskFull)}, Options{}, 503, ReasonDiskFull},
		{"shard failed", &fakeBackend{shardErr: errors.Join(wab.ErrShardFailed, errors.New("EIO"))}, Options{}, 503, ReasonShardFailed},
		{"closing", &fakeBackend{submitErr: wab.ErrClosed}, Options{}, 503, ReasonNotReady},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.opts.Budget != nil {
				defer tt.opts.Budget.Close()
			}
			tt.opts.RetryAfter = 1500 * time.Millisecond
			_, url := start(t, tt.b, tt.opts)
			resp := post(t, url, strings.Repeat("x", 4<<10))
			p := decodeProblem(t, resp, tt.status, tt.reason)
			if resp.Header.Get("Retry-After") != "2" || p.RetryAfter != 1500 {
				t.Errorf("Retry-After %q, retry_after_ms %d", resp.Header.Get("Retry-After"), p.RetryAfter)
			}
			if tt.opts.Budget != nil && tt.opts.Budget.Stats().InUse != 0 {
				t.Errorf("the budget holds %d bytes after the refusal", tt.opts.Budget.Stats().InUse)
			}
		})
	}
}

func TestConcurrencyAndBudgetHeld(t *testing.T) {
	budget := flow.NewBudget(flow.BudgetOptions{Limit: 64 << 20, WarmupFraction: 1})
	defer budget.Close()
	b := &fakeBackend{release: make(chan struct{})}
	_, url := start(t, b, Options{MaxConcurrent: 1, Budget: budget})
	done := make(chan *http.Response)
	go func() {
		resp, err := http.Post(url, "text/plain", strings.NewReader(strings.Repeat("x", 100<<10)))
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	for len(b.requests()) == 0 {
		time.Sleep(time.Millisecond)
	}
	if held := budget.Stats().InUse; held < 100<<10 {
		t.Errorf("the budget holds %d bytes for an unanswered 100 KiB body", held)
	}
	decodeProblem(t, post(t, url, "x"), 429, ReasonConcurrency)
	close(b.release)
	resp := <-done
	defer resp.Body.Close()
	decodeAnswer(t, resp)
	if held := budget.Stats().InUse; held != 0 {
		t.Errorf("the budget holds %d bytes once answered", held)
	}
}
