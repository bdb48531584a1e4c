package httpin

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
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
	out := make([]rec, 0, min(bytes.Count(body, []byte{'\n'})+1, lim.maxRecords))
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
	notArray := problem(ReasonDecode, "an application/json body must be an array of record objects")
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '[' {
		return nil, notArray
	}
	i = skipSpace(body, i+1)
	var out []rec
	if i < len(body) && body[i] == ']' {
		i++
	} else {
		for idx := 0; ; idx++ {
			if len(out) == lim.maxRecords {
				return nil, tooMany(lim)
			}
			end, err := skipValue(body, i, 0)
			if err != nil {
				p := problem(ReasonDecode, "index %d: %v", idx, err)
				p.Index = idx
				return nil, p
			}
			r, perr := decodeObject(body[i:end], lim)
			if perr != nil {
				perr.Index = idx
				perr.Detail = fmt.Sprintf("index %d: %s", idx, perr.Detail)
				return nil, perr
			}
			out = append(out, r)
			i = skipSpace(body, end)
			if i < len(body) && body[i] == ',' {
				i = skipSpace(body, i+1)
				continue
			}
			if i < len(body) && body[i] == ']' {
				i++
				break
			}
			return nil, problem(ReasonDecode, "the array does not close after index %d", idx)
		}
	}
	if skipSpace(body, i) < len(body) {
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

// decodeObject reads one record object (scan.go): the payload given as a
// JSON value is a slice of b, which must outlive the record.
func decodeObject(b []byte, lim decodeLimits) (rec, *Problem) {
	ms, err := scanObject(b)
	if err != nil {
		if errors.Is(err, errAfterObject) {
			return rec{}, problem(ReasonDecode, "data after the record object")
		}
		return rec{}, problem(ReasonDecode, "not a record object: %v", err)
	}
	var r rec
	payload, b64 := ms[fieldPayload], ms[fieldPayloadBase64]
	s64, hasB64, err := b64.str()
	if err != nil {
		return rec{}, problem(ReasonDecode, "payload_base64: %v", err)
	}
	switch {
	case !payload.isNull() && hasB64:
		return rec{}, problem(ReasonDecode, "payload and payload_base64 are both set")
	case !payload.isNull():
		r.payload = payload.raw
	case hasB64:
		p := make([]byte, base64.StdEncoding.DecodedLen(len(s64)))
		n, err := base64.StdEncoding.Decode(p, s64)
		if err != nil {
			return rec{}, problem(ReasonDecode, "payload_base64: %v", err)
		}
		r.payload = p[:n]
	default:
		return rec{}, problem(ReasonDecode, "the record has no payload (payload or payload_base64)")
	}
	if p := lim.tooLarge(r.payload); p != nil {
		return rec{}, p
	}
	key, hasKey, err := ms[fieldKey].str()
	if err != nil {
		return rec{}, problem(ReasonDecode, "key: %v", err)
	}
	if hasKey {
		r.key = key
		if r.key == nil {
			r.key = []byte{} // an empty key is a key
		}
	}
	if h := ms[fieldHeaders]; h.raw != nil {
		err := scanHeaders(h.raw, func(name, value []byte) {
			r.headers = append(r.headers, sink.Header{Key: string(name), Value: value})
		})
		if err != nil {
			return rec{}, problem(ReasonDecode, "headers: %v", err)
		}
	}
	if t := ms[fieldEventTime]; t.raw != nil {
		t, err := parseEventTimeJSON(t.raw)
		if err != nil {
			return rec{}, problem(ReasonDecode, "event_time: %v", err)
		}
		r.eventTime = t
	}
	return r, nil
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
