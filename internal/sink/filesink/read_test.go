package filesink

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/sink"
)

// TestParseLineDirect: every line the sink writes reads back as the record
// it was, by parseLine and by encoding/json alike, and the lines of records
// without a key or headers whose strings need no escape take the direct
// path.
func TestParseLineDirect(t *testing.T) {
	id := sink.RecordID{0xde, 0xad, 0xbe, 0xef, 15: 0x01}
	recv := time.Date(2026, 12, 3, 14, 5, 6, 123456789, time.UTC)
	ev := time.Date(2026, 12, 3, 14, 5, 6, 120000000, time.FixedZone("", 3600))
	base := sink.Record{ID: id, Payload: []byte("order-000001|abcdefghijklmnopqrstuvwxyz"), Received: recv, Source: "kafka:orders"}
	with := func(f func(r *sink.Record)) sink.Record {
		r := base
		f(&r)
		return r
	}
	for _, tc := range []struct {
		name   string
		rec    sink.Record
		direct bool
	}{
		{"plain", base, true},
		{"buffered", with(func(r *sink.Record) { r.Durability = sink.Buffered }), true},
		{"event time", with(func(r *sink.Record) { r.EventTime = ev }), true},
		{"received in a zone", with(func(r *sink.Record) { r.Received = ev }), true},
		{"utf-8 payload", with(func(r *sink.Record) { r.Payload = []byte("grüße, 世界") }), true},
		{"binary payload", with(func(r *sink.Record) { r.Payload = []byte{0xff, 0, 1, 2, 0x80} }), true},
		{"empty payload", with(func(r *sink.Record) { r.Payload = []byte{} }), true},
		{"payload with a quote", with(func(r *sink.Record) { r.Payload = []byte(`say "hi"`) }), false},
		{"payload with a newline", with(func(r *sink.Record) { r.Payload = []byte("a\nb") }), false},
		{"payload with U+2028", with(func(r *sink.Record) { r.Payload = []byte("a\u2028b") }), false},
		{"source with a backslash", with(func(r *sink.Record) { r.Source = `a\b` }), false},
		{"key", with(func(r *sink.Record) { r.Key = []byte("k1") }), false},
		{"empty key", with(func(r *sink.Record) { r.Key = []byte{} }), false},
		{"headers", with(func(r *sink.Record) {
			r.Headers = []sink.Header{{Key: "h", Value: []byte("v")}, {Key: "h", Value: []byte("w")}}
		}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := appendRecord(nil, &tc.rec)
			line = line[:len(line)-1] // the newline
			want, err := parseJSON(line)
			if err != nil {
				t.Fatalf("parseJSON(%s): %v", line, err)
			}
			got, err := parseLine(line)
			if err != nil {
				t.Fatalf("parseLine(%s): %v", line, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("parseLine(%s)\n got %+v\nwant %+v", line, got, want)
			}
			if r := got.Record(); !sameRecord(r, tc.rec) {
				t.Errorf("read back %+v, wrote %+v", r, tc.rec)
			}
			if _, ok := parseDirect(line); ok != tc.direct {
				t.Errorf("direct path taken: %v, want %v (%s)", ok, tc.direct, line)
			}
		})
	}
}

// sameRecord compares what a line keeps of a record: times by instant,
// an empty payload like a nil one.
func sameRecord(a, b sink.Record) bool {
	return a.ID == b.ID && string(a.Payload) == string(b.Payload) && a.Durability == b.Durability &&
		a.Received.Equal(b.Received) && a.Source == b.Source && string(a.Key) == string(b.Key) &&
		(a.Key == nil) == (b.Key == nil) && reflect.DeepEqual(a.Headers, b.Headers) && a.EventTime.Equal(b.EventTime)
}

// TestParseLineOddLines: lines the sink would not write — other field
// orders, spacing, missing or bad values — give parseLine exactly what
// encoding/json gives, a Line or an error.
func TestParseLineOddLines(t *testing.T) {
	const id = `"weir_record_id":"deadbeef000000000000000000000001"`
	const rest = `"received_at":"2026-12-03T14:05:06.123456789Z","source":"s","payload":"p","payload_encoding":"utf8"`
	for _, line := range []string{
		`{` + id + `,"durability":"durable",` + rest + `}`,
		`{` + id + `,"durability":"durable",` + rest + `} `,
		`{ ` + id + `,"durability":"durable",` + rest + `}`,
		`{"durability":"durable",` + id + `,` + rest + `}`,
		`{` + id + `,"durability":"durable",` + rest + `,"extra":1}`,
		`{` + id + `,"durability":"durable",` + rest + `,"event_time":"2026-12-03T14:05:06Z"}`,
		`{` + id + `,"durability":"durable",` + rest + `,"event_time":"yesterday"}`,
		`{` + id + `,"durability":"durable",` + rest + `,"event_time":null}`,
		`{` + id + `,"durability":"Durable",` + rest + `}`,
		`{` + id + `,"durability":"durable",` + strings.Replace(rest, "utf8", "base64", 1) + `}`,
		`{` + id + `,"durability":"durable",` + strings.Replace(rest, "utf8", "hex", 1) + `}`,
		`{` + id + `,"durability":"durable",` + strings.Replace(rest, ".123456789Z", "", 1) + `}`,
		`{` + id + `,"durability":"durable",` + strings.Replace(rest, "Z", "+24:00", 1) + `}`,
		`{` + id + `,"durability":"durable",` + strings.Replace(rest, `"p"`, `"\u0070"`, 1) + `}`,
		`{` + id + `,"durability":"durable",` + strings.Replace(rest, `"p"`, "\"\xff\"", 1) + `}`,
		`{` + id + `,"durability":"durable",` + strings.Replace(rest, `"p"`, "\"a\tb\"", 1) + `}`,
		`{` + strings.Replace(id, "01\"", "1\"", 1) + `,"durability":"durable",` + rest + `}`,
		`{` + strings.Replace(id, "de", "DE", 1) + `,"durability":"durable",` + rest + `}`,
		`{` + strings.Replace(id, "de", "zz", 1) + `,"durability":"durable",` + rest + `}`,
		`{` + id + `,"durability":"durable",` + rest,
		`{` + id + `,"durability":"durable",` + strings.Replace(rest, `"payload":"p",`, "", 1) + `}`,
	} {
		want, werr := parseJSON([]byte(line))
		got, gerr := parseLine([]byte(line))
		if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\nparseLine %+v, %v\nparseJSON %+v, %v", line, got, gerr, want, werr)
		}
	}
}

// BenchmarkParseLine reads a 256-byte Kafka record's line, as recovery
// from a file raw does, by parseLine and by encoding/json.
func BenchmarkParseLine(b *testing.B) {
	r := rec(1, strings.Repeat("abcdefghijklmnopqrstuvwxyz", 10)[:256])
	r.Source, r.EventTime = "kafka:orders", t0
	line := appendRecord(nil, &r)
	line = line[:len(line)-1]
	for _, bc := range []struct {
		name  string
		parse func([]byte) (Line, error)
	}{{"parseLine", parseLine}, {"json", parseJSON}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.parse(line); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
		})
	}
}
