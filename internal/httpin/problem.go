package httpin

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/weir-io/weir/wab"
)

// Reason is the weir reason code of a refused request: the "reason" member
// of its problem+json body and the label of weir_http_refused_total.
type Reason string

const (
	ReasonDecode         Reason = "decode"           // 400: a record does not decode
	ReasonBadRequest     Reason = "bad_request"      // 400: a header is malformed
	ReasonTruncated      Reason = "truncated"        // 400: the body ended early
	ReasonUnauthorized   Reason = "unauthorized"     // 401
	ReasonForbidden      Reason = "forbidden"        // 403: a token without the scope
	ReasonNotFound       Reason = "not_found"        // 404
	ReasonMethod         Reason = "method"           // 405
	ReasonLengthRequired Reason = "length_required"  // 411
	ReasonBodyTooLarge   Reason = "body_too_large"   // 413
	ReasonTooManyRecords Reason = "too_many_records" // 413
	ReasonRecordTooLarge Reason = "record_too_large" // 413
	ReasonMediaType      Reason = "media_type"       // 415
	ReasonOverloaded     Reason = "overloaded"       // 429: flow control, budget, queue
	ReasonConcurrency    Reason = "concurrency"      // 429: max_concurrent
	ReasonDiskFull       Reason = "disk_full"        // 503
	ReasonShardFailed    Reason = "shard_failed"     // 503
	ReasonNotReady       Reason = "not_ready"        // 503: starting or shutting down
	ReasonTimeout        Reason = "timeout"          // 408: the body did not arrive in time
)

// Reasons lists every Reason, so that metrics can be made for each.
func Reasons() []Reason {
	return []Reason{ReasonDecode, ReasonBadRequest, ReasonTruncated, ReasonUnauthorized, ReasonForbidden,
		ReasonNotFound, ReasonMethod, ReasonLengthRequired, ReasonBodyTooLarge, ReasonTooManyRecords,
		ReasonRecordTooLarge, ReasonMediaType, ReasonOverloaded, ReasonConcurrency, ReasonDiskFull,
		ReasonShardFailed, ReasonNotReady, ReasonTimeout}
}

// Status is the HTTP status a reason is answered with.
func (r Reason) Status() int {
	switch r {
	case ReasonDecode, ReasonBadRequest, ReasonTruncated:
		return http.StatusBadRequest
	case ReasonUnauthorized:
		return http.StatusUnauthorized
	case ReasonForbidden:
		return http.StatusForbidden
	case ReasonNotFound:
		return http.StatusNotFound
	case ReasonMethod:
		return http.StatusMethodNotAllowed
	case ReasonLengthRequired:
		return http.StatusLengthRequired
	case ReasonBodyTooLarge, ReasonTooManyRecords, ReasonRecordTooLarge:
		return http.StatusRequestEntityTooLarge
	case ReasonMediaType:
		return http.StatusUnsupportedMediaType
	case ReasonOverloaded, ReasonConcurrency:
		return http.StatusTooManyRequests
	case ReasonTimeout:
		return http.StatusRequestTimeout
	default:
		return http.StatusServiceUnavailable
	}
}

// retryable reports whether the answer carries Retry-After.
func (r Reason) retryable() bool {
	s := r.Status()
	return s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable
}

// Problem is a refusal (RFC 9457): Reason, a human Detail, and where the
// first bad record is (Line in NDJSON, counted from 1; Index in a JSON
// array, counted from 0) or the limit that was passed.
type Problem struct {
	Reason Reason
	Detail string
	Line   int // 0: none
	Index  int // -1: none
	Limit  int64
}

func (p *Problem) Error() string { return string(p.Reason) + ": " + p.Detail }

func problem(r Reason, format string, args ...any) *Problem {
	return &Problem{Reason: r, Detail: fmt.Sprintf(format, args...), Index: -1}
}

// problemBody is the JSON body; type is a stable URI per reason.
type problemBody struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail,omitempty"`
	Reason     Reason `json:"reason"`
	Line       int    `json:"line,omitempty"`
	Index      *int   `json:"index,omitempty"`
	Limit      int64  `json:"limit,omitempty"`
	RetryAfter int64  `json:"retry_after_ms,omitempty"`
}

// writeProblem answers p; retryAfter is sent (in whole seconds, at least
// 1, in the header; in ms in the body) when the reason is retryable.
func writeProblem(w http.ResponseWriter, p *Problem, retryAfter time.Duration) {
	st := p.Reason.Status()
	b := p.body()
	h := w.Header()
	if p.Reason.retryable() {
		secs := int64(math.Ceil(retryAfter.Seconds()))
		h.Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
		b.RetryAfter = retryAfter.Milliseconds()
	}
	if st == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="weir"`)
	}
	if st == http.StatusMethodNotAllowed && h.Get("Allow") == "" {
		h.Set("Allow", http.MethodPost)
	}
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(st)
	_ = json.NewEncoder(w).Encode(b)
}

// body is p's problem+json body (without its retry hint).
func (p *Problem) body() problemBody {
	st := p.Reason.Status()
	b := problemBody{
		Type:   "https://weir.dev/problems/" + string(p.Reason),
		Title:  http.StatusText(st),
		Status: st,
		Detail: p.Detail,
		Reason: p.Reason,
		Line:   p.Line,
		Limit:  p.Limit,
	}
	if p.Index >= 0 {
		b.Index = &p.Index
	}
	return b
}

// submitProblem maps a write-ahead buffer error to its answer.
func submitProblem(err error) *Problem {
	switch {
	case errors.Is(err, wab.ErrDiskFull):
		return problem(ReasonDiskFull, "the write-ahead buffer's disk is full: %v", err)
	case errors.Is(err, wab.ErrShardFailed):
		return problem(ReasonShardFailed, "a write-ahead buffer shard has failed: %v", err)
	case errors.Is(err, wab.ErrQueueTimeout):
		return problem(ReasonOverloaded, "the write-ahead buffer's queue stayed full: %v", err)
	case errors.Is(err, wab.ErrRecordTooLarge):
		return problem(ReasonRecordTooLarge, "%v", err)
	default:
		return problem(ReasonNotReady, "the write-ahead buffer refused the request: %v", err)
	}
}
