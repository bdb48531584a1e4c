package systest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/tlsconf/tlstest"
	"github.com/weir-io/weir/wire"
)

// freeTCPAddr returns a loopback address with a port that was free a
// moment ago.
func freeTCPAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// tlsRefused dials addr with cfg, sends a push and returns the error that
// ends the connection; it fails the test if the daemon answers instead.
func tlsRefused(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	tc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := tc.Write(wire.AppendPush(nil, wire.Push{RequestID: 1, Durability: wire.Durable, Payloads: [][]byte{[]byte("sneaky")}})); err != nil {
		return err
	}
	var b [64]byte
	n, err := tc.Read(b[:])
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("daemon answered (%d bytes, err %v) a client it should have refused", n, err)
	}
	return err
}

// TestTCPMutualTLS runs the real daemon with a TCP listener, pushes records
// over mutual TLS and finds them in the file sink; clients without a
// certificate, or with an identity not on the allow-list, are refused; a
// server certificate rotated on disk is served after SIGHUP.
func TestTCPMutualTLS(t *testing.T) {
	serverCA := tlstest.NewCA(t, "systest server CA")
	clientCA := tlstest.NewCA(t, "systest client CA")
	certDir := t.TempDir()
	files := tlstest.NewFiles(certDir)
	files.Write(t, serverCA.Server(t), clientCA)
	addr := freeTCPAddr(t)
	const producerID = "spiffe://weir.test/producer"

	d := newDaemon(t, "--tcp-listen", addr,
		"--tls-cert-file", files.Cert, "--tls-key-file", files.Key, "--tls-client-ca-file", files.ClientCA,
		"--tls-allowed-identities", producerID+",ingest.weir.test")
	d.start()
	if !strings.Contains(d.log.String(), "transport=tcp+mtls addr="+addr) {
		t.Fatalf("no TCP listener in the log:\n%s", d.log)
	}
	ctx := ctxTimeout(t, 60*time.Second)

	good := tlstest.ClientConfig(serverCA, clientCA.Client(t, producerID))
	c, err := client.Dial(ctx, "tcp://"+addr, client.WithTLS(good))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	const n = 500
	for i := 0; i < n; i += 10 {
		batch := make([][]byte, 10)
		for j := range batch {
			p := fmt.Sprintf(`{"tcp":%d}`, i+j)
			batch[j] = []byte(p)
			want[p] = true
		}
		tier := client.Durable
		if i%20 == 10 {
			tier = client.Buffered
		}
		if err := c.PushBatch(ctx, batch, tier); err != nil {
			t.Fatalf("push over mTLS: %v\n%s", err, tail(d.log.String(), 4000))
		}
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, d, want, 30*time.Second)

	if err := tlsRefused(t, addr, tlstest.ClientConfig(serverCA, nil)); err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("client without a certificate: %v, want a certificate-required alert", err)
	}
	if err := tlsRefused(t, addr, tlstest.ClientConfig(serverCA, clientCA.Client(t, "spiffe://weir.test/other"))); err == nil || !strings.Contains(err.Error(), "bad certificate") {
		t.Errorf("client with a disallowed identity: %v, want a bad-certificate alert", err)
	}
	// Plain TCP gets nowhere either.
	if err := plainRefused(addr); err != nil {
		t.Error(err)
	}
	log := d.log.String()
	for _, s := range []string{"reason=no_client_certificate", "reason=identity_not_allowed", "URI:spiffe://weir.test/other"} {
		if !strings.Contains(log, s) {
			t.Errorf("daemon log lacks %q", s)
		}
	}
	if got := sinkPayloads(t, d.outDir())["sneaky"]; got != 0 {
		t.Errorf("a refused client's record reached the sink %d times", got)
	}

	// Rotate the server certificate and ask for a reload.
	next := serverCA.Server(t)
	files.Write(t, next, clientCA)
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wantSerial := next.Cert.SerialNumber.String()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tc, err := tls.Dial("tcp", addr, good)
		if err == nil {
			got := tc.ConnectionState().PeerCertificates[0].SerialNumber.String()
			tc.Close()
			if got == wantSerial {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotated certificate not served 10s after SIGHUP (last error %v)\n%s", err, tail(d.log.String(), 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d.exited() {
		t.Fatal("daemon exited on SIGHUP")
	}
	if err := d.stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, tail(d.log.String(), 3000))
	}
}

// plainRefused checks that a plaintext wire-protocol push over TCP is not
// answered.
func plainRefused(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(wire.AppendPush(nil, wire.Push{RequestID: 1, Durability: wire.Durable, Payloads: [][]byte{[]byte("sneaky")}}))
	b := make([]byte, 64)
	for {
		n, err := c.Read(b)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return errors.New("plaintext connection neither refused nor closed")
			}
			return nil
		}
		if n >= wire.HeaderSize && b[0] != 0x15 { // anything but a TLS alert record
			return fmt.Errorf("plaintext push answered with % x", b[:n])
		}
	}
}

// TestTCPBadTLSConfigRefusesToStart: a daemon whose TLS files are broken
// exits at start with an error naming the file.
func TestTCPBadTLSConfigRefusesToStart(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	files := tlstest.NewFiles(t.TempDir())
	files.Write(t, ca.Server(t), ca)
	tlstest.WriteFile(t, files.Key, ca.Server(t).KeyPEM) // another certificate's key
	d := newDaemon(t, "--tcp-listen", freeTCPAddr(t),
		"--tls-cert-file", files.Cert, "--tls-key-file", files.Key, "--tls-client-ca-file", files.ClientCA)
	if err := d.launch(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(15 * time.Second):
		t.Fatal("daemon with a mismatched key did not exit")
	}
	if d.err == nil {
		t.Fatal("daemon exited with status 0")
	}
	if log := d.log.String(); !strings.Contains(log, "private key does not match public key") || !strings.Contains(log, files.Cert) {
		t.Errorf("exit log does not explain:\n%s", log)
	}
}
