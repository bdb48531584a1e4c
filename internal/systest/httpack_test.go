package systest

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
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
