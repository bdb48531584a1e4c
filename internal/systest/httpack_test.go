package systest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestHTTPDurableAfterFdatasync: with every segment fdatasync of the real
// binary held 40 ms (WEIR_FAULTS), no Durable 200 arrives sooner — the
// answer waits for the fdatasync that covers every record of its request,
// as a socket Ack does (TestDurableAckAfterFdatasync) — and Buffered
// answers, the control, do not wait for it.
func TestHTTPDurableAfterFdatasync(t *testing.T) {
	const syncDelay = 40 * time.Millisecond
	d := newDaemon(t, "--segment-max-age", "1h")
	d.env = []string{"WEIR_FAULTS=sync:*/shard-*/*.wab:delay=" + syncDelay.String()}
	d.start()
	waitHTTP(t, d)
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/records", d.httpPort)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer hc.CloseIdleConnections()

	postAll := func(name string, clients, n int, tier string) []time.Duration {
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range n {
					body := fmt.Sprintf(`{"payload":"%s-%d-%d"}`+"\n"+`{"payload":"%s-%d-%d-b"}`+"\n", name, c, i, name, c, i)
					req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
					req.Header.Set("Content-Type", "application/x-ndjson")
					req.Header.Set("Weir-Durability", tier)
					t0 := time.Now()
					resp, err := hc.Do(req)
					if err != nil {
						t.Errorf("%s: %v", name, err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					el := time.Since(t0)
					if resp.StatusCode != http.StatusOK {
						t.Errorf("%s: status %d", name, resp.StatusCode)
						return
					}
					mu.Lock()
					lat = append(lat, el)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		slices.Sort(lat)
		return lat
	}
	for _, tc := range []struct {
		name       string
		clients, n int
	}{{"one client", 1, 10}, {"16 clients", 16, 16}} {
		lat := postAll(tc.name, tc.clients, tc.n, "durable")
		if len(lat) != tc.clients*tc.n {
			t.Fatalf("%s: %d answers, want %d", tc.name, len(lat), tc.clients*tc.n)
		}
		t.Logf("%s: %d Durable 200s, fastest %v, median %v", tc.name, len(lat), lat[0], lat[len(lat)/2])
		if lat[0] < syncDelay {
			t.Errorf("%s: a Durable 200 arrived after %v, sooner than the %v every fdatasync takes", tc.name, lat[0], syncDelay)
		}
	}
	// A WebSocket stream: no ack before the fdatasync either.
	ws, _, err := websocket.Dial(context.Background(), fmt.Sprintf("ws://127.0.0.1:%d/v1/stream", d.httpPort), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := ws.Read(wctx); err != nil { // the hello
		t.Fatal(err)
	}
	var wsLat []time.Duration
	for seq := range 10 {
		t0 := time.Now()
		msg := fmt.Sprintf(`{"seq":%d,"records":[{"payload":"ws-%d"},{"payload":"ws-%d-b"}]}`, 2*seq, seq, seq)
		if err := ws.Write(wctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, b, err := ws.Read(wctx)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"ids"`) {
			t.Fatalf("stream answered %s", b)
		}
		wsLat = append(wsLat, time.Since(t0))
	}
	slices.Sort(wsLat)
	t.Logf("stream: 10 Durable acks, fastest %v, median %v", wsLat[0], wsLat[len(wsLat)/2])
	if wsLat[0] < syncDelay {
		t.Errorf("a stream's Durable ack arrived after %v, sooner than the %v every fdatasync takes", wsLat[0], syncDelay)
	}
	ws.Close(websocket.StatusNormalClosure, "")

	buffered := postAll("buffered", 4, 32, "buffered")
	if med := buffered[len(buffered)/2]; med >= syncDelay/2 {
		t.Errorf("Buffered median answer %v: the control should not wait for the %v fdatasyncs", med, syncDelay)
	}
	if !strings.Contains(d.log.String(), "fault delayed") {
		t.Fatalf("no fdatasync was delayed:\n%s", tail(d.log.String(), 3000))
	}
	if err := d.stop(20 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
}
