package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/weir-io/weir/internal/tlsconf"
)

// HandshakeObserver is implemented by an Observer that also counts TLS
// handshakes the server refused or that did not finish, by reason:
// "timeout", "no_client_certificate", "untrusted_certificate",
// "identity_not_allowed" or "handshake_error".
type HandshakeObserver interface {
	HandshakeFailed(reason string)
}

// ListenTLS binds a TCP listener on addr (host:port; port 0 picks a free
// one), wraps it in TLS with cfg and serves it in the background until
// Shutdown, with the same connection handler as the Unix socket. cfg must
// demand and verify client certificates; there is no plaintext TCP. It
// returns the bound address.
//
// Every connection completes its TLS handshake on its own goroutine, while
// holding a connection slot, before a single frame is read, within
// FrameReadTimeout (IdleTimeout when that is zero): a client that connects
// and never finishes the handshake is dropped then.
func (s *Server) ListenTLS(addr string, cfg *tls.Config) (net.Addr, error) {
	if cfg == nil || cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.MinVersion < tls.VersionTLS13 {
		return nil, errors.New("listen tcp: the TLS configuration must require TLS 1.3 and verified client certificates")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on tcp %s: %w", addr, err)
	}
	bound := ln.Addr()
	s.serve(tls.NewListener(ln, cfg), nil, false)
	s.log.Info("listening", "transport", "tcp+mtls", "addr", bound.String())
	return bound, nil
}

// handshakeTimeout bounds a TLS handshake.
func (s *Server) handshakeTimeout() time.Duration {
	if s.opts.FrameReadTimeout > 0 {
		return s.opts.FrameReadTimeout
	}
	return s.opts.IdleTimeout
}

// handshake completes the TLS handshake of a TLS connection (other
// connections pass through) and reports whether the connection may be
// served.
func (c *conn) handshake() bool {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return true
	}
	if d := c.s.handshakeTimeout(); d > 0 {
		if err := tc.SetDeadline(time.Now().Add(d)); err != nil {
			return false
		}
	}
	if c.stopped.Load() { // shutting down: don't start a handshake
		return false
	}
	err := tc.HandshakeContext(c.s.ctx)
	remote := tc.RemoteAddr().String()
	if err != nil {
		if c.stopped.Load() {
			return false // interrupted by shutdown
		}
		reason := handshakeReason(err)
		if reason == "" { // closed before sending anything: a port probe
			c.s.log.Debug("tcp connection closed before a TLS handshake", "remote", remote)
			reason = "handshake_error"
		} else {
			c.s.log.Warn("tls handshake failed", "remote", remote, "reason", reason, "err", err)
		}
		if ho, ok := c.s.obs.(HandshakeObserver); ok {
			ho.HandshakeFailed(reason)
		}
		if reason != "timeout" && !c.stopped.Load() {
			linger(tc.NetConn())
		}
		return false
	}
	if err := tc.SetDeadline(time.Time{}); err != nil {
		return false
	}
	state := tc.ConnectionState()
	if len(state.PeerCertificates) > 0 {
		c.s.log.Debug("tls connection established", "remote", remote,
			"client", describeIdentities(state.PeerCertificates[0]), "shard", c.shard)
	}
	return true
}

// lingerTimeout and lingerBytes bound how long, and how much of what
// the client sent, a refused connection is read before it is closed.
const (
	lingerTimeout = time.Second
	lingerBytes   = 64 << 10
)

// linger half-closes a refused connection and reads what the client
// sent until it closes its side, for at most lingerTimeout and
// lingerBytes. Closed while unread bytes wait (a TLS 1.3 client writes
// its first frame before it learns it was refused), the socket would
// answer with a reset, which can reach the client before the alert that
// says why it was refused, and destroy it.
func linger(nc net.Conn) {
	tcp, ok := nc.(*net.TCPConn)
	if !ok || tcp.CloseWrite() != nil {
		return
	}
	if tcp.SetReadDeadline(time.Now().Add(lingerTimeout)) != nil {
		return
	}
	io.Copy(io.Discard, io.LimitReader(tcp, lingerBytes))
}

// handshakeReason classifies a failed handshake; "" is a client that went
// away without sending anything.
func handshakeReason(err error) string {
	var verr *tls.CertificateVerificationError
	var uerr x509.UnknownAuthorityError
	switch {
	case errors.Is(err, io.EOF):
		return ""
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, tlsconf.ErrIdentityNotAllowed):
		return "identity_not_allowed"
	case errors.As(err, &verr), errors.As(err, &uerr):
		return "untrusted_certificate"
	case strings.Contains(err.Error(), "didn't provide a certificate"):
		return "no_client_certificate"
	default:
		return "handshake_error"
	}
}

func describeIdentities(cert *x509.Certificate) string {
	ids := tlsconf.CertIdentities(cert)
	if len(ids) == 0 {
		return "subject " + cert.Subject.String()
	}
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = id.String()
	}
	return strings.Join(names, ",")
}
