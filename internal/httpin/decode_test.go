package httpin

import (
	"strings"
	"testing"
	"time"
)

func TestDecode(t *testing.T) {
	lim := decodeLimits{maxRecords: 3, maxRecordBytes: 16}
	tests := []struct {
		name    string
		f       format
		body    string
		records int
		reason  Reason
		line    int
		index   int
	}{
		{"ndjson", formatNDJSON, `{"payload":{"a":1}}` + "\n" + `{"payload":"x","key":"k"}` + "\n", 2, "", 0, -1},
		{"ndjson blank lines", formatNDJSON, "\n" + `{"payload":1}` + "\n\n  \n", 1, "", 0, -1},
		{"ndjson bad line 3", formatNDJSON, `{"payload":1}` + "\n\n" + `{"payload":` + "\n", 0, ReasonDecode, 3, -1},
		{"ndjson unknown field", formatNDJSON, `{"payload":1,"paylaod":2}`, 0, ReasonDecode, 1, -1},
		{"ndjson not an object", formatNDJSON, `[1]`, 0, ReasonDecode, 1, -1},
		{"ndjson two objects a line", formatNDJSON, `{"payload":1}{"payload":2}`, 0, ReasonDecode, 1, -1},
		{"ndjson no payload", formatNDJSON, `{"key":"k"}`, 0, ReasonDecode, 1, -1},
		{"ndjson both payloads", formatNDJSON, `{"payload":1,"payload_base64":"AA=="}`, 0, ReasonDecode, 1, -1},
		{"ndjson bad base64", formatNDJSON, `{"payload_base64":"!"}`, 0, ReasonDecode, 1, -1},
		{"ndjson too many", formatNDJSON, strings.Repeat(`{"payload":1}`+"\n", 4), 0, ReasonTooManyRecords, 0, -1},
		{"ndjson record too large", formatNDJSON, `{"payload":"0123456789abcdefgh"}`, 0, ReasonRecordTooLarge, 1, -1},
		{"ndjson empty", formatNDJSON, "\n\n", 0, ReasonDecode, 0, -1},
		{"array", formatJSON, `[{"payload":1},{"payload_base64":"aGk="}]`, 2, "", 0, -1},
		{"array bad index 1", formatJSON, `[{"payload":1},{"payload":1,"x":2}]`, 0, ReasonDecode, 0, 1},
		{"array bad event_time index 0", formatJSON, `[{"payload":1,"event_time":"yesterday"}]`, 0, ReasonDecode, 0, 0},
		{"array not an array", formatJSON, `{"payload":1}`, 0, ReasonDecode, 0, -1},
		{"array truncated", formatJSON, `[{"payload":1}`, 0, ReasonDecode, 0, -1},
		{"array trailing data", formatJSON, `[{"payload":1}] x`, 0, ReasonDecode, 0, -1},
		{"array empty", formatJSON, `[]`, 0, ReasonDecode, 0, -1},
		{"array too many", formatJSON, `[{"payload":1},{"payload":1},{"payload":1},{"payload":1}]`, 0, ReasonTooManyRecords, 0, -1},
		{"raw", formatRaw, "any bytes at all", 1, "", 0, -1},
		{"raw empty", formatRaw, "", 0, ReasonDecode, 0, -1},
		{"raw too large", formatRaw, "0123456789abcdefgh", 0, ReasonRecordTooLarge, 0, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, p := decode(tt.f, []byte(tt.body), lim)
			if tt.reason == "" {
				if p != nil {
					t.Fatalf("refused: %v", p)
				}
				if len(recs) != tt.records {
					t.Fatalf("%d records, want %d", len(recs), tt.records)
				}
				return
			}
			if p == nil {
				t.Fatalf("accepted %d records, want %s", len(recs), tt.reason)
			}
			if p.Reason != tt.reason || p.Line != tt.line || p.Index != tt.index {
				t.Fatalf("got %s line %d index %d (%s), want %s line %d index %d", p.Reason, p.Line, p.Index, p.Detail, tt.reason, tt.line, tt.index)
			}
		})
	}
}

func TestDecodeFields(t *testing.T) {
	recs, p := decode(formatJSON, []byte(`[{"payload":{"b": [1, 2]},"key":"k1","headers":{"z":"1","a":"2","z":"3"},"event_time":"2026-01-02T03:04:05.5Z"},
		{"payload_base64":"AP8=","event_time":1700000000123}]`), decodeLimits{maxRecords: 10, maxRecordBytes: 1 << 10})
	if p != nil {
		t.Fatal(p)
	}
	r := recs[0]
	if string(r.payload) != `{"b": [1, 2]}` {
		t.Errorf("payload %q: a JSON payload is stored as its text, as sent", r.payload)
	}
	if string(r.key) != "k1" {
		t.Errorf("key %q", r.key)
	}
	var hs []string
	for _, h := range r.headers {
		hs = append(hs, h.Key+"="+string(h.Value))
	}
	if strings.Join(hs, ",") != "z=1,a=2,z=3" {
		t.Errorf("headers %v: order and repeats are kept", hs)
	}
	if want := time.Date(2026, 1, 2, 3, 4, 5, 5e8, time.UTC).UnixNano(); r.eventTime != want {
		t.Errorf("event time %d, want %d", r.eventTime, want)
	}
	if string(recs[1].payload) != "\x00\xff" || recs[1].eventTime != 1700000000123*int64(time.Millisecond) {
		t.Errorf("record 1: payload %q event time %d", recs[1].payload, recs[1].eventTime)
	}
	if recs[1].key != nil {
		t.Error("a record without a key has none (nil)")
	}
}

func TestParseEventTime(t *testing.T) {
	for _, bad := range []string{"0", "-5", "9300000000000", "1969-12-31T23:59:59Z", "2300-01-01T00:00:00Z", "soon"} {
		if _, err := parseEventTime(bad); err == nil {
			t.Errorf("parseEventTime(%q) accepted", bad)
		}
	}
}
