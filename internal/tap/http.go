package tap

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// Route is the admin endpoint's pattern for Handler.
const Route = "GET /v1/tap"

// Stream timing: how long one reader's wait lasts (and how often a grown
// drop count is reported), and how long one write may take before the
// stream is given up (a client that stopped reading; its reader keeps
// dropping, counted, meanwhile) — the metrics endpoint's own write
// timeout.
const (
	reportEvery  = time.Second
	writeTimeout = 30 * time.Second
)

// Dropped is the control line of a stream: the records dropped for the
// reader so far, sent each second the count has grown and when the
// stream ends. Record lines (Line) never have the field.
type Dropped struct {
	Dropped int64 `json:"dropped"`
	// End says why the stream ended, on its last line: "limit".
	End string `json:"end,omitempty"`
}

// Handler serves a point's records as NDJSON:
//
//	GET /v1/tap?at=POINT[&limit=N][&rate=R][&filter=EXPR][&full=1][&buffer=N]
//
// at names the point (Hub.Points; an unknown one is answered 404 with
// the list). Each record is a line (Line), flushed per batch; a line
// {"dropped":N} reports the records the reader's buffer had no room for,
// each second that count grows and on the last line. limit ends the
// stream after N records; rate paces it to R lines a second (the buffer
// fills meanwhile and drops, counted); filter keeps the records a CEL
// expression is true for (Compile; a bad one is answered 400); full
// shows whole payloads; buffer sizes the reader's buffer (default
// DefaultBuffer). The stream ends when the client goes, at limit, or when
// the request's context ends (the server shutting down). Nothing the
// handler does waits on the pipeline, nor the pipeline on it.
func Handler(h *Hub, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		at := q.Get("at")
		var o Options
		var limit int64
		var rate float64
		var err error
		if at == "" {
			err = fmt.Errorf("at is required: one of %q", h.Points())
		}
		if s := q.Get("limit"); err == nil && s != "" {
			if limit, err = strconv.ParseInt(s, 10, 64); err == nil && limit < 0 {
				err = errors.New("must not be negative")
			}
			err = param("limit", err)
		}
		if s := q.Get("rate"); err == nil && s != "" {
			if rate, err = strconv.ParseFloat(s, 64); err == nil && !(rate >= 0) {
				err = errors.New("must not be negative")
			}
			err = param("rate", err)
		}
		if s := q.Get("buffer"); err == nil && s != "" {
			o.Buffer, err = strconv.Atoi(s)
			if err == nil && (o.Buffer < 1 || o.Buffer > MaxBuffer) {
				err = fmt.Errorf("must be 1 – %d", MaxBuffer)
			}
			err = param("buffer", err)
		}
		if s := q.Get("full"); err == nil && s != "" {
			o.Full, err = strconv.ParseBool(s)
			err = param("full", err)
		}
		if s := q.Get("filter"); err == nil && s != "" {
			o.Filter, err = Compile(s)
		}
		if err != nil {
			http.Error(w, "tap: "+err.Error(), http.StatusBadRequest)
			return
		}
		r, err := h.Subscribe(at, o)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		defer r.Close()
		log.Info("tap reader attached", "at", at, "remote", req.RemoteAddr, "limit", limit, "rate", rate, "filter", q.Get("filter") != "")
		sent, dropped := stream(w, req, r, limit, rate)
		log.Info("tap reader left", "at", at, "remote", req.RemoteAddr, "records", sent, "dropped", dropped)
	})
}

func param(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", name, err)
}

// stream writes r's lines to w until the request ends or limit lines
// (0: no limit) are sent, at most rate a second (0: no pace).
func stream(w http.ResponseWriter, req *http.Request, r *Reader, limit int64, rate float64) (sent, dropped int64) {
	ctx := req.Context()
	rc := http.NewResponseController(w)
	// The endpoint's read and write timeouts are for requests, not for a
	// stream that lasts as long as its reader: a write deadline is set
	// per batch instead.
	_ = rc.SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flush := func() bool {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		return rc.Flush() == nil
	}
	if !flush() {
		return 0, 0
	}
	var pace time.Duration
	if rate > 0 {
		pace = time.Duration(float64(time.Second) / rate)
	}
	var reported int64
	lastReport := time.Now()
	next := time.Now()
	var buf []Line
	for ctx.Err() == nil {
		lines, d := r.Next(buf, reportEvery, ctx.Done())
		dropped = d
		for i := range lines {
			if pace > 0 {
				if wait := time.Until(next); wait > 0 {
					t := time.NewTimer(wait)
					select {
					case <-t.C:
					case <-ctx.Done():
						t.Stop()
						return sent, r.Dropped()
					}
				}
				if now := time.Now(); next.Before(now) {
					next = now
				}
				next = next.Add(pace)
			}
			_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if enc.Encode(&lines[i]) != nil {
				return sent, r.Dropped()
			}
			if sent++; limit > 0 && sent >= limit {
				dropped = r.Dropped()
				enc.Encode(Dropped{Dropped: dropped, End: "limit"})
				flush()
				return sent, dropped
			}
			if pace > 0 && !flush() {
				return sent, r.Dropped()
			}
		}
		clear(lines) // let go of the payload copies
		buf = lines
		if dropped > reported && time.Since(lastReport) >= reportEvery {
			if enc.Encode(Dropped{Dropped: dropped}) != nil {
				return sent, dropped
			}
			reported, lastReport = dropped, time.Now()
		}
		if !flush() {
			return sent, dropped
		}
	}
	return sent, r.Dropped()
}
