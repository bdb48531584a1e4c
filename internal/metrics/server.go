package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Timeouts of the HTTP server. Scrapes are small and local; these only
// bound what a stuck or hostile client can hold.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 2 * time.Minute
	scrapeTimeout     = 20 * time.Second
	maxHeaderBytes    = 16 << 10
)

// ServerOptions configure Listen.
type ServerOptions struct {
	// Addr is host:port to listen on.
	Addr string
	// Registry is served at /metrics. Required.
	Registry *prometheus.Registry
	// Health answers /live and /ready. Required.
	Health *Health
	// Logger; nil discards.
	Logger *slog.Logger
	// Pprof also serves net/http/pprof under /debug/pprof/.
	Pprof bool
	// Admin are more handlers served beside /metrics, by route pattern
	// (net/http.ServeMux syntax, such as "GET /v1/tap"). A streamed
	// answer ends when its request's context does: Shutdown cancels it.
	Admin map[string]http.Handler
}

// Server serves /metrics, /live and /ready, and the Admin handlers.
type Server struct {
	srv    *http.Server
	ln     net.Listener
	log    *slog.Logger
	done   chan struct{}
	cancel context.CancelFunc // ends the requests' context: streams stop at Shutdown
}

// Listen binds opts.Addr and serves in the background until Shutdown. A
// failure to bind is returned at once.
func Listen(ctx context.Context, opts ServerOptions) (*Server, error) {
	if opts.Registry == nil || opts.Health == nil {
		return nil, errors.New("metrics: Listen needs a Registry and a Health")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", opts.Addr, err)
	}
	handler := Handler(opts.Registry, opts.Health, log)
	if opts.Pprof || len(opts.Admin) > 0 {
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		if opts.Pprof {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		for pattern, h := range opts.Admin {
			mux.Handle(pattern, h)
		}
		handler = mux
	}
	base, cancel := context.WithCancel(context.Background())
	s := &Server{
		srv: &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: readHeaderTimeout,
			ReadTimeout:       readTimeout,
			WriteTimeout:      writeTimeout,
			IdleTimeout:       idleTimeout,
			MaxHeaderBytes:    maxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
			BaseContext:       func(net.Listener) context.Context { return base },
		},
		ln:     ln,
		log:    log,
		done:   make(chan struct{}),
		cancel: cancel,
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics endpoint stopped", "err", err)
		}
	}()
	log.Info("metrics endpoint listening", "addr", ln.Addr().String())
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Shutdown stops the server, waiting for requests in progress until ctx
// ends, and then for the serving goroutine to exit.
//
// Streamed answers (an Admin handler's) see their request's context end
// at once, so that they finish instead of holding the shutdown.
func (s *Server) Shutdown(ctx context.Context) error {
	s.cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(fmt.Errorf("metrics: shutdown: %w", err), s.srv.Close())
	}
	<-s.done
	return err
}

// Handler serves /metrics from reg and /live and /ready from h.
func Handler(reg *prometheus.Registry, h *Health, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:          promLogger{log},
		ErrorHandling:     promhttp.ContinueOnError,
		Registry:          reg,
		EnableOpenMetrics: true,
		Timeout:           scrapeTimeout,
	})
	mux.Handle("GET /metrics", promhttp.InstrumentMetricHandler(reg, metrics))
	mux.HandleFunc("GET /live", func(w http.ResponseWriter, _ *http.Request) {
		if err := h.Liveness(); err != nil {
			plain(w, http.StatusServiceUnavailable, "stuck: "+oneLine(err))
			return
		}
		plain(w, http.StatusOK, "live")
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		if err := h.Readiness(); err != nil {
			plain(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
			return
		}
		if d := h.Degradation(); d != "" {
			plain(w, http.StatusOK, "ready, degraded: "+strings.ReplaceAll(d, "\n", "; "))
			return
		}
		plain(w, http.StatusOK, "ready")
	})
	return mux
}

func plain(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	io.WriteString(w, body+"\n")
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// promLogger passes promhttp's errors to slog.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) {
	l.log.Error("serving metrics", "err", strings.TrimSpace(fmt.Sprintln(v...)))
}
