package flightsrc

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/internal/httpin"
	"github.com/weir-io/weir/internal/tlsconf"
	"github.com/weir-io/weir/source"
)

// Kind is the Flight source's kind name: type = "flight".
const Kind = "flight"

// Defaults.
const (
	DefaultListen          = "127.0.0.1:8815"
	DefaultMaxMessageBytes = 64 << 20
	DefaultRetryAfter      = time.Second
	DefaultTLSReload       = time.Minute
	stopTimeout            = 10 * time.Second
)

// Config is the Flight source's table, [source.flight].
type Config struct {
	Listen               string        // listen
	Streams              []string      // streams
	KeyColumn            string        // key_column
	EventTimeColumn      string        // event_time_column
	HeaderColumns        []string      // header_columns
	TokenFile            string        // token_file
	AllowUnauthenticated bool          // allow_unauthenticated
	TLSCertFile          string        // tls_cert_file
	TLSKeyFile           string        // tls_key_file
	TLSClientCAFile      string        // tls_client_ca_file
	TLSAllowedIdentities []string      // tls_allowed_identities
	MaxInflightBytes     int64         // max_inflight_bytes
	MaxMessageBytes      int64         // max_message_bytes
	RetryAfter           time.Duration // retry_after
}

// Component is the Flight source's registration (internal/components
// lists it).
func Component() component.SourceDef {
	return component.Source[Config]{
		Name:    Kind,
		Summary: "an Arrow Flight server: clients DoPut record batches, each row a record; a batch's PutResult is sent once all its rows are durable",
		Caps:    component.SourceCaps{Regime: source.ProducerManaged, Pausable: true},
		Fields: []component.Field{
			component.Key("listen", setting.Address(), DefaultListen, "TCP address of the Flight server (gRPC). A host other than loopback needs token_file or tls_client_ca_file, or allow_unauthenticated = true.",
				func(c *Config) *string { return &c.Listen }),
			component.Key("streams", setting.TableList("stream names (a DoPut descriptor's first path element)", nil), nil, "The streams clients may DoPut to; ListFlights lists them.",
				func(c *Config) *[]string { return &c.Streams }, component.Required()),
			component.Key("key_column", setting.Text("a column name, or empty", nil), "", "Column whose value is each record's key (it stays in the payload too).",
				func(c *Config) *string { return &c.KeyColumn }),
			component.Key("event_time_column", setting.Text("a column name, or empty", nil), "", "Timestamp or date column whose value is each record's event time, and which lays its id out by time.",
				func(c *Config) *string { return &c.EventTimeColumn }),
			component.Key("header_columns", setting.TableList("column names", nil), nil, "Columns each of which becomes a header of its name.",
				func(c *Config) *[]string { return &c.HeaderColumns }),
			component.Key("token_file", setting.OptionalPath("a token file, as http.token_file (it may be the same file)"), "", "Bearer tokens a call must carry (authorization: Bearer <token>), with the push scope; the format of http.token_file, re-read on SIGHUP.",
				func(c *Config) *string { return &c.TokenFile }),
			component.Key("allow_unauthenticated", setting.Bool(), false, "Let listen be a non-loopback address without token_file or client certificates: anyone who reaches it may write records.",
				func(c *Config) *bool { return &c.AllowUnauthenticated }),
			component.Key("tls_cert_file", setting.OptionalPath("a PEM certificate chain"), "", "Serve TLS with this certificate (with tls_key_file).",
				func(c *Config) *string { return &c.TLSCertFile }),
			component.Key("tls_key_file", setting.OptionalPath("a PEM private key"), "", "The key of tls_cert_file.",
				func(c *Config) *string { return &c.TLSKeyFile }),
			component.Key("tls_client_ca_file", setting.OptionalPath("PEM CA certificates"), "", "Require client certificates chaining to these CAs (mutual TLS).",
				func(c *Config) *string { return &c.TLSClientCAFile }),
			component.Key("tls_allowed_identities", setting.TableList("SAN identities, as http.tls_allowed_identities", nil), nil, "With tls_client_ca_file: only client certificates carrying one of these SANs.",
				func(c *Config) *[]string { return &c.TLSAllowedIdentities }),
			component.Key("max_inflight_bytes", setting.OrZero(setting.Size(64<<10, 1<<40), "the source's share of memory_budget"), int64(0),
				"Bytes all DoPut calls together may hold read but not yet acknowledged; a call reads no further batch while they are at it. 0: the source's share of memory_budget (docs/sources.md).",
				func(c *Config) *int64 { return &c.MaxInflightBytes }, component.Shown("the source's prefetch share of memory_budget")),
			component.Key("max_message_bytes", setting.Size(1<<20, 2<<30), int64(DefaultMaxMessageBytes), "Largest FlightData message (one batch) accepted.",
				func(c *Config) *int64 { return &c.MaxMessageBytes }),
			component.Key("retry_after", setting.Duration(10*time.Millisecond, time.Hour), DefaultRetryAfter, "The retry hint (gRPC RetryInfo) of a DoPut refused with RESOURCE_EXHAUSTED while flow control is Critical.",
				func(c *Config) *time.Duration { return &c.RetryAfter }),
		},
		Check: check,
		Open: func(_ context.Context, p component.SourceParams[Config]) (source.Source, error) {
			return open(p)
		},
	}
}

