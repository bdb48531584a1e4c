package systest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"sync"
	"testing"
	"time"
)

// httpLedger is what 2xx answers promised: each record's payload and the
// id the answer gave it.
type httpLedger struct {
	mu  sync.Mutex
	ids map[string]string // payload -> id
	bad []string
}

func (l *httpLedger) add(payloads, ids []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, p := range payloads {
		if prev, ok := l.ids[p]; ok && prev != ids[i] {
			l.bad = append(l.bad, fmt.Sprintf("%s answered %s, then %s", p, prev, ids[i]))
		}
		l.ids[p] = ids[i]
	}
}

// httpProducer posts batches of 8 NDJSON records, each with an
// Idempotency-Key of its own, and retries a batch — same key, same body —
// after any error or non-2xx answer until it is answered 2xx or ctx ends.
func httpProducer(ctx context.Context, hc *http.Client, url string, client int, l *httpLedger, retries *int64, mu *sync.Mutex) {
	for batch := 0; ctx.Err() == nil; batch++ {
		var body bytes.Buffer
		payloads := make([]string, 8)
		for i := range payloads {
			payloads[i] = fmt.Sprintf(`{"c":%d,"b":%d,"i":%d}`, client, batch, i)
			fmt.Fprintf(&body, `{"payload":%s}`+"\n", payloads[i])
		}
		key := fmt.Sprintf("c%d-b%d", client, batch)
		for attempt := 0; ; attempt++ {
			if attempt > 0 {
				mu.Lock()
				*retries++
				mu.Unlock()
				select {
				case <-ctx.Done():
					return // unanswered: it may or may not be stored
				case <-time.After(20 * time.Millisecond):
				}
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body.Bytes()))
			req.Header.Set("Content-Type", "application/x-ndjson")
			req.Header.Set("Idempotency-Key", key)
			resp, err := hc.Do(req)
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				continue
			}
			var ans struct {
				IDs []string `json:"ids"`
			}
			if json.Unmarshal(b, &ans) != nil || len(ans.IDs) != len(payloads) {
				continue
			}
			l.add(payloads, ans.IDs)
			break
		}
	}
}

// TestHTTPKillUnderLoad: 64 keep-alive clients post batches with
// idempotency keys, retrying after every error, while the daemon is killed
// with SIGKILL and restarted several times. Every record of every 2xx is
// in Postgres under the id its answer gave, and no record has two ids
// however often its batch was retried.
func TestHTTPKillUnderLoad(t *testing.T) {
	rng, _ := killRand(t)
	cycles := min(killCycles(t), 6)
	const clients = 64
	d, conn, table := pgDaemon(t, "--segment-max-age", "100ms")
	waitHTTP(t, d)
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/records", d.httpPort)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer hc.CloseIdleConnections()
	l := &httpLedger{ids: map[string]string{}}
	var retries int64
	var rmu sync.Mutex
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); httpProducer(ctx, hc, url, c, l, &retries, &rmu) }()
	}
	for cycle := range cycles {
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		d.kill()
		t.Logf("cycle %d: killed with %d records answered", cycle, len(l.snapshotIDs()))
		d.start()
		waitHTTP(t, d)
	}
	time.Sleep(500 * time.Millisecond)
	cancel()
	wg.Wait()
	promised := l.snapshotIDs()
	if len(l.bad) > 0 {
		t.Fatalf("a retried batch was answered other ids: %v", l.bad[:min(5, len(l.bad))])
	}
	if len(promised) == 0 {
		t.Fatal("nothing was answered 2xx")
	}

	deadline := time.Now().Add(90 * time.Second)
	for {
		rows, err := conn.Query(context.Background(), fmt.Sprintf(
			"SELECT convert_from(payload, 'UTF8'), replace(weir_record_id::text, '-', '') FROM %s", table))
		if err != nil {
			t.Fatal(err)
		}
		stored := map[string][]string{}
		for rows.Next() {
			var p, id string
			if err := rows.Scan(&p, &id); err != nil {
				t.Fatal(err)
			}
			stored[p] = append(stored[p], id)
		}
		rows.Close()
		var missing, twice []string
		for p, id := range promised {
			switch ids := stored[p]; {
			case len(ids) == 0:
				missing = append(missing, p)
			case len(ids) > 1 || ids[0] != id:
				twice = append(twice, fmt.Sprintf("%s: answered %s, stored %v", p, id, ids))
			}
		}
		if len(twice) > 0 {
			t.Fatalf("%d answered records stored under another or a second id: %v", len(twice), twice[:min(5, len(twice))])
		}
		if len(missing) == 0 {
			extra := 0
			for p, ids := range stored {
				if len(ids) > 1 {
					t.Fatalf("record %s stored under %d ids: %v", p, len(ids), ids)
				}
				if _, ok := promised[p]; !ok {
					extra++ // durable before a kill cut its answer: kept, once
				}
			}
			t.Logf("%d cycles, %d clients: %d records answered 2xx, all in Postgres once under their answered ids; %d retries; %d more stored whose answer a kill cut",
				cycles, clients, len(promised), retries, extra)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d answered records are not in Postgres, e.g. %v", len(missing), len(promised), missing[:min(5, len(missing))])
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (l *httpLedger) snapshotIDs() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.ids)
}
