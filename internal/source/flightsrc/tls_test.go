package flightsrc

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/weir-io/weir/internal/tlsconf"
	"github.com/weir-io/weir/internal/tlsconf/tlstest"
)

// TestMutualTLS: with a client CA, arrow-go's client presenting a
// certificate of that CA puts batches; one presenting none, or one of
// another CA, is refused at the handshake.
func TestMutualTLS(t *testing.T) {
	serverCA, clientCA, otherCA := tlstest.NewCA(t, "server ca"), tlstest.NewCA(t, "client ca"), tlstest.NewCA(t, "other ca")
	files := tlstest.NewFiles(t.TempDir())
	files.Write(t, serverCA.Server(t), clientCA)
	m, err := tlsconf.New(tlsconf.Options{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: files.ClientCA})
	if err != nil {
		t.Fatal(err)
	}
	r := startSource(t, Options{TLS: m}, nil)
	b := batches(t, 1, 2)
	for _, tc := range []struct {
		name string
		leaf *tlstest.Leaf
		ok   bool
	}{
		{"a client CA's certificate", clientCA.Client(t, "producer"), true},
		{"no certificate", nil, false},
		{"another CA's certificate", otherCA.Client(t, "producer"), false},
	} {
		c, err := flight.NewClientWithMiddleware(r.addr, nil, nil,
			grpc.WithTransportCredentials(credentials.NewTLS(tlstest.ClientConfig(serverCA, tc.leaf))))
		if err != nil {
			t.Fatal(err)
		}
		acks, err := put(context.Background(), c, []string{"orders"}, b, nil)
		c.Close()
		if tc.ok && (err != nil || len(acks) != 1) {
			t.Errorf("%s: %d PutResults, %v", tc.name, len(acks), err)
		}
		if !tc.ok && (err == nil || len(acks) != 0) {
			t.Errorf("%s: accepted (%d PutResults)", tc.name, len(acks))
		}
	}
}
