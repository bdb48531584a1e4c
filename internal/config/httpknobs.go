package config

import (
	"fmt"
	"net"
	"time"

	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/internal/httpin"
	"github.com/weir-io/weir/internal/tlsconf"
)

// HTTPConfig is [http]: the HTTP door for producers (docs/http.md).
type HTTPConfig struct {
	Enabled              bool   // http.enabled
	Listen               string // http.listen
	Stream               string // http.stream: the records' source name
	TokenFile            string // http.token_file
	AllowUnauthenticated bool   // http.allow_unauthenticated
	TLSCertFile          string // http.tls_cert_file
	TLSKeyFile           string // http.tls_key_file
	TLSClientCAFile      string // http.tls_client_ca_file
	TLSAllowedIdentities []string
	H2C                  bool // http.h2c

	MaxBodyBytes        int64 // http.max_body_bytes
	MaxDecodedBytes     int64 // http.max_decoded_bytes
	MaxRecords          int   // http.max_records
	MaxConcurrent       int   // http.max_concurrent
	MaxConnections      int   // http.max_connections
	StreamInflightBytes int64 // http.stream_inflight_bytes
	MaxHeaderBytes      int   // http.max_header_bytes
	ReadHeaderTimeout   time.Duration
	ReadTimeout         time.Duration
	WriteTimeout        time.Duration
	IdleTimeout         time.Duration
}

// TLS reports whether the listener serves HTTPS (with client
// certificates: tlsconf always asks for them).
func (h *HTTPConfig) TLS() bool { return h.TLSCertFile != "" }

type httpPartial struct {
	Enabled, AllowUnauthenticated, H2C           *bool
	Listen, Stream, TokenFile                    *string
	TLSCertFile, TLSKeyFile, TLSClientCAFile     *string
	TLSAllowedIdentities                         *[]string
	MaxBodyBytes, MaxDecodedBytes                *int64
	StreamInflightBytes                          *int64
	MaxRecords, MaxConcurrent, MaxHeaderBytes    *int
	MaxConnections                               *int
	ReadHeaderTimeout, ReadTimeout, WriteTimeout *time.Duration
	IdleTimeout                                  *time.Duration
}

