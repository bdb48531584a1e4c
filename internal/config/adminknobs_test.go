package config

import "testing"

// TestAdminValidation: the metrics endpoint beyond loopback serves its
// admin routes (status page, tap, pprof) only with the HTTP door's
// authentication or when told to without.
func TestAdminValidation(t *testing.T) {
	const httpTLS = "[http]\ntls_cert_file = \"/a.crt\"\ntls_key_file = \"/a.key\"\ntls_client_ca_file = \"/ca.crt\"\n"
	for _, tc := range []struct {
		name, body string
		want       []string // empty: loads
	}{
		{"loopback without auth", "metrics_bind = \"127.0.0.1\"\n", nil},
		{"localhost without auth", "metrics_bind = \"localhost\"\n", nil},
		{"ipv6 loopback without auth", "metrics_bind = \"::1\"\n", nil},
		{"every interface without auth", "metrics_bind = \"0.0.0.0\"\n",
			[]string{`metrics_bind = "0.0.0.0": is not a loopback address and the metrics endpoint's admin routes`, "metrics_allow_unauthenticated = true"}},
		{"a host name without auth", "metrics_bind = \"metrics.internal\"\n", []string{`metrics_bind = "metrics.internal": is not a loopback address`}},
		{"said out loud", "metrics_bind = \"0.0.0.0\"\nmetrics_allow_unauthenticated = true\n", nil},
		{"endpoint off", "metrics_bind = \"0.0.0.0\"\nmetrics_port = 0\n", nil},
		{"with the HTTP door's tokens", "metrics_bind = \"0.0.0.0\"\n[http]\ntoken_file = \"/etc/weir/tokens\"\n", nil},
		{"tokens with the HTTP door off", "metrics_bind = \"0.0.0.0\"\n[http]\nenabled = false\ntoken_file = \"/etc/weir/tokens\"\n", nil},
		{"with client certificates", "metrics_bind = \"0.0.0.0\"\nmetrics_tls = true\n" + httpTLS, nil},
		{"the door's certificates but not metrics_tls", "metrics_bind = \"0.0.0.0\"\n" + httpTLS, []string{`metrics_bind = "0.0.0.0": is not a loopback address`}},
		{"metrics_tls without certificates", "metrics_tls = true\n", []string{"metrics_tls = true: needs http.tls_cert_file"}},
		{"HTTPS without client certificates is no authentication", "metrics_bind = \"0.0.0.0\"\nmetrics_tls = true\n[http]\ntls_cert_file = \"/a.crt\"\ntls_key_file = \"/a.key\"\n",
			[]string{`metrics_bind = "0.0.0.0": is not a loopback address`}},
		{"HTTPS with tokens", "metrics_bind = \"0.0.0.0\"\nmetrics_tls = true\n[http]\ntls_cert_file = \"/a.crt\"\ntls_key_file = \"/a.key\"\ntoken_file = \"/t\"\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.want) == 0 {
				loadClean(t, tc.body)
				return
			}
			wantLoadError(t, tc.body, tc.want)
		})
	}
}
