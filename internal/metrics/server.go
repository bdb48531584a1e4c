package metrics

import (
	"context"
	"crypto/tls"
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
	// Pprof also serves net/http/pprof under /debug/pprof/, an admin
	// route.
	Pprof bool
	// Admin are further routes, by http.ServeMux pattern ("GET /v1/tap",
	// "GET /status"): the status page, weir tap. They and pprof are the
	// admin routes: on a bind beyond loopback each request to them must
	// pass AdminAuth. /metrics, /live and /ready never ask for it
	// (scrapers and load balancers).
	Admin map[string]http.Handler
	// AdminAuth authenticates a request to an admin route on a bind
	// beyond loopback: nil lets it through, an error wrapping
	// ErrForbidden is answered 403, any other 401. On loopback the admin
	// routes are open, like /metrics.
	AdminAuth func(*http.Request) error
	// AllowUnauthenticatedAdmin lets a bind beyond loopback serve admin
	// routes without AdminAuth; without it Listen refuses to.
	AllowUnauthenticatedAdmin bool
	// TLS, when set, serves HTTPS (every route) with this configuration.
	TLS *tls.Config
}

// ErrForbidden, wrapped in an error of AdminAuth, answers 403 (known
// credentials without the right to the admin routes) instead of 401.
var ErrForbidden = errors.New("metrics: forbidden")

// ErrAdminUnauthenticated is Listen's refusal to serve admin routes to
// the network without authentication.
var ErrAdminUnauthenticated = errors.New("metrics: admin routes (status page, pprof, tap) on an address beyond loopback need authentication")

// Server serves /metrics, /live, /ready and the admin routes.
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
	admin := adminRoutes(opts)
	var auth func(*http.Request) error
	if len(admin) > 0 && !isLoopback(ln.Addr()) {
		auth = opts.AdminAuth
		if auth == nil && !opts.AllowUnauthenticatedAdmin {
			return nil, errors.Join(fmt.Errorf("%w: %s", ErrAdminUnauthenticated, ln.Addr()), ln.Close())
		}
	}
	if opts.TLS != nil {
		ln = tls.NewListener(ln, opts.TLS)
	}
	mux := http.NewServeMux()
	mux.Handle("/", Handler(opts.Registry, opts.Health, log))
	for pattern, h := range admin {
		mux.Handle(pattern, requireAuth(auth, h, log))
	}
	base, cancel := context.WithCancel(context.Background())
	s := &Server{
		srv: &http.Server{
			Handler:           mux,
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
	log.Info("metrics endpoint listening", "addr", ln.Addr().String(), "tls", opts.TLS != nil,
		"admin_routes", len(admin), "admin_auth", auth != nil)
	return s, nil
}

// adminRoutes are opts.Admin with pprof's routes when asked for.
func adminRoutes(opts ServerOptions) map[string]http.Handler {
	routes := make(map[string]http.Handler, len(opts.Admin)+5)
	for p, h := range opts.Admin {
		routes[p] = h
	}
	if opts.Pprof {
		routes["/debug/pprof/"] = http.HandlerFunc(pprof.Index)
		routes["/debug/pprof/cmdline"] = http.HandlerFunc(pprof.Cmdline)
		routes["/debug/pprof/profile"] = http.HandlerFunc(pprof.Profile)
		routes["/debug/pprof/symbol"] = http.HandlerFunc(pprof.Symbol)
		routes["/debug/pprof/trace"] = http.HandlerFunc(pprof.Trace)
	}
	return routes
}

// isLoopback reports whether a bound address is reachable only from this
// machine.
func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// requireAuth answers 401 to a request auth refuses; a nil auth lets
// every request through.
func requireAuth(auth func(*http.Request) error, h http.Handler, log *slog.Logger) http.Handler {
	if auth == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := auth(r); err != nil {
			log.Debug("admin request refused", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
			if errors.Is(err, ErrForbidden) {
				plain(w, http.StatusForbidden, "forbidden: "+err.Error())
				return
			}
			// Bearer for tools; Basic so that a browser asks for the
			// token (as the password) itself.
			w.Header().Add("WWW-Authenticate", `Bearer realm="weir admin"`)
			w.Header().Add("WWW-Authenticate", `Basic realm="weir admin", charset="UTF-8"`)
			plain(w, http.StatusUnauthorized, "unauthorized: "+err.Error())
			return
		}
		h.ServeHTTP(w, r)
	})
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
