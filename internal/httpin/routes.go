package httpin

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

// Route is one route the listener serves.
type Route struct {
	Method, Path string
}

// RouteRecords is the records route's metric label and path.
const RouteRecords = "/v1/records"

// Routes lists what the listener registers (docs/openapi.yaml describes
// exactly these).
func Routes() []Route {
	return []Route{{http.MethodPost, RouteRecords}, {http.MethodGet, RouteStream}}
}

// Headers the records route reads.
const (
	HeaderDurability  = "Weir-Durability"
	HeaderEventTime   = "Weir-Event-Time"
	HeaderKey         = "Weir-Key"
	HeaderIdempotency = "Idempotency-Key"
)

// Handler is the listener's handler: the routes, behind authentication.
func (in *Ingress) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+RouteRecords, in.records)
	mux.HandleFunc(RouteRecords, func(w http.ResponseWriter, r *http.Request) {
		in.refuse(w, RouteRecords, time.Now(), problem(ReasonMethod, "%s: only POST", RouteRecords))
	})
	mux.HandleFunc("GET "+RouteStream, in.stream)
	mux.HandleFunc(RouteStream, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", http.MethodGet)
		in.refuse(w, RouteStream, time.Now(), problem(ReasonMethod, "%s: only GET (a WebSocket)", RouteStream))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		in.refuse(w, "other", time.Now(), problem(ReasonNotFound, "no route %s (see docs/http.md)", r.URL.Path))
	})
	return mux
}

// refuse answers p and counts it.
func (in *Ingress) refuse(w http.ResponseWriter, route string, start time.Time, p *Problem) {
	writeProblem(w, p, in.opts.RetryAfter)
	in.opts.Observer.Refused(string(p.Reason))
	in.opts.Observer.Request(route, p.Reason.Status(), time.Since(start).Seconds())
}

// authorize checks the bearer token when tokens are configured: 401
// without a valid one, 403 for a token without the push scope. A TLS
// client certificate was verified (and its identity authorised) by the
// handshake.
func (in *Ingress) authorize(r *http.Request) *Problem {
	t := in.opts.Tokens
	if t == nil {
		return nil
	}
	switch err := t.AuthorizeRequest(r, ScopePush); {
	case errors.Is(err, ErrScope):
		return problem(ReasonForbidden, "the bearer token has no push scope (scopes= in http.token_file)")
	case err != nil:
		return problem(ReasonUnauthorized, "%v", err)
	}
	return nil
}

// Answer is a 200's body.
type Answer struct {
	Records    int      `json:"records"`
	Durability string   `json:"durability"`
	IDs        []string `json:"ids,omitempty"`
}

