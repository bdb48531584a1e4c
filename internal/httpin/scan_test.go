package httpin

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

// refObject and refDecodeObject are the record reader as encoding/json's
// struct decoding gives it: the reference the hand-written scanner is
// checked against (FuzzScanMatchesEncodingJSON).
type refObject struct {
	Payload       json.RawMessage `json:"payload"`
	PayloadBase64 *string         `json:"payload_base64"`
	Key           *string         `json:"key"`
	Headers       json.RawMessage `json:"headers"`
	EventTime     json.RawMessage `json:"event_time"`
}

func refDecodeObject(b []byte, lim decodeLimits) (rec, error) {
	var o refObject
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&o); err != nil {
		return rec{}, err
	}
	// (d.More() would take a stray '}' or ']' after the object.)
	if len(bytes.TrimLeft(b[d.InputOffset():], " \t\r\n")) > 0 {
		return rec{}, errors.New("data after the record object")
	}
	var r rec
	hasPayload := len(o.Payload) > 0 && !bytes.Equal(o.Payload, []byte("null"))
	switch {
	case hasPayload && o.PayloadBase64 != nil:
		return rec{}, errors.New("both")
	case hasPayload:
		r.payload = o.Payload
	case o.PayloadBase64 != nil:
		p, err := base64.StdEncoding.DecodeString(*o.PayloadBase64)
		if err != nil {
			return rec{}, err
		}
		r.payload = p
	default:
		return rec{}, errors.New("no payload")
	}
	if len(r.payload) > lim.maxRecordBytes {
		return rec{}, errors.New("too large")
	}
	if o.Key != nil {
		r.key = []byte(*o.Key)
	}
	if len(o.Headers) > 0 {
		d := json.NewDecoder(bytes.NewReader(o.Headers))
		if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
			return rec{}, errors.New("headers")
		}
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return rec{}, err
			}
			var v string
			if err := d.Decode(&v); err != nil {
				return rec{}, err
			}
			r.headers = append(r.headers, sink.Header{Key: k.(string), Value: []byte(v)})
		}
		if _, err := d.Token(); err != nil {
			return rec{}, err
		}
	}
	if len(o.EventTime) > 0 {
		t, err := parseEventTimeJSON(o.EventTime)
		if err != nil {
			return rec{}, err
		}
		r.eventTime = t
	}
	return r, nil
}

func sameRec(a, b rec) error {
	switch {
	case !bytes.Equal(a.payload, b.payload):
		return fmt.Errorf("payload %q, encoding/json %q", a.payload, b.payload)
	case (a.key == nil) != (b.key == nil) || !bytes.Equal(a.key, b.key):
		return fmt.Errorf("key %q (nil %v), encoding/json %q (nil %v)", a.key, a.key == nil, b.key, b.key == nil)
	case a.eventTime != b.eventTime:
		return fmt.Errorf("event time %d, encoding/json %d", a.eventTime, b.eventTime)
	case len(a.headers) != len(b.headers):
		return fmt.Errorf("%d headers, encoding/json %d", len(a.headers), len(b.headers))
	}
	for i := range a.headers {
		if a.headers[i].Key != b.headers[i].Key || !bytes.Equal(a.headers[i].Value, b.headers[i].Value) {
			return fmt.Errorf("header %d %q=%q, encoding/json %q=%q", i, a.headers[i].Key, a.headers[i].Value, b.headers[i].Key, b.headers[i].Value)
		}
	}
	return nil
}

// scanSeeds are lines the scanner and encoding/json must read alike.
var scanSeeds = []string{
	`{"payload":{"a":[1,2.5e-3,true,false,null,"x\u00e9\n"]}}`,
	`{"payload":"plain","key":"k","headers":{"a":"1","a":"2","b":""},"event_time":"2026-01-01T00:00:00.5Z"}`,
	`  {"payload_base64":"aGVsbG8=","key":"","event_time":1700000000000}  `,
	`{"payload":-0.0,"key":"caf\u00e9\t","headers":{"\u0041":"v\"q"}}`,
	"{\"payload\":\"\xff\xfe invalid utf8\",\"key\":\"\xc3\x28\",\"headers\":{\"\xe2\x82\":\"\xff\"}}",
	`{"payload":null,"payload_base64":"YQ=="}`,
	`{"payload":1,"event_time":null,"key":null}`,
	`{"payload":[[[[]]]],"headers":{}}`,
	"{\"payload\":\"a\"}\r",
	`{"payload":01}`,
	`{"payload":1.}`,
	`{"payload":"\x01"}`,
	`{"payload":tru}`,
	`{"payload":1}{"payload":2}`,
	`{"payload":1,}`,
	`{"payload":"a","key":1}`,
	`{"payload":"a","headers":{"h":1}}`,
	`{"payload":"a","headers":null}`,
	`{"payload":"a","extra":1}`,
	`{"payload":"\ud800"}`,
	`{"payload":"a","key":"\ud800x"}`,
	`[1]`,
	`null`,
	`"s"`,
	``,
}

