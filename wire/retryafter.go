package wire

import (
	"strconv"
	"strings"
	"time"
)

// A Nack's message may start with a machine-readable retry-after hint:
//
//	retry_after_ms=<decimal milliseconds>; <human-readable text>
//
// The daemon sends one with every Overloaded Nack. The hint lives in the
// message, not in a new field, so that the Nack body keeps its layout
// (request_id u64, code u16, msg_len u16, msg) and every producer can still
// read it: one that does not know the hint shows it as part of the text.
const retryAfterKey = "retry_after_ms="

// maxRetryAfterMillis caps a parsed hint (about 24 days), so that a hint
// always fits a time.Duration.
const maxRetryAfterMillis = 1<<31 - 1

// RetryAfterMessage is a Nack message carrying the retry-after hint d
// (rounded up to a whole millisecond, at least 1) followed by reason.
func RetryAfterMessage(d time.Duration, reason string) string {
	ms := max((d+time.Millisecond-1)/time.Millisecond, 1)
	ms = min(ms, maxRetryAfterMillis)
	b := make([]byte, 0, len(retryAfterKey)+12+len(reason))
	b = append(b, retryAfterKey...)
	b = strconv.AppendInt(b, int64(ms), 10)
	if reason != "" {
		b = append(b, "; "...)
		b = append(b, reason...)
	}
	return string(b)
}

// ParseRetryAfter reads the retry-after hint at the start of a Nack
// message: the hint and the rest of the message (its text after "; ").
// ok is false, and rest is msg, when msg does not start with a
// well-formed hint: a key, one to ten digits, then the end of the
// message or ';'.
func ParseRetryAfter(msg string) (d time.Duration, rest string, ok bool) {
	s, found := strings.CutPrefix(msg, retryAfterKey)
	if !found {
		return 0, msg, false
	}
	n := 0
	for n < len(s) && n < 11 && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	if n == 0 || n > 10 || (n < len(s) && s[n] != ';') {
		return 0, msg, false
	}
	ms, err := strconv.ParseInt(s[:n], 10, 64)
	if err != nil {
		return 0, msg, false
	}
	ms = min(ms, maxRetryAfterMillis)
	rest = strings.TrimPrefix(strings.TrimPrefix(s[n:], ";"), " ")
	return time.Duration(ms) * time.Millisecond, rest, true
}
