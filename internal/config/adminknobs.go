package config

import "fmt"

// AdminAuthenticated reports whether the metrics endpoint's admin routes
// (the status page, weir tap, /debug/pprof/) can authenticate a request:
// with the HTTP door's tokens (http.token_file, admin scope), or with its
// client certificates over HTTPS (metrics_tls and
// http.tls_client_ca_file).
func (c *Config) AdminAuthenticated() bool {
	return c.HTTP.TokenFile != "" || (c.MetricsTLS && c.HTTP.TLSClientCAFile != "")
}

// AdminNeedsAuth reports whether the metrics endpoint's admin routes
// must authenticate requests: it listens, beyond loopback.
func (c *Config) AdminNeedsAuth() bool { return c.MetricsPort != 0 && !loopback(c.MetricsBind) }

// validateAdmin checks the metrics endpoint's rules across keys:
// metrics_tls has the HTTP door's certificate to serve, and no bind
// beyond loopback serves the admin routes without authentication unless
// allowed explicitly. /metrics, /live and /ready stay open either way.
func validateAdmin(ks []knob, c *Config) []error {
	var errs []error
	if c.MetricsTLS && !c.HTTP.TLS() {
		errs = append(errs, invalid(knobByKey(ks, "metrics_tls"), "true",
			"needs http.tls_cert_file and http.tls_key_file: the metrics endpoint serves the HTTP door's certificate (and, with http.tls_client_ca_file, takes its client certificates)"))
	}
	if c.AdminNeedsAuth() && !c.AdminAuthenticated() && !c.MetricsAllowUnauthenticated {
		errs = append(errs, invalid(knobByKey(ks, "metrics_bind"), fmt.Sprintf("%q", c.MetricsBind),
			"is not a loopback address and the metrics endpoint's admin routes (the status page, weir tap, /debug/pprof/) have no authentication: set http.token_file (tokens with scopes=admin), or metrics_tls = true with http.tls_client_ca_file for client certificates, or metrics_allow_unauthenticated = true to let anyone who reaches it read them (/metrics, /live and /ready stay unauthenticated either way)"))
	}
	return errs
}