// records serves POST /v1/records: every step refuses the whole request
// or lets it on; the answer is written once the buffer has called the
// request's Done.
func (in *Ingress) records(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	o := &in.opts
	if p := in.authorize(r); p != nil {
		in.refuse(w, RouteRecords, start, p)
		return
	}
	if !in.ready.Load() {
		in.refuse(w, RouteRecords, start, problem(ReasonNotReady, "the daemon is not serving (starting or shutting down)"))
		return
	}
	select {
	case in.slots <- struct{}{}:
		defer func() { <-in.slots }()
	default:
		p := problem(ReasonConcurrency, "%d requests are being served (http.max_concurrent)", o.MaxConcurrent)
		p.Limit = int64(o.MaxConcurrent)
		in.refuse(w, RouteRecords, start, p)
		return
	}
	o.Observer.InFlight(1)
	defer o.Observer.InFlight(-1)
	if o.Throttle != nil && o.Throttle.Throttled() {
		in.refuse(w, RouteRecords, start, problem(ReasonOverloaded, "flow control is shedding load (Critical)"))
		return
	}
	q, p := readRequest(r, o)
	if p != nil {
		in.refuse(w, RouteRecords, start, p)
		return
	}
	h := flow.NewHold(o.Budget)
	defer h.Release()
	r.Body = http.MaxBytesReader(w, r.Body, o.MaxBodyBytes)
	body, raw, p := readBody(r.Body, q.encoding, r.ContentLength, bodyLimits{maxDecoded: o.MaxDecodedBytes, wait: o.AdmissionWait}, h)
	if p != nil {
		in.refuse(w, RouteRecords, start, p)
		return
	}
	if q.format != formatRaw {
		// Decoding copies the payloads out of the body: at most its size.
		if p := hold(h, int64(len(body)), o.AdmissionWait); p != nil {
			in.refuse(w, RouteRecords, start, p)
			return
		}
	}
	recs, p := decode(q.format, body, decodeLimits{maxRecords: o.MaxRecords, maxRecordBytes: o.MaxRecordBytes})
	if p != nil {
		in.refuse(w, RouteRecords, start, p)
		return
	}
	q.apply(recs)
	received := start.UnixNano()
	producer := freshProducer()
	if q.idemKey != "" {
		producer = IdempotentProducer(o.Stream, q.idemKey)
	}
	st, p := in.store(h, producer, q.idemKey != "", 0, recs, received)
	if p != nil {
		in.refuse(w, RouteRecords, start, p)
		return
	}
	if err := in.submit(r.Context(), producer, q.idemKey != "", q.durability, st, received); err != nil {
		in.refuse(w, RouteRecords, start, err)
		return
	}
	o.Observer.Received(int(raw), len(recs))
	var ids []sink.RecordID
	if q.ids {
		ids = st.ids
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(appendAnswer(nil, len(recs), q.durability, ids))
	o.Observer.Request(RouteRecords, http.StatusOK, time.Since(start).Seconds())
}

// store builds the stored form of recs (storeRecords), refuses a record
// whose metadata the buffer cannot hold, and holds the metadata and the
// records' bookkeeping in h.
func (in *Ingress) store(h *flow.Hold, producer record.ProducerID, idempotent bool, firstSeq uint64, recs []rec, received int64) (stored, *Problem) {
	st := storeRecords(in.opts.Stream, producer, idempotent, firstSeq, recs, received)
	const room = wab.MaxMetaBytes - record.RejectionRoom
	for i, m := range st.metas {
		if len(m) > room {
			p := problem(ReasonRecordTooLarge, "record %d: its key and headers take %d bytes, more than %d", i, len(m), room)
			p.Index, p.Limit = i, room
			return st, p
		}
	}
	// The records as decoded, their metadata and ids besides the body.
	return st, hold(h, int64(len(recs))*recordOverhead+int64(st.bytes), in.opts.AdmissionWait)
}

// recordOverhead is what a decoded record costs besides its bytes: its rec,
// its payload's and meta's slice headers, its id.
const recordOverhead = int64(unsafe.Sizeof(rec{})) + 2*int64(unsafe.Sizeof([]byte(nil))) + int64(unsafe.Sizeof(sink.RecordID{}))

// submit hands the request's records to the buffer as one request and
// waits for its Done: nil once the tier's promise holds for all of them.
// A shard that has failed is passed over for the next.
func (in *Ingress) submit(ctx context.Context, producer record.ProducerID, idempotent bool, d wab.Durability, st stored, received int64) *Problem {
	b := in.backend
	n := b.Shards()
	first := int(in.turn.Add(1)) % n
	if idempotent {
		first = shardOf(producer, n)
	}
	shard, lastErr := -1, error(nil)
	for i := range n {
		s := (first + i) % n
		if err := b.ShardErr(s); err != nil {
			lastErr = err
			continue
		}
		shard = s
		break
	}
	if shard < 0 {
		return submitProblem(lastErr)
	}
	done := make(chan error, 1)
	req := &wab.Request{
		Durability: d,
		Payloads:   st.payloads,
		Metas:      st.metas,
		Received:   received,
		Done:       func(err error) { done <- err },
	}
	// The handler waits for Done anyway: a request alone in the door, on
	// an idle shard, is written on this goroutine, as the socket writes a
	// lone frame. With others in flight it goes to the flusher, whose
	// group commit covers them all with one fdatasync (one written inline
	// would take an fdatasync of its own).
	submit := b.Submit
	if len(in.slots) == 1 {
		submit = b.SubmitInline
	}
	if err := submit(ctx, shard, req, in.opts.QueueTimeout); err != nil {
		if ctx.Err() != nil {
			return problem(ReasonTimeout, "the request ended before its records were queued: %v", err)
		}
		return submitProblem(err)
	}
	// Done is called exactly once whatever the client does: the records'
	// memory stays held until then.
	if err := <-done; err != nil {
		return submitProblem(err)
	}
	return nil
}

// appendAnswer appends a 200's body, Answer as encoding/json writes it
// (ids omitted when nil), without encoding/json: the ids are hex digits.
func appendAnswer(b []byte, records int, d wab.Durability, ids []sink.RecordID) []byte {
	b = append(b, `{"records":`...)
	b = strconv.AppendInt(b, int64(records), 10)
	b = append(b, `,"durability":"`...)
	b = append(b, durabilityName(d)...)
	b = append(b, '"')
	if len(ids) > 0 {
		b = append(b, `,"ids":[`...)
		for i, id := range ids {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = hex.AppendEncode(b, id[:])
			b = append(b, '"')
		}
		b = append(b, ']')
	}
	return append(b, "}\n"...)
}

// request is what the headers say.
type request struct {
	format     format
	encoding   string
	durability wab.Durability
	idemKey    string
	eventTime  int64
	key        []byte
	ids        bool
}

// readRequest checks the headers before the body is read.
func readRequest(r *http.Request, o *Options) (request, *Problem) {
	q := request{ids: true}
	switch v := strings.ToLower(strings.TrimSpace(r.Header.Get(HeaderDurability))); v {
	case "", "durable":
		q.durability = wab.Durable
	case "buffered":
		q.durability = wab.Buffered
	default:
		return q, problem(ReasonBadRequest, "%s %q: durable or buffered", HeaderDurability, v)
	}
	if r.ProtoMajor == 1 && r.ContentLength == 0 && r.Header.Get("Content-Length") == "" && len(r.TransferEncoding) == 0 {
		return q, problem(ReasonLengthRequired, "a body needs Content-Length or chunked Transfer-Encoding (at most %d bytes)", o.MaxBodyBytes)
	}
	if r.ContentLength > o.MaxBodyBytes {
		p := problem(ReasonBodyTooLarge, "Content-Length %d is more than %d bytes (http.max_body_bytes)", r.ContentLength, o.MaxBodyBytes)
		p.Limit = o.MaxBodyBytes
		return q, p
	}
	f, p := formatOf(r.Header.Get("Content-Type"))
	if p != nil {
		return q, p
	}
	q.format = f
	if encs := r.Header.Values("Content-Encoding"); len(encs) > 1 || strings.Contains(r.Header.Get("Content-Encoding"), ",") {
		return q, problem(ReasonMediaType, "one Content-Encoding at most (gzip, zstd or identity)")
	}
	q.encoding = strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	switch q.encoding {
	case "", "identity", "gzip", "x-gzip", "zstd":
	default:
		return q, problem(ReasonMediaType, "Content-Encoding %q is not accepted (gzip, zstd or identity)", q.encoding)
	}
	if k := r.Header.Get(HeaderIdempotency); k != "" {
		if len(k) > MaxIdempotencyKeyBytes || !printable(k) {
			return q, problem(ReasonBadRequest, "%s: at most %d printable ASCII characters", HeaderIdempotency, MaxIdempotencyKeyBytes)
		}
		q.idemKey = k
	}
	if v := r.Header.Get(HeaderEventTime); v != "" {
		t, err := parseEventTime(v)
		if err != nil {
			return q, problem(ReasonBadRequest, "%s: %v", HeaderEventTime, err)
		}
		q.eventTime = t
	}
	if v, ok := r.Header[HeaderKey]; ok && len(v) > 0 {
		q.key = []byte(v[0])
	}
	if v := r.URL.Query().Get("ids"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return q, problem(ReasonBadRequest, "ids=%q: true or false", v)
		}
		q.ids = b
	}
	return q, nil
}

// apply gives the request's event time to records without one, and its
// key to a raw body's record.
func (q *request) apply(recs []rec) {
	for i := range recs {
		if recs[i].eventTime == 0 {
			recs[i].eventTime = q.eventTime
		}
		if q.format == formatRaw && q.key != nil {
			recs[i].key = q.key
		}
	}
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func durabilityName(d wab.Durability) string {
	if d == wab.Buffered {
		return "buffered"
	}
	return "durable"
}