// check holds the rules across keys: TLS material all or none, client
// certificates only with TLS, and no listener beyond loopback without
// authentication unless allowed explicitly.
func check(c *Config) []component.Problem {
	var ps []component.Problem
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") || (c.TLSClientCAFile != "" && c.TLSCertFile == "") {
		ps = append(ps, component.Problem{Key: "tls_cert_file", Value: fmt.Sprintf("%q", c.TLSCertFile),
			Why: "tls_cert_file and tls_key_file go together, and tls_client_ca_file needs them: the source serves TLS (mutual with a client CA) or plain gRPC"})
	}
	if len(c.TLSAllowedIdentities) > 0 && c.TLSClientCAFile == "" {
		ps = append(ps, component.Problem{Key: "tls_allowed_identities", Value: fmt.Sprint(c.TLSAllowedIdentities),
			Why: "has no effect without client certificates (tls_client_ca_file)"})
	}
	if c.Listen == "" {
		ps = append(ps, component.Problem{Key: "listen", Value: `""`, Why: "the Flight source needs an address to listen on"})
	}
	if host, _, err := net.SplitHostPort(c.Listen); err == nil && !setting.Loopback(host) &&
		c.TokenFile == "" && c.TLSClientCAFile == "" && !c.AllowUnauthenticated {
		ps = append(ps, component.Problem{Key: "listen", Value: fmt.Sprintf("%q", c.Listen),
			Why: "is not a loopback address and the Flight source has no authentication: set token_file, or tls_client_ca_file for client certificates, or allow_unauthenticated = true to let anyone who reaches it write records"})
	}
	seen := map[string]bool{}
	for _, s := range c.Streams {
		if s == "" || seen[s] {
			ps = append(ps, component.Problem{Key: "streams", Value: fmt.Sprintf("%q", s), Why: "stream names are unique and not empty"})
		}
		seen[s] = true
	}
	return ps
}

func open(p component.SourceParams[Config]) (*Source, error) {
	c := p.Config
	m, err := NewMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"source": p.Name}, p.Metrics), c.Streams)
	if err != nil {
		return nil, fmt.Errorf("flight source %s: metrics: %w", p.Name, err)
	}
	o := Options{
		Name: p.Name, Listen: c.Listen, Streams: c.Streams,
		Columns:          arrowrec.Columns{Key: c.KeyColumn, EventTime: c.EventTimeColumn, Headers: c.HeaderColumns},
		TLSReload:        DefaultTLSReload,
		MaxInflightBytes: c.MaxInflightBytes,
		MaxMessageBytes:  int(c.MaxMessageBytes),
		RetryAfter:       c.RetryAfter,
		StopTimeout:      stopTimeout,
		Metrics:          m,
		Logger:           p.Logger,
		OnAck:            p.OnCommit,
	}
	if o.MaxInflightBytes == 0 {
		o.MaxInflightBytes = max(p.Flow.Prefetch, int64(o.MaxMessageBytes))
	}
	if c.TokenFile != "" {
		if o.Tokens, err = httpin.LoadTokens(c.TokenFile, p.Logger); err != nil {
			return nil, fmt.Errorf("flight source %s: token_file: %w", p.Name, err)
		}
	}
	if c.TLSCertFile != "" {
		o.TLS, err = tlsconf.New(tlsconf.Options{
			CertFile: c.TLSCertFile, KeyFile: c.TLSKeyFile, ClientCAFile: c.TLSClientCAFile,
			NoClientCerts: c.TLSClientCAFile == "", AllowedIdentities: c.TLSAllowedIdentities, Logger: p.Logger,
		})
		if err != nil {
			return nil, fmt.Errorf("flight source %s: tls: %w", p.Name, err)
		}
	}
	return New(o)
}
