package contract

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"
)

// stdDecode is the reference: encoding/json with UseNumber, one value,
// nothing but white space after it.
func stdDecode(p []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(p))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, io.ErrUnexpectedEOF // anything after the value
	}
	return v, nil
}

var decodeSeeds = []string{
	``, ` `, `null`, `true`, `false`, `0`, `-0`, `-0.0e+1`, `1e400`, `12345678901234567890123`, `01`, `1.`, `.5`, `-`, `1e`, `+1`,
	`""`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\u20AC"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ud83dx"`, `"\ude00\ud83d"`, `"\ud83d\u0041"`,
	"\"\xff\xfe\"", "\"a\xc3\"", "\"\x01\"", `"\x"`, `"\u12"`, `"\u12G4"`, `"abc`, `"ab\`,
	`{}`, `[]`, `{"a":1,"a":2}`, `{"a":[1,{"b":null}],"c":{"d":[]}}`, `[1,2,]`, `{"a":1,}`, `{"a" 1}`, `{1:2}`, `[1 2]`,
	`{"a":1} {}`, " {\"a\":\t[ 1 , 2 ]\n} \r\n", `nul`, `truex`, `[true,false,null]`, `{"":""}`, `[[[[[]]]]]`,
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":[`, 5000) + strings.Repeat("]}", 5000), strings.Repeat(`[{"a":`, 5000) + "1" + strings.Repeat("}]", 5000), `{"k":"` + strings.Repeat("é", 50) + `\n"}`,
}

// TestDecodeMatchesStd checks decode against encoding/json on the seeds.
func TestDecodeMatchesStd(t *testing.T) {
	for _, s := range decodeSeeds {
		checkDecode(t, []byte(s))
	}
}

// FuzzDecode checks decode against encoding/json: both refuse, or both
// produce the same value.
//
//	go test -run '^$' -fuzz FuzzDecode -fuzztime 60s ./internal/contract
func FuzzDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		if len(s) < 1000 { // the deep ones only slow the fuzzer down
			f.Add([]byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, p []byte) { checkDecode(t, p) })
}

func checkDecode(t *testing.T, p []byte) {
	t.Helper()
	want, werr := stdDecode(p)
	got, err := decode(p)
	if (err != nil) != (werr != nil) {
		t.Fatalf("decode(%.200q): error %v, encoding/json: %v", p, err, werr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("decode(%.200q) = %.500v, encoding/json: %.500v", p, got, want)
	}
	if err != nil && !strings.HasPrefix(err.Error(), "not JSON: ") {
		t.Fatalf("decode(%.200q): error %q lacks the prefix", p, err)
	}
}
