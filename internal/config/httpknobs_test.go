package config

import "testing"

func TestHTTPValidation(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string // empty: loads
	}{
		{"loopback without auth", "[http]\nlisten = \"127.0.0.1:9186\"\n", nil},
		{"localhost without auth", "[http]\nlisten = \"localhost:9186\"\n", nil},
		{"ipv6 loopback without auth", "[http]\nlisten = \"[::1]:9186\"\n", nil},
		{"every interface without auth", "[http]\nlisten = \":9186\"\n",
			[]string{`http.listen = ":9186": is not a loopback address and the HTTP door has no authentication`, "allow_unauthenticated"}},
		{"a public address without auth", "[http]\nlisten = \"10.1.2.3:80\"\n",
			[]string{`http.listen = "10.1.2.3:80": is not a loopback address`}},
		{"said out loud", "[http]\nlisten = \"0.0.0.0:9186\"\nallow_unauthenticated = true\n", nil},
		{"with tokens", "[http]\nlisten = \"0.0.0.0:9186\"\ntoken_file = \"/etc/weir/tokens\"\n", nil},
		{"with client certificates", "[http]\nlisten = \"0.0.0.0:9186\"\ntls_cert_file = \"/a.crt\"\ntls_key_file = \"/a.key\"\ntls_client_ca_file = \"/ca.crt\"\n", nil},
		{"off", "[http]\nenabled = false\nlisten = \"0.0.0.0:9186\"\n", nil},
		{"half the TLS files", "[http]\ntls_cert_file = \"/a.crt\"\n",
			[]string{`http.tls_key_file = "": is required with the other http.tls_* files`}},
		{"a client CA without HTTPS", "[http]\ntls_client_ca_file = \"/ca.crt\"\n",
			[]string{`http.tls_cert_file = "": is required`, `http.tls_key_file = "": is required`}},
		{"HTTPS with tokens", "[http]\nlisten = \"0.0.0.0:9186\"\ntls_cert_file = \"/a.crt\"\ntls_key_file = \"/a.key\"\ntoken_file = \"/etc/weir/tokens\"\n", nil},
		{"HTTPS alone is no authentication", "[http]\nlisten = \"0.0.0.0:9186\"\ntls_cert_file = \"/a.crt\"\ntls_key_file = \"/a.key\"\n",
			[]string{`http.listen = "0.0.0.0:9186": is not a loopback address`}},
		{"identities without client certificates", "[http]\ntls_cert_file = \"/a.crt\"\ntls_key_file = \"/a.key\"\ntls_allowed_identities = [\"a.example\"]\n",
			[]string{"http.tls_allowed_identities", "without client certificates"}},
		{"identities without TLS", "[http]\ntls_allowed_identities = [\"a.example\"]\n", []string{"http.tls_allowed_identities", "has no effect"}},
		{"the socket's stream", "[http]\nstream = \"socket\"\n", []string{`http.stream = "socket"`}},
		{"a bad stream name", "[http]\nstream = \"a b\"\n", []string{`http.stream = "a b"`}},
		{"a contract on the HTTP stream", "[http]\nstream = \"hooks\"\n[[contract]]\nsource = \"hooks\"\nheader = \"kind=order\"\n", nil},
		{"a breaker on the HTTP stream", "[[contract]]\nsource = \"http\"\nbreaker_percent = 10\n", []string{"breaker_percent = 10: applies to a [[source]] stream only"}},
		{"a contract on the HTTP stream turned off", "[http]\nenabled = false\n[[contract]]\nsource = \"http\"\n", []string{`source = "http": names no [[source]]`}},
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
