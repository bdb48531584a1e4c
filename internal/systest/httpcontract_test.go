package systest

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestHTTPContract: a [[contract]] naming the HTTP stream judges the
// records posted over HTTP: those it passes reach the sink, those it
// rejects go to the drain's dead letter (a single sink), and a socket
// contract would not see them.
func TestHTTPContract(t *testing.T) {
	cfg := writeConfig(t, contractTOML(t, "http", "1"))
	d := newDaemon(t, "--config", cfg, "--segment-max-age", "100ms")
	d.start()
	waitHTTP(t, d)
	good, bad := map[string]bool{}, map[string]bool{}
	var body strings.Builder
	for i := range 20 {
		amount := 5
		if i%4 == 3 {
			amount = -1 // fails positive_amount
		}
		p := fmt.Sprintf(`{"id":%d,"amount":%d,"qty":1}`, i, amount)
		if amount > 0 {
			good[p] = true
		} else {
			bad[p] = true
		}
		fmt.Fprintf(&body, `{"payload":%s}`+"\n", p)
	}
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/records", d.httpPort), "application/x-ndjson", strings.NewReader(body.String()))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	inSink := waitDelivered(t, d, good, 30*time.Second)
	for p := range inSink {
		if bad[p] {
			t.Errorf("the sink holds %s, which the contract rejects", p)
		}
	}
	dead := waitDeadLettered(t, d, bad, 30*time.Second)
	t.Logf("%d passed into the sink, %d rejected into the dead letter", len(inSink), len(dead))
}
