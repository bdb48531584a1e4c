package mysqlsink

import (
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/sink"
)

// The pre-check's refusals carry the reason code the rejection lanes keep:
// too large is oversize, bytes the column cannot take are decode, the rest
// sink-refused.
func TestCheckCodes(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name    string
		r       sink.Record
		want    sink.Code
		maxStmt int
	}{
		{"ok", sink.Record{Payload: []byte(`{}`), Source: "socket", Received: now}, sink.CodeUnknown, 0},
		{"oversize", sink.Record{Payload: []byte(`"` + strings.Repeat("x", 100) + `"`), Received: now}, sink.CodeOversize, 0},
		{"too large for a statement", sink.Record{Payload: []byte(`"` + strings.Repeat("x", 90) + `"`), Received: now}, sink.CodeOversize, 200},
		{"not json", sink.Record{Payload: []byte(`nope`), Received: now}, sink.CodeDecode, 0},
		{"bad source", sink.Record{Payload: []byte(`1`), Source: "a\xffb", Received: now}, sink.CodeDecode, 0},
		{"long source", sink.Record{Payload: []byte(`1`), Source: strings.Repeat("s", maxSourceChars+1), Received: now}, sink.CodeSinkRefused, 0},
		{"old time", sink.Record{Payload: []byte(`1`), Received: time.Date(999, 1, 1, 0, 0, 0, 0, time.UTC)}, sink.CodeSinkRefused, 0},
	} {
		s := &Sink{opts: Options{MaxPayloadBytes: 100, PayloadType: PayloadJSON}, maxStmt: 1 << 20}
		if c.maxStmt > 0 {
			s.maxStmt = c.maxStmt
		}
		why, code := s.check(&c.r)
		if code != c.want || (why == "") != (c.want == sink.CodeUnknown) {
			t.Errorf("%s: %q %v, want %v", c.name, why, code, c.want)
		}
	}
}