// TestScanMatchesEncodingJSON: on every seed the scanner accepts exactly
// what encoding/json accepts and reads the same record (FuzzScan... goes
// further).
func TestScanMatchesEncodingJSON(t *testing.T) {
	for _, s := range scanSeeds {
		t.Run(s, func(t *testing.T) { checkScanAgainstRef(t, []byte(s), true) })
	}
}

// TestScanStricter: what the scanner refuses and encoding/json's struct
// decoding takes (documented in docs/http.md).
func TestScanStricter(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{`{"Payload":"a"}`, `unknown field "Payload"`},
		{`{"payload":"a","payload":"b"}`, `field "payload" given twice`},
	} {
		_, p := decodeObject([]byte(tc.line), decodeLimits{maxRecords: 1, maxRecordBytes: 1 << 10})
		if p == nil || !strings.Contains(p.Detail, tc.want) {
			t.Errorf("%s: got %v, want a refusal naming %s", tc.line, p, tc.want)
		}
	}
}

// checkScanAgainstRef: when the scanner accepts a line encoding/json must
// too, with the same record; when encoding/json refuses it the scanner
// must too; with exact, both must agree either way.
func checkScanAgainstRef(t *testing.T, b []byte, exact bool) {
	t.Helper()
	lim := decodeLimits{maxRecords: 1, maxRecordBytes: 1 << 12}
	got, p := decodeObject(b, lim)
	want, err := refDecodeObject(b, lim)
	switch {
	case p == nil && err != nil:
		t.Fatalf("%q: the scanner accepts it, encoding/json refuses: %v", b, err)
	case p != nil && err == nil && exact:
		t.Fatalf("%q: the scanner refuses it (%s), encoding/json accepts", b, p.Detail)
	case p == nil:
		if e := sameRec(got, want); e != nil {
			t.Fatalf("%q: %v", b, e)
		}
	}
}

// FuzzScanMatchesEncodingJSON checks the record scanner against
// encoding/json on any line: never more lenient, the same record when
// both accept, and refusing what encoding/json takes only for an inexact
// field name or a field given twice.
func FuzzScanMatchesEncodingJSON(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkScanAgainstRef(t, b, false)
		lim := decodeLimits{maxRecords: 1, maxRecordBytes: 1 << 12}
		if _, p := decodeObject(b, lim); p != nil {
			if _, err := refDecodeObject(b, lim); err == nil &&
				!strings.Contains(p.Detail, "unknown field") && !strings.Contains(p.Detail, "given twice") {
				t.Fatalf("%q: the scanner refuses it (%s), encoding/json accepts", b, p.Detail)
			}
		}
	})
}

// TestAppendAnswerIsEncodingJSONs: the hand-written 200 body is the one
// encoding/json writes for Answer.
func TestAppendAnswerIsEncodingJSONs(t *testing.T) {
	ids := []sink.RecordID{{1, 2, 3}, {0xff, 0xee}}
	for _, tc := range []struct {
		records int
		d       wab.Durability
		ids     []sink.RecordID
	}{
		{2, wab.Durable, ids},
		{2, wab.Buffered, nil},
		{1, wab.Durable, ids[:1]},
	} {
		a := Answer{Records: tc.records, Durability: durabilityName(tc.d)}
		for _, id := range tc.ids {
			a.IDs = append(a.IDs, id.String())
		}
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(a); err != nil {
			t.Fatal(err)
		}
		if got := appendAnswer(nil, tc.records, tc.d, tc.ids); string(got) != want.String() {
			t.Errorf("got %s, want %s", got, want.String())
		}
	}
}

// TestSpecial8 checks the eight-byte test against the byte-wise one: every
// byte value at every position, among plain bytes and among others.
func TestSpecial8(t *testing.T) {
	special := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 || c >= 0x80 }
	for _, fill := range []byte{'a', ' ', '~', 0x21} {
		for pos := range 8 {
			for c := range 256 {
				var w [8]byte
				for i := range w {
					w[i] = fill
				}
				w[pos] = byte(c)
				if got, want := special8(binary.LittleEndian.Uint64(w[:])), special(byte(c)); got != want {
					t.Fatalf("%q: special8 %v, want %v", w, got, want)
				}
			}
		}
	}
}

// BenchmarkDecodeStore64 is the HTTP door's own work on a 64-line NDJSON
// body of 256-byte records: decode, the stored metas and ids, the answer.
func BenchmarkDecodeStore64(b *testing.B) {
	line := append(append([]byte(`{"payload":"`), bytes.Repeat([]byte("a"), 236)...), []byte("\"}\n")...)
	body := bytes.Repeat(line, 64)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		recs, p := decode(formatNDJSON, body, decodeLimits{maxRecords: 1000, maxRecordBytes: 1 << 20})
		if p != nil {
			b.Fatal(p)
		}
		st := storeRecords("http", freshProducer(), false, 0, recs, 1)
		_ = appendAnswer(nil, len(recs), wab.Durable, st.ids)
	}
}