// httpKnobs are [http]'s settings, in documentation order.
func httpKnobs() []knob {
	hp := func(p *partial) *httpPartial { return &p.http }
	hc := func(c *Config) *HTTPConfig { return &c.HTTP }
	dur := func(key string, def, lo, hi time.Duration, help string, f func(*httpPartial) **time.Duration, o func(*HTTPConfig) *time.Duration) knob {
		return durationKnob(key, def, lo, hi, help, func(p *partial) **time.Duration { return f(hp(p)) }, func(c *Config) *time.Duration { return o(hc(c)) })
	}
	file := func(key, rangeText, help string, f func(*httpPartial) **string, o func(*HTTPConfig) *string) knob {
		return optPathKnob(key, rangeText, help, func(p *partial) **string { return f(hp(p)) }, func(c *Config) *string { return o(hc(c)) })
	}
	return []knob{
		boolKnob("http.enabled", true, "Serve the HTTP door for producers (docs/http.md) on http.listen. On by default on loopback; a node without the write-ahead buffer (gate = raw, role = recovery, a source that is its own raw) does not serve it.",
			func(p *partial) **bool { return &p.http.Enabled }, func(c *Config) *bool { return &c.HTTP.Enabled }),
		newKnob(spec[string]{key: "http.listen", typ: setting.Address(), def: httpin.DefaultAddr,
			help:  "TCP address of the HTTP door. A host other than loopback needs authentication (http.token_file or client certificates) or http.allow_unauthenticated = true; the daemon refuses to start otherwise.",
			field: func(p *partial) **string { return &p.http.Listen }, out: func(c *Config) *string { return &c.HTTP.Listen }}),
		newKnob(spec[string]{key: "http.stream", typ: setting.Text("letters, digits, '-', '_' and '.'; at most 64 bytes; not \"socket\" or a [[source]]'s name", validName), def: httpin.DefaultStream,
			help:  "The HTTP records' stream: their source name in every sink, and what a [[contract]]'s source names to cover them.",
			field: func(p *partial) **string { return &p.http.Stream }, out: func(c *Config) *string { return &c.HTTP.Stream }}),
		file("http.token_file", "optional", "File of the bearer tokens the HTTP door accepts, as SHA-256 hashes (64 hex digits a line; docs/http.md, Authentication); re-read on SIGHUP. Set, every request needs one.",
			func(p *httpPartial) **string { return &p.TokenFile }, func(c *HTTPConfig) *string { return &c.TokenFile }),
		boolKnob("http.allow_unauthenticated", false, "Let http.listen be a non-loopback address without http.token_file or client certificates: anyone who reaches it may write records.",
			func(p *partial) **bool { return &p.http.AllowUnauthenticated }, func(c *Config) *bool { return &c.HTTP.AllowUnauthenticated }),
		file("http.tls_cert_file", "with http.tls_key_file, or neither", "PEM certificate chain of the HTTP door, leaf first: set, it serves HTTPS only (TLS 1.3, HTTP/2 by ALPN); with http.tls_client_ca_file it also requires client certificates (mutual TLS).",
			func(p *httpPartial) **string { return &p.TLSCertFile }, func(c *HTTPConfig) *string { return &c.TLSCertFile }),
		file("http.tls_key_file", "with http.tls_cert_file", "PEM private key of http.tls_cert_file; keep it mode 0600.",
			func(p *httpPartial) **string { return &p.TLSKeyFile }, func(c *HTTPConfig) *string { return &c.TLSKeyFile }),
		file("http.tls_client_ca_file", "with http.tls_cert_file", "PEM bundle of the CAs an HTTP client certificate must chain to: set, every client must present one (mutual TLS); unset, HTTPS clients authenticate by bearer token (http.token_file).",
			func(p *httpPartial) **string { return &p.TLSClientCAFile }, func(c *HTTPConfig) *string { return &c.TLSClientCAFile }),
		listKnob("http.tls_allowed_identities", "each a DNS name, a URI with a scheme (spiffe://…) or an email address; no wildcards",
			"Client certificate SANs allowed on the HTTP door; empty allows every certificate the client CA signed.",
			func(s string) error { _, err := tlsconf.ParseIdentity(s); return err },
			func(p *partial) **[]string { return &p.http.TLSAllowedIdentities }, func(c *Config) *[]string { return &c.HTTP.TLSAllowedIdentities }),
		boolKnob("http.h2c", false, "Also serve HTTP/2 without TLS (h2c, prior knowledge) on http.listen; HTTPS offers HTTP/2 by ALPN regardless.",
			func(p *partial) **bool { return &p.http.H2C }, func(c *Config) *bool { return &c.HTTP.H2C }),
		sizeKnob("http.max_body_bytes", httpin.DefaultMaxBodyBytes, kib, gib, "Largest request body as sent (compressed or not); a larger Content-Length is answered 413 before the body is read, a longer body when it passes the limit.",
			func(p *partial) **int64 { return &p.http.MaxBodyBytes }, func(c *Config) *int64 { return &c.HTTP.MaxBodyBytes }),
		sizeKnob("http.max_decoded_bytes", httpin.DefaultMaxDecodedBytes, kib, gib, "Largest request body once decompressed (gzip, zstd): reading stops and the request is answered 413 as soon as it passes this, so a compression bomb is never held whole. Every body is held in memory_budget a chunk at a time before it is read.",
			func(p *partial) **int64 { return &p.http.MaxDecodedBytes }, func(c *Config) *int64 { return &c.HTTP.MaxDecodedBytes }),
		intKnob("http.max_records", httpin.DefaultMaxRecords, 1, 1<<20, "Most records in one request (NDJSON lines, JSON array elements); more is answered 413.",
			func(p *partial) **int { return &p.http.MaxRecords }, func(c *Config) *int { return &c.HTTP.MaxRecords }),
		intKnob("http.max_concurrent", httpin.DefaultMaxConcurrent, 1, 1<<16, "Requests served at once; one more is answered 429 with Retry-After at once.",
			func(p *partial) **int { return &p.http.MaxConcurrent }, func(c *Config) *int { return &c.HTTP.MaxConcurrent }),
		intKnob("http.max_connections", httpin.DefaultMaxConnections, 1, 1<<20, "Connections open at once on the HTTP door (idle keep-alive ones included); one arriving beyond it waits up to 100ms for a place, then is closed unanswered (weir_http_refused_total{reason=\"max_connections\"}).",
			func(p *partial) **int { return &p.http.MaxConnections }, func(c *Config) *int { return &c.HTTP.MaxConnections }),
		sizeKnob("http.stream_inflight_bytes", httpin.DefaultStreamInflightBytes, 64*kib, gib, "Memory one WebSocket stream's unanswered messages may hold (of memory_budget); the stream stops reading beyond it until answers free some — backpressure the client feels as a slow socket. A message larger than it is read only alone.",
			func(p *partial) **int64 { return &p.http.StreamInflightBytes }, func(c *Config) *int64 { return &c.HTTP.StreamInflightBytes }),
		intSizeKnob("http.max_header_bytes", httpin.DefaultMaxHeaderBytes, kib, 16*mib, "Largest request header block (request line and headers); more is answered 431.",
			func(p *partial) **int { return &p.http.MaxHeaderBytes }, func(c *Config) *int { return &c.HTTP.MaxHeaderBytes }),
		dur("http.read_header_timeout", httpin.DefaultReadHeaderTimeout, 10*time.Millisecond, time.Hour, "Time allowed to read a request's headers (a client that sends them slowly is cut off).",
			func(p *httpPartial) **time.Duration { return &p.ReadHeaderTimeout }, func(c *HTTPConfig) *time.Duration { return &c.ReadHeaderTimeout }),
		dur("http.read_timeout", httpin.DefaultReadTimeout, 10*time.Millisecond, time.Hour, "Time allowed to read a whole request, body included; a body still arriving then is answered 408 (or the connection is cut).",
			func(p *httpPartial) **time.Duration { return &p.ReadTimeout }, func(c *HTTPConfig) *time.Duration { return &c.ReadTimeout }),
		dur("http.write_timeout", httpin.DefaultWriteTimeout, 10*time.Millisecond, time.Hour, "Time from the end of a request's headers to the end of its answer, the wait for the tier's promise included; past it the connection is cut and the outcome is unknown to the client (retry with Idempotency-Key).",
			func(p *httpPartial) **time.Duration { return &p.WriteTimeout }, func(c *HTTPConfig) *time.Duration { return &c.WriteTimeout }),
		dur("http.idle_timeout", httpin.DefaultIdleTimeout, 10*time.Millisecond, 24*time.Hour, "A keep-alive connection with no request for this long is closed.",
			func(p *httpPartial) **time.Duration { return &p.IdleTimeout }, func(c *HTTPConfig) *time.Duration { return &c.IdleTimeout }),
	}
}

