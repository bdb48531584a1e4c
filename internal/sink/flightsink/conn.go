package flightsink

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// TLSFiles are the client's TLS material (all optional).
type TLSFiles struct {
	CAFile     string // PEM CAs the server's certificate must chain to; empty: the system's
	CertFile   string // PEM client certificate chain, for mutual TLS
	KeyFile    string // its key
	ServerName string // overrides the endpoint's host in verification
}

// clientTLS builds the client TLS configuration: TLS 1.2 at least, the
// server verified against the CA file or the system's pool, a client
// certificate when one is given.
func clientTLS(f TLSFiles) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_ca_file %s: no PEM certificate in it", f.CAFile)
		}
		cfg.RootCAs = pool
	}
	if f.CertFile != "" || f.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls_cert_file, tls_key_file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// reconnectMax caps gRPC's reconnection backoff (its default, two
// minutes, would keep a sink down long after its server came back).
const reconnectMax = 5 * time.Second

// dial makes the sink's one client connection. It connects lazily and
// reconnects by itself; every DoPut is a stream on it.
func dial(o Options) (*grpc.ClientConn, error) {
	addr, useTLS, err := parseEndpoint(o.Endpoint)
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if useTLS {
		tc, err := clientTLS(o.TLS)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(tc)
	}
	bo := backoff.DefaultConfig
	bo.MaxDelay = reconnectMax
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 5 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(o.MaxMessageBytes+msgSlack), grpc.MaxCallRecvMsgSize(1<<20)),
	}
	tok, err := newToken(o.TokenFile, o.TokenEnv)
	if err != nil {
		return nil, err
	}
	if tok != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(tok))
	}
	return grpc.NewClient(addr, opts...)
}

// token is the bearer token, as per-call credentials: from an environment
// variable read once, or from a file re-read when its size or modification
// time changes (a rotated token applies to the next call).
type token struct {
	file string

	mu    sync.Mutex
	value string
	stamp [2]int64 // the file's size and modification time when read
}

func newToken(file, env string) (*token, error) {
	switch {
	case env != "":
		v, ok := os.LookupEnv(env)
		if !ok || v == "" {
			return nil, fmt.Errorf("token_env: the variable %s is not set", env)
		}
		return &token{value: v}, nil
	case file != "":
		t := &token{file: file}
		if _, err := t.current(); err != nil {
			return nil, err
		}
		return t, nil
	}
	return nil, nil
}

func (t *token) current() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.file == "" {
		return t.value, nil
	}
	st, err := os.Stat(t.file)
	if err != nil {
		return "", fmt.Errorf("token_file: %w", err)
	}
	stamp := [2]int64{st.Size(), st.ModTime().UnixNano()}
	if stamp == t.stamp && t.value != "" {
		return t.value, nil
	}
	data, err := os.ReadFile(t.file)
	if err != nil {
		return "", fmt.Errorf("token_file: %w", err)
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	v := string(bytes.TrimSpace(line))
	if v == "" {
		return "", errors.New("token_file: the first line is empty")
	}
	t.value, t.stamp = v, stamp
	return v, nil
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t *token) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	v, err := t.current()
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + v}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials:
// configuration refuses a token in clear text beyond loopback.
func (t *token) RequireTransportSecurity() bool { return false }
