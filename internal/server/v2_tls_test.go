package server_test

import (
	"bufio"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wire"
)

// TestReplayRefusedOverMTLS: a producer on the mTLS listener is not
// granted replay, and a record with replay fields is refused NotPermitted
// while ordinary version-2 pushes are acked.
func TestReplayRefusedOverMTLS(t *testing.T) {
	e := newTLSEnv(t, tlsEnvConfig{})
	cfg := e.clientCfg(e.clientCA.Client(t, "producer.weir.test"))
	tc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", e.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(tc)
	roundTrip := func(frame []byte) wire.Response {
		t.Helper()
		if _, err := tc.Write(frame); err != nil {
			t.Fatal(err)
		}
		resp, err := wire.ReadResponse(br)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := roundTrip(wire.AppendHello(nil, wire.Hello{MaxVersion: 2, Flags: wire.FlagIdempotent | wire.FlagReplay, Producer: wire.ProducerID{1}}))
	if resp.Type != wire.TypeHelloAck || resp.Hello.Flags != wire.FlagIdempotent {
		t.Fatalf("Hello over mTLS answered %+v", resp)
	}
	replay := record.Encode(&record.Meta{ID: sink.RecordID{1}, HasID: true})
	resp = roundTrip(wire.AppendPush(nil, wire.Push{Version: 2, RequestID: 1, Payloads: [][]byte{[]byte("r")}, Metas: [][]byte{replay}}))
	if resp.Type != wire.TypeNack || resp.Code != wire.CodeNotPermitted || resp.RequestID != 1 {
		t.Fatalf("replay over mTLS answered %+v", resp)
	}
	resp = roundTrip(wire.AppendPush(nil, wire.Push{Version: 2, RequestID: 2, FirstSeq: 1, Payloads: [][]byte{[]byte("ok")}}))
	if resp.Type != wire.TypeAck || resp.RequestID != 2 || resp.Version != 2 {
		t.Fatalf("push over mTLS answered %+v", resp)
	}
}