// validateHTTP resolves [http]'s paths and checks its rules across keys:
// TLS material all or none, and no listener beyond loopback without
// authentication unless allowed explicitly.
func validateHTTP(ks []knob, c *Config, wd string) []error {
	h := &c.HTTP
	files := []pathField{
		{"http.token_file", &h.TokenFile},
		{"http.tls_cert_file", &h.TLSCertFile},
		{"http.tls_key_file", &h.TLSKeyFile},
		{"http.tls_client_ca_file", &h.TLSClientCAFile},
	}
	errs := resolvePaths(ks, files, wd)
	// HTTPS needs the certificate and its key; a client CA adds client
	// certificates (mutual TLS), which need HTTPS.
	if (h.TLSCertFile == "") != (h.TLSKeyFile == "") || (h.TLSClientCAFile != "" && h.TLSCertFile == "") {
		for _, f := range files[1:3] {
			if *f.p == "" {
				errs = append(errs, invalid(knobByKey(ks, f.key), `""`,
					"is required with the other http.tls_* files: the HTTP door serves HTTPS (http.tls_cert_file and http.tls_key_file; with http.tls_client_ca_file, mutual TLS), or plain HTTP"))
			}
		}
	}
	clientCerts := h.TLSClientCAFile != ""
	if len(h.TLSAllowedIdentities) > 0 && !clientCerts {
		k := knobByKey(ks, "http.tls_allowed_identities")
		errs = append(errs, invalid(k, k.value(c), "has no effect without client certificates (http.tls_client_ca_file)"))
	}
	if !h.Enabled || h.Listen == "" {
		return errs
	}
	host, _, _ := net.SplitHostPort(h.Listen)
	if !loopback(host) && h.TokenFile == "" && !clientCerts && !h.AllowUnauthenticated {
		errs = append(errs, invalid(knobByKey(ks, "http.listen"), fmt.Sprintf("%q", h.Listen),
			"is not a loopback address and the HTTP door has no authentication: set http.token_file, or http.tls_client_ca_file for client certificates, or http.allow_unauthenticated = true to let anyone who reaches it write records"))
	}
	return errs
}

// checkHTTPStream refuses an HTTP stream name another stream has.
func checkHTTPStream(ks []knob, c *Config) []error {
	if !c.HTTP.Enabled {
		return nil
	}
	k := knobByKey(ks, "http.stream")
	if c.HTTP.Stream == SocketStream {
		return []error{invalid(k, `"socket"`, "is the producer socket's stream; give the HTTP records a name of their own")}
	}
	for _, s := range c.Sources {
		if s.Name == c.HTTP.Stream {
			return []error{invalid(k, fmt.Sprintf("%q", c.HTTP.Stream), "is a [[source]]'s name; give the HTTP records a name of their own")}
		}
	}
	return nil
}

// loopback reports whether host (of a listen address) is reachable only
// from this machine.
func loopback(host string) bool { return setting.Loopback(host) }
