package pgsink

import (
	"testing"

	"github.com/weir-io/weir/sink"
)

// The pre-check's refusals carry the reason code the rejection lanes keep:
// too large is oversize, bytes the column cannot take are decode.
func TestCheckCodes(t *testing.T) {
	s := &Sink{opts: Options{MaxPayloadBytes: 10, PayloadType: PayloadJSONB}}
	for _, c := range []struct {
		name string
		r    sink.Record
		want sink.Code
	}{
		{"ok", sink.Record{Payload: []byte(`{}`), Source: "socket"}, sink.CodeUnknown},
		{"oversize", sink.Record{Payload: []byte(`"0123456789"`)}, sink.CodeOversize},
		{"not json", sink.Record{Payload: []byte(`nope`)}, sink.CodeDecode},
		{"not utf-8", sink.Record{Payload: []byte("\"\xff\"")}, sink.CodeDecode},
		{"bad source", sink.Record{Payload: []byte(`1`), Source: "a\x00b"}, sink.CodeDecode},
	} {
		why, code := s.check(&c.r)
		if code != c.want || (why == "") != (c.want == sink.CodeUnknown) {
			t.Errorf("%s: %q %v, want %v", c.name, why, code, c.want)
		}
	}
}
