package daemon

import (
	"fmt"
	"log/slog"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/server"
	"github.com/weir-io/weir/internal/tlsconf"
)

// loadTLS reads the TLS material for tcp_listen, so that a bad certificate
// stops the daemon before anything is opened. It returns nil when TCP is
// off.
func loadTLS(cfg *config.Config, log *slog.Logger) (*tlsconf.Manager, error) {
	if cfg.TCPListen == "" {
		return nil, nil
	}
	m, err := tlsManager(cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile, cfg.TLSAllowedIdentities, log.With("component", "tls"))
	if err != nil {
		return nil, fmt.Errorf("tcp_listen %s: %w", cfg.TCPListen, err)
	}
	return m, nil
}

// tlsManager reads a listener's TLS material: its certificate and key,
// the CA bundle client certificates must chain to, the identities
// allowed (none: any verified client).
func tlsManager(cert, key, ca string, ids []string, log *slog.Logger) (*tlsconf.Manager, error) {
	return tlsconf.New(tlsconf.Options{CertFile: cert, KeyFile: key, ClientCAFile: ca, AllowedIdentities: ids, Logger: log})
}

// serveTCP binds tcp_listen with mutual TLS and keeps the TLS material
// fresh: every tls_reload_interval and on SIGHUP. The returned stop ends
// the reloading; the listener itself closes with the server. With m nil it
// does nothing.
func serveTCP(srv *server.Server, m *tlsconf.Manager, cfg *config.Config) (stop func(), err error) {
	if m == nil {
		return func() {}, nil
	}
	if _, err := srv.ListenTLS(cfg.TCPListen, m.ServerConfig()); err != nil {
		return nil, fmt.Errorf("tcp_listen: %w", err)
	}
	stopReloads := reloadOnHUP(nil, m, cfg)
	return func() { stopReloads() }, nil
}
