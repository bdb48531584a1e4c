package filesink

import (
	"encoding/base64"
	"encoding/hex"
	"unicode/utf8"

	"github.com/weir-io/weir/internal/sink/recjson"
	"github.com/weir-io/weir/sink"
)

// appendRecord appends r as one NDJSON line. A record's key, headers and
// event time follow the payload, each only when the record has one, so a
// record without them is written exactly as before they existed.
func appendRecord(buf []byte, r *sink.Record) []byte {
	buf = append(buf, `{"weir_record_id":"`...)
	buf = hex.AppendEncode(buf, r.ID[:])
	buf = append(buf, `","durability":"`...)
	switch r.Durability {
	case sink.Durable:
		buf = append(buf, "durable"...)
	case sink.Buffered:
		buf = append(buf, "buffered"...)
	default:
		buf = recjson.AppendShort(buf, r.Durability.String())
	}
	buf = append(buf, `","received_at":"`...)
	buf = recjson.AppendTime(buf, r.Received)
	buf = append(buf, `","source":"`...)
	buf = recjson.AppendShort(buf, r.Source)
	buf = append(buf, `","payload":"`...)
	if utf8.Valid(r.Payload) {
		buf = recjson.AppendString(buf, r.Payload)
		buf = append(buf, `","payload_encoding":"utf8"`...)
	} else {
		buf = base64.StdEncoding.AppendEncode(buf, r.Payload)
		buf = append(buf, `","payload_encoding":"base64"`...)
	}
	if r.Key != nil {
		buf = append(buf, `,"key":`...)
		var enc string
		buf, enc = recjson.AppendValue(buf, r.Key)
		buf = append(buf, `,"key_encoding":"`...)
		buf = append(buf, enc...)
		buf = append(buf, '"')
	}
	if len(r.Headers) > 0 {
		buf = append(buf, `,"headers":`...)
		buf = recjson.AppendHeaders(buf, r.Headers)
	}
	if !r.EventTime.IsZero() {
		buf = append(buf, `,"event_time":"`...)
		buf = recjson.AppendTime(buf, r.EventTime)
		buf = append(buf, '"')
	}
	return append(buf, '}', '\n')
}

// AppendNDJSON appends r as one line of the file sink's format (with its
// newline): the encoding other NDJSON writers (the quarantine lanes) embed.
func AppendNDJSON(buf []byte, r *sink.Record) []byte { return appendRecord(buf, r) }
