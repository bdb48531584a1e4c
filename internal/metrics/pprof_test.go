package metrics

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestPprofOnlyWhenAsked: /debug/pprof/ is served only with Pprof set.
func TestPprofOnlyWhenAsked(t *testing.T) {
	for _, on := range []bool{false, true} {
		srv, err := Listen(context.Background(), ServerOptions{Addr: "127.0.0.1:0", Registry: prometheus.NewRegistry(), Health: NewHealth(time.Minute, nil), Pprof: on})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get("http://" + srv.Addr().String() + "/debug/pprof/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := http.StatusNotFound
		if on {
			want = http.StatusOK
		}
		if resp.StatusCode != want {
			t.Errorf("pprof %v: /debug/pprof/ answered %d, want %d", on, resp.StatusCode, want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := srv.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
}
