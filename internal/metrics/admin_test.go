package metrics

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestAdminStreamEndsAtShutdown: an Admin handler is served beside
// /metrics, and one that streams until its request's context ends (weir
// tap's) does not hold Shutdown: the context ends at once.
func TestAdminStreamEndsAtShutdown(t *testing.T) {
	ended := make(chan struct{})
	stream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(ended)
		fmt.Fprintln(w, "started")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	srv, err := Listen(context.Background(), ServerOptions{Addr: "127.0.0.1:0", Registry: prometheus.NewRegistry(),
		Health: NewHealth(time.Minute, nil), Admin: map[string]http.Handler{"GET /v1/stream": stream}})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + srv.Addr().String()
	resp, err := http.Get(base + "/v1/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("stream: %q %v", line, err)
	}
	if r, err := http.Get(base + "/metrics"); err != nil || r.StatusCode != 200 {
		t.Fatalf("/metrics beside an admin route: %v %v", r, err)
	} else {
		r.Body.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	<-ended
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("shutdown with a stream open took %v", took)
	}
}
