package filesink

import (
	"encoding/base64"
	"encoding/hex"
	"time"
	"unicode/utf8"

	"github.com/weir-io/weir/sink"
)

// appendRecord appends r as one NDJSON line.
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
		buf = appendSource(buf, r.Durability.String())
	}
	buf = append(buf, `","received_at":"`...)
	buf = r.Received.UTC().AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","source":"`...)
	buf = appendSource(buf, r.Source)
	buf = append(buf, `","payload":"`...)
	if utf8.Valid(r.Payload) {
		buf = appendString(buf, r.Payload)
		buf = append(buf, `","payload_encoding":"utf8"}`...)
	} else {
		buf = base64.StdEncoding.AppendEncode(buf, r.Payload)
		buf = append(buf, `","payload_encoding":"base64"}`...)
	}
	return append(buf, '\n')
}

const hexDigits = "0123456789abcdef"

// safe[b] is true for ASCII bytes that appear unescaped inside a JSON
// string.
var safe = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// appendString appends s, escaped as the body of a JSON string (without the
// quotes). Quotes, backslashes and control characters are escaped, and so
// are U+2028 and U+2029, which JavaScript does not allow raw in a string.
// Invalid UTF-8 becomes U+FFFD, as encoding/json does; payloads never reach
// here unless they are valid.
func appendString(buf []byte, s []byte) []byte {
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if safe[b] {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch b {
			case '"', '\\':
				buf = append(buf, '\\', b)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRune(s[i:])
		if c == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
			i++
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\', 'u', '2', '0', '2', hexDigits[c&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(buf, s[start:]...)
}

// appendSource appends a short string field such as the source name,
// without converting it when it needs no escaping.
func appendSource(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf || !safe[s[i]] {
			return appendString(buf, []byte(s))
		}
	}
	return append(buf, s...)
}

// AppendNDJSON appends r as one line of the file sink's format (with its
// newline): the encoding other NDJSON writers (the quarantine lanes) embed.
func AppendNDJSON(buf []byte, r *sink.Record) []byte { return appendRecord(buf, r) }
