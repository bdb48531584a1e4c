package httpin

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"strconv"
	"time"

	"github.com/weir-io/weir/sink"
)

// format is a body's format, from its Content-Type.
type format int

const (
	formatRaw    format = iota // the whole body is one record's payload
	formatNDJSON               // application/x-ndjson: one object a line
	formatJSON                 // application/json: an array of objects
)

// formatOf reads a Content-Type. Every type is accepted (the body is then
// one raw record) except a malformed one.
func formatOf(contentType string) (format, *Problem) {
	if contentType == "" {
		return formatRaw, nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return 0, problem(ReasonMediaType, "Content-Type %q: %v", contentType, err)
	}
	switch mt {
	case "application/x-ndjson", "application/jsonl", "application/jsonlines":
		return formatNDJSON, nil
	case "application/json":
		return formatJSON, nil
	}
	return formatRaw, nil
}

// rec is one decoded record.
type rec struct {
	payload   []byte
	key       []byte // nil: none
	headers   []sink.Header
	eventTime int64 // Unix ns; 0: none
}

// object is a record as NDJSON lines and JSON array elements write it.
// Exactly one of payload (any JSON value, stored as its JSON text) and
// payload_base64 (bytes, standard base64) is given.
type object struct {
	Payload       json.RawMessage `json:"payload"`
	PayloadBase64 *string         `json:"payload_base64"`
	Key           *string         `json:"key"`
	Headers       json.RawMessage `json:"headers"`
	EventTime     json.RawMessage `json:"event_time"`
}

// decodeLimits bound what a body may decode to.
type decodeLimits struct {
	maxRecords     int
	maxRecordBytes int
}

// decode splits a decompressed body into records; a Problem names the
// first bad record (its line or index).
func decode(f format, body []byte, lim decodeLimits) ([]rec, *Problem) {
	switch f {
	case formatNDJSON:
		return decodeNDJSON(body, lim)
	case formatJSON:
		return decodeArray(body, lim)
	}
	if len(body) == 0 {
		return nil, problem(ReasonDecode, "the body is empty: a raw body is one record's payload")
	}
	if p := lim.tooLarge(body); p != nil {
		return nil, p
	}
	return []rec{{payload: body}}, nil
}

