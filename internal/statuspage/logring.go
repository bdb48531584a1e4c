package statuspage

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Bounds of what the log ring keeps.
const (
	maxMsgBytes   = 300 // of a message
	maxAttrsBytes = 600 // of an entry's attributes, rendered
	maxSinks      = 64  // sinks whose last warning is remembered
)

// LogEntry is a warning or an error the daemon logged.
type LogEntry struct {
	Time  time.Time `json:"time"`
	Level string    `json:"level"`
	Msg   string    `json:"msg"`
	// Attrs are the record's attributes as key=value pairs (the bound
	// ones first), shortened.
	Attrs string `json:"attrs"`
	// Sink is the value of the record's sink attribute, if any: the
	// components of a sink and the drain log with it.
	Sink string `json:"-"`
}

// LogRing keeps the last warnings and errors logged, and each sink's
// last one, for the status page. Feed it by wrapping the daemon's log
// handler (Handler).
type LogRing struct {
	ring   *Ring[LogEntry]
	warns  atomic.Int64
	errors atomic.Int64

	mu     sync.Mutex
	bySink map[string]LogEntry
}

// NewLogRing keeps the last n warnings and errors.
func NewLogRing(n int) *LogRing {
	return &LogRing{ring: NewRing[LogEntry](n), bySink: map[string]LogEntry{}}
}

// Entries are the kept entries, oldest first.
func (l *LogRing) Entries() []LogEntry { return l.ring.Items() }

// Counts are the warnings and errors logged since start.
func (l *LogRing) Counts() (warnings, errors int64) { return l.warns.Load(), l.errors.Load() }

// LastForSink is the last warning or error logged with sink=name.
func (l *LogRing) LastForSink(name string) (LogEntry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.bySink[name]
	return e, ok
}

func (l *LogRing) add(e LogEntry) {
	if e.Level == slog.LevelError.String() {
		l.errors.Add(1)
	} else {
		l.warns.Add(1)
	}
	l.ring.Push(e)
	if e.Sink == "" {
		return
	}
	l.mu.Lock()
	if _, ok := l.bySink[e.Sink]; ok || len(l.bySink) < maxSinks {
		l.bySink[e.Sink] = e
	}
	l.mu.Unlock()
}

// Handler wraps next: every record at Warn or above is also kept in the
// ring — even when next's level leaves it out — and next handles what
// it is enabled for, as before.
func (l *LogRing) Handler(next slog.Handler) slog.Handler {
	return &ringHandler{next: next, ring: l}
}

type ringHandler struct {
	next   slog.Handler
	ring   *LogRing
	bound  string // rendered attributes of WithAttrs
	sink   string // a bound sink attribute
	prefix string // group prefix of the record's attributes ("g.")
}

func (h *ringHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h *ringHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		var b strings.Builder
		b.WriteString(h.bound)
		sink := h.sink
		r.Attrs(func(a slog.Attr) bool {
			if h.prefix == "" && a.Key == "sink" {
				sink = a.Value.Resolve().String()
			}
			writeAttr(&b, h.prefix, a)
			return b.Len() < maxAttrsBytes
		})
		h.ring.add(LogEntry{Time: r.Time, Level: r.Level.String(), Msg: shorten(r.Message, maxMsgBytes),
			Attrs: shorten(strings.TrimSpace(b.String()), maxAttrsBytes), Sink: sink})
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *ringHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(as)
	var b strings.Builder
	b.WriteString(h.bound)
	for _, a := range as {
		if h.prefix == "" && a.Key == "sink" {
			c.sink = a.Value.Resolve().String()
		}
		writeAttr(&b, h.prefix, a)
	}
	c.bound = shorten(b.String(), maxAttrsBytes)
	return &c
}

func (h *ringHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.next = h.next.WithGroup(name)
	c.prefix = h.prefix + name + "."
	return &c
}

// writeAttr writes " key=value", groups flattened into dotted keys, as
// slog's text handler does.
func writeAttr(b *strings.Builder, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range v.Group() {
			writeAttr(b, p, g)
		}
		return
	}
	if a.Equal(slog.Attr{}) {
		return
	}
	b.WriteByte(' ')
	b.WriteString(prefix + a.Key)
	b.WriteByte('=')
	s := v.String()
	if s == "" || strings.ContainsAny(s, " \t\n\"=") || !utf8.ValidString(s) {
		s = strconv.Quote(s)
	}
	b.WriteString(s)
}

// shorten cuts s to at most n bytes at a rune boundary, marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
