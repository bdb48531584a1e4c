package recjson

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/weir-io/weir/sink"
)

// TestEscapingMatchesEncodingJSON checks the hand-written escaper against
// encoding/json on the decoded value.
func TestEscapingMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []rune{'a', '"', '\\', '/', '\n', 0, 0x1f, 0x7f, 'é', '\u2028', '\u2029', '😀', 0xfffd, '<'}
	for range 2000 {
		var sb strings.Builder
		for range r.IntN(20) {
			sb.WriteRune(alphabet[r.IntN(len(alphabet))])
		}
		s := sb.String()
		enc := append([]byte{'"'}, AppendString(nil, []byte(s))...)
		enc = append(enc, '"')
		var back string
		if err := json.Unmarshal(enc, &back); err != nil {
			t.Fatalf("%q -> %s: %v", s, enc, err)
		}
		if back != s {
			t.Fatalf("%q -> %s -> %q", s, enc, back)
		}
	}
	// Invalid UTF-8 in a string field becomes U+FFFD, like encoding/json.
	if got := string(AppendShort(nil, "a\xffb")); got != `a\ufffdb` {
		t.Errorf("invalid source: %s", got)
	}
}

// TestHeadersRoundTrip: any headers — names and values of any bytes, in
// any order, repeated — survive AppendHeaders and ParseHeaders, as valid
// JSON that never holds a NUL character (jsonb refuses one).
func TestHeadersRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var hs []sink.Header
		for i, n := 0, rapid.IntRange(0, 6).Draw(t, "n"); i < n; i++ {
			hs = append(hs, sink.Header{
				Key:   string(rapid.SliceOfN(rapid.Byte(), 0, 12).Draw(t, "k")),
				Value: rapid.SliceOfN(rapid.Byte(), 0, 12).Draw(t, "v"),
			})
		}
		b := AppendHeaders(nil, hs)
		if !json.Valid(b) {
			t.Fatalf("not JSON: %s", b)
		}
		if strings.Contains(string(b), `\u0000`) {
			t.Fatalf("NUL in %s", b)
		}
		got, err := ParseHeaders(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(hs) {
			t.Fatalf("%d headers back, want %d: %s", len(got), len(hs), b)
		}
		for i := range hs {
			if got[i].Key != hs[i].Key || !bytes.Equal(got[i].Value, hs[i].Value) {
				t.Fatalf("header %d: %q, want %q (%s)", i, got[i], hs[i], b)
			}
		}
	})
}