func decodeNDJSON(body []byte, lim decodeLimits) ([]rec, *Problem) {
	var out []rec
	line := 0
	for len(body) > 0 {
		line++
		l := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			l, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if len(bytes.TrimSpace(l)) == 0 {
			continue // blank lines (a trailing newline) hold no record
		}
		if len(out) == lim.maxRecords {
			return nil, tooMany(lim)
		}
		r, err := decodeObject(l, lim)
		if err != nil {
			err.Line = line
			err.Detail = fmt.Sprintf("line %d: %s", line, err.Detail)
			return nil, err
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, problem(ReasonDecode, "the body holds no record")
	}
	return out, nil
}

func decodeArray(body []byte, lim decodeLimits) ([]rec, *Problem) {
	d := json.NewDecoder(bytes.NewReader(body))
	tok, err := d.Token()
	if err != nil || tok != json.Delim('[') {
		return nil, problem(ReasonDecode, "an application/json body must be an array of record objects")
	}
	var out []rec
	for i := 0; d.More(); i++ {
		if len(out) == lim.maxRecords {
			return nil, tooMany(lim)
		}
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			p := problem(ReasonDecode, "index %d: %v", i, err)
			p.Index = i
			return nil, p
		}
		r, perr := decodeObject(raw, lim)
		if perr != nil {
			perr.Index = i
			perr.Detail = fmt.Sprintf("index %d: %s", i, perr.Detail)
			return nil, perr
		}
		out = append(out, r)
	}
	if _, err := d.Token(); err != nil {
		return nil, problem(ReasonDecode, "the array does not close: %v", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, problem(ReasonDecode, "data after the array")
	}
	if len(out) == 0 {
		return nil, problem(ReasonDecode, "the body holds no record")
	}
	return out, nil
}

// tooLarge refuses a payload larger than a record may be.
func (lim decodeLimits) tooLarge(payload []byte) *Problem {
	if len(payload) <= lim.maxRecordBytes {
		return nil
	}
	p := problem(ReasonRecordTooLarge, "the payload is %d bytes, more than the %d a record may hold (max_frame_bytes)", len(payload), lim.maxRecordBytes)
	p.Limit = int64(lim.maxRecordBytes)
	return p
}

func tooMany(lim decodeLimits) *Problem {
	p := problem(ReasonTooManyRecords, "more than %d records in one request (http.max_records)", lim.maxRecords)
	p.Limit = int64(lim.maxRecords)
	return p
}

// decodeObject reads one record object.
func decodeObject(b []byte, lim decodeLimits) (rec, *Problem) {
	var o object
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&o); err != nil {
		return rec{}, problem(ReasonDecode, "not a record object: %v", err)
	}
	if d.More() {
		return rec{}, problem(ReasonDecode, "data after the record object")
	}
	var r rec
	hasPayload := len(o.Payload) > 0 && !bytes.Equal(o.Payload, []byte("null"))
	switch {
	case hasPayload && o.PayloadBase64 != nil:
		return rec{}, problem(ReasonDecode, "payload and payload_base64 are both set")
	case hasPayload:
		r.payload = o.Payload
	case o.PayloadBase64 != nil:
		p, err := base64.StdEncoding.DecodeString(*o.PayloadBase64)
		if err != nil {
			return rec{}, problem(ReasonDecode, "payload_base64: %v", err)
		}
		r.payload = p
	default:
		return rec{}, problem(ReasonDecode, "the record has no payload (payload or payload_base64)")
	}
	if p := lim.tooLarge(r.payload); p != nil {
		return rec{}, p
	}
	if o.Key != nil {
		r.key = []byte(*o.Key)
	}
	if len(o.Headers) > 0 {
		h, err := decodeHeaders(o.Headers)
		if err != nil {
			return rec{}, problem(ReasonDecode, "headers: %v", err)
		}
		r.headers = h
	}
	if len(o.EventTime) > 0 {
		t, err := parseEventTimeJSON(o.EventTime)
		if err != nil {
			return rec{}, problem(ReasonDecode, "event_time: %v", err)
		}
		r.eventTime = t
	}
	return r, nil
}

// decodeHeaders reads a JSON object of string values, keeping its order
// (names may repeat).
func decodeHeaders(b []byte) ([]sink.Header, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("must be an object of string values")
	}
	var hs []sink.Header
	for d.More() {
		k, err := d.Token()
		if err != nil {
			return nil, err
		}
		var v string
		if err := d.Decode(&v); err != nil {
			return nil, fmt.Errorf("%q: must be a string", k)
		}
		hs = append(hs, sink.Header{Key: k.(string), Value: []byte(v)})
	}
	if _, err := d.Token(); err != nil {
		return nil, err
	}
	return hs, nil
}

// parseEventTimeJSON reads an event time: an RFC 3339 string or a number
// of Unix milliseconds.
func parseEventTimeJSON(b []byte) (int64, error) {
	if bytes.Equal(b, []byte("null")) {
		return 0, nil
	}
	if b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return 0, err
		}
		return parseEventTime(s)
	}
	return parseEventTime(string(b))
}

// maxEventMillis is the first millisecond a Unix nanosecond int64 cannot
// hold (2262-04-11).
const maxEventMillis = (1<<63 - 1) / int64(time.Millisecond)

// parseEventTime reads an RFC 3339 time or integer Unix milliseconds
// (the Weir-Event-Time header, or event_time). A time before 1970 is
// refused: 0 means "none".
func parseEventTime(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms <= 0 || ms >= maxEventMillis {
			return 0, fmt.Errorf("%q: Unix milliseconds must be positive and before the year 2262", s)
		}
		return ms * int64(time.Millisecond), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%q: want RFC 3339 or Unix milliseconds", s)
	}
	if t.UnixNano() <= 0 || t.Year() >= 2262 {
		return 0, fmt.Errorf("%q: must be after 1970 and before 2262", s)
	}
	return t.UnixNano(), nil
}
