package httpin

import (
	"bytes"
	"compress/gzip"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/flow"
)

// FuzzBody feeds the body decoders (NDJSON, JSON array, raw) through
// every content encoding: no input panics, none is read past its limits,
// and an accepted body's records respect them.
func FuzzBody(f *testing.F) {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write([]byte(`{"payload":1}` + "\n"))
	w.Close()
	f.Add([]byte(`{"payload":{"a":1},"key":"k","headers":{"h":"v"},"event_time":"2026-01-01T00:00:00Z"}`+"\n"), uint8(formatNDJSON), uint8(0))
	f.Add([]byte(`[{"payload_base64":"aGk="},{"payload":"s","event_time":1700000000000}]`), uint8(formatJSON), uint8(0))
	f.Add(gz.Bytes(), uint8(formatNDJSON), uint8(1))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0, 0x58, 0, 0}, uint8(formatRaw), uint8(2))
	encodings := []string{"", "gzip", "zstd"}
	f.Fuzz(func(t *testing.T, body []byte, fm, enc uint8) {
		lim := bodyLimits{maxDecoded: 1 << 16, wait: time.Millisecond}
		h := flow.NewHold(nil)
		defer h.Release()
		b, _, p := readBody(bytes.NewReader(body), encodings[int(enc)%len(encodings)], int64(len(body)), lim, h)
		if p != nil {
			return
		}
		if int64(len(b)) > lim.maxDecoded {
			t.Fatalf("read %d decoded bytes past the limit %d", len(b), lim.maxDecoded)
		}
		dl := decodeLimits{maxRecords: 64, maxRecordBytes: 1 << 12}
		recs, p := decode(format(int(fm)%3), b, dl)
		if p != nil {
			if p.Reason.Status() < 400 {
				t.Fatalf("refusal %v with status %d", p, p.Reason.Status())
			}
			return
		}
		if len(recs) == 0 || len(recs) > dl.maxRecords {
			t.Fatalf("%d records accepted", len(recs))
		}
		for _, r := range recs {
			if len(r.payload) > dl.maxRecordBytes {
				t.Fatalf("a %d-byte payload accepted", len(r.payload))
			}
		}
	})
}
