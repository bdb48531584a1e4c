package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
)

// endpoint is a parsed address.
type endpoint struct {
	network string // "unix" or "tcp"
	address string
}

// parseAddr accepts unix:///path, unix:/path, unix:path, a plain path, and
// tcp://host:port.
func parseAddr(addr string) (endpoint, error) {
	switch {
	case addr == "":
		return endpoint{}, errors.New("client: empty address")
	case strings.HasPrefix(addr, "unix://"):
		p := strings.TrimPrefix(addr, "unix://")
		if !strings.HasPrefix(p, "/") {
			return endpoint{}, fmt.Errorf("client: address %q: unix:// needs an absolute path (unix:///path)", addr)
		}
		return endpoint{"unix", p}, nil
	case strings.HasPrefix(addr, "unix:"):
		p := strings.TrimPrefix(addr, "unix:")
		if p == "" {
			return endpoint{}, fmt.Errorf("client: address %q: no socket path", addr)
		}
		return endpoint{"unix", p}, nil
	case strings.HasPrefix(addr, "tcp://"):
		hp := strings.TrimPrefix(addr, "tcp://")
		host, port, err := net.SplitHostPort(hp)
		if err != nil || host == "" || port == "" {
			return endpoint{}, fmt.Errorf("client: address %q: want tcp://host:port", addr)
		}
		return endpoint{"tcp", hp}, nil
	case strings.Contains(addr, "://"):
		return endpoint{}, fmt.Errorf("client: address %q: unknown scheme", addr)
	default:
		return endpoint{"unix", addr}, nil
	}
}

// dial opens one connection to ep.
func dial(ctx context.Context, ep endpoint, o *options) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, o.dialTimeout)
	defer cancel()
	if ep.network == "tcp" {
		cfg := o.tls.Clone()
		if cfg.MinVersion == 0 {
			cfg.MinVersion = tls.VersionTLS13
		}
		d := &tls.Dialer{Config: cfg}
		c, err := d.DialContext(ctx, "tcp", ep.address)
		if err != nil {
			return nil, fmt.Errorf("client: dial tcp %s: %w", ep.address, err)
		}
		return c, nil
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", ep.address)
	if err != nil {
		return nil, fmt.Errorf("client: dial unix %s: %w", ep.address, err)
	}
	return c, nil
}
