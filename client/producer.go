package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wire"
)

// Producer is an idempotent producer's identity: a random id, and the
// counter its records are numbered from. Every record pushed through a
// Client gets the next sequence number of the Client's Producer when it is
// first pushed, and keeps it when the client resends it after a
// reconnect, so the daemon gives the resent record the same id
// (docs/wire_protocol.md, "Sequence numbers and record ids").
//
// A Client makes its own Producer unless WithProducer gives it one. Several
// Clients may share one Producer — several connections of one producer —
// and never reuse a number: they draw from one counter.
type Producer struct {
	id   wire.ProducerID
	next atomic.Uint64
}

// NewProducer returns a producer with a fresh random id, numbering its
// records from 0.
func NewProducer() *Producer {
	p := &Producer{}
	rand.Read(p.id[:]) // never fails (crypto/rand panics instead)
	return p
}

// ID is the producer's id.
func (p *Producer) ID() wire.ProducerID { return p.id }

// reserve takes n consecutive sequence numbers and returns the first.
func (p *Producer) reserve(n int) uint64 { return p.next.Add(uint64(n)) - uint64(n) }

// Header is one record header: a name and a value. Names may repeat; the
// order is kept.
type Header = sink.Header

// Record is one record with its optional metadata. Only Payload is
// required.
type Record struct {
	Payload []byte
	// Key is the record's key; nil for none (an empty non-nil key is a
	// key).
	Key []byte
	// Headers are the record's headers, in order.
	Headers []Header
	// EventTime is the record's own time; zero means the time of the push
	// (every record is stamped when it is first pushed, and a resend
	// keeps the stamp).
	EventTime time.Time
	// Replay, when set, re-submits a record under its original identity;
	// see Replay.
	Replay *Replay
}

// Replay is the original identity of a record being put back through the
// daemon (weir deadletter replay): its id, the source it came from and
// where that source keeps it. The daemon stores the record under that id
// and origin instead of deriving an id, so replaying a record twice adds
// nothing to an idempotent sink. Only a connection over the Unix socket
// may replay: elsewhere the push fails with ErrNotPermitted.
type Replay struct {
	ID        sink.RecordID
	Source    string
	OriginPos string
}

// ErrUnsupported is returned for a push the daemon's protocol version
// cannot carry: records with a key, headers, an event time or replay
// fields need version 2, and the daemon speaks only version 1.
var ErrUnsupported = errors.New("weir: the daemon speaks only wire version 1, which carries no record metadata")

// hasMeta reports whether r needs a metadata block.
func (r *Record) hasMeta() bool {
	return r.Key != nil || len(r.Headers) > 0 || !r.EventTime.IsZero() || r.Replay != nil
}

// appendMeta appends r's metadata block to dst.
func (r *Record) appendMeta(dst []byte) []byte {
	m := record.Meta{Key: r.Key, Headers: r.Headers}
	if !r.EventTime.IsZero() {
		m.EventTime = r.EventTime.UnixNano()
	}
	if rp := r.Replay; rp != nil {
		m.ID, m.HasID = rp.ID, true
		m.Source, m.OriginPos = rp.Source, rp.OriginPos
	}
	return record.Append(dst, &m)
}

// session is what a connection negotiated.
type session struct {
	version  uint8
	flags    uint8 // granted Hello flags
	maxFrame int   // the daemon's frame cap; 0: unknown
}

// encode builds the frame for a push of version v (request id 0, set
// later) and returns it with its first sequence number. recs is nil for a
// push of plain payloads.
func (c *Client) encode(s *session, payloads [][]byte, recs []Record, d Durability) ([]byte, uint64, error) {
	v := s.version
	p := wire.Push{Version: v, Durability: d, Payloads: payloads}
	if recs != nil {
		p.Payloads = make([][]byte, len(recs))
		for i := range recs {
			p.Payloads[i] = recs[i].Payload
		}
		metas, replay, err := recordMetas(recs)
		if err != nil {
			return nil, 0, err
		}
		if metas != nil && v < wire.Version2 {
			return nil, 0, fmt.Errorf("client: %w", ErrUnsupported)
		}
		if replay && s.flags&wire.FlagReplay == 0 {
			return nil, 0, fmt.Errorf("client: replay needs a connection granted replay (the Unix socket): %w", ErrNotPermitted)
		}
		p.Metas = metas
	}
	if n, limit := wire.BodySize(p), c.maxFrame(s); n > limit {
		return nil, 0, fmt.Errorf("client: push of %d records needs a %d byte frame, cap is %d: %w",
			len(p.Payloads), n, limit, ErrFrameTooLarge)
	}
	if v >= wire.Version2 {
		p.FirstSeq = c.prod.reserve(len(p.Payloads))
		p.EventTime = time.Now().UnixNano()
	}
	return wire.AppendPush(make([]byte, 0, wire.HeaderSize+wire.BodySize(p)), p), p.FirstSeq, nil
}

// recordMetas encodes the records' metadata blocks, checked as the daemon
// checks them; nil when no record has any. replay reports replay fields.
func recordMetas(recs []Record) (metas [][]byte, replay bool, err error) {
	var buf []byte
	for i := range recs {
		r := &recs[i]
		if !r.hasMeta() {
			continue
		}
		if metas == nil {
			metas = make([][]byte, len(recs))
		}
		start := len(buf)
		buf = r.appendMeta(buf)
		metas[i] = buf[start:len(buf):len(buf)]
		info, err := wire.InspectMeta(metas[i])
		if err != nil {
			return nil, false, fmt.Errorf("client: record %d: %w (%w)", i, ErrBadMeta, err)
		}
		replay = replay || info.Replay
	}
	return metas, replay, nil
}

// maxFrame is the largest frame body the client sends: its own cap, or
// the daemon's when that is smaller.
func (c *Client) maxFrame(s *session) int {
	if m := s.maxFrame; m > 0 && m < c.opts.maxFrame {
		return m
	}
	return c.opts.maxFrame
}

// connect dials the daemon and negotiates the protocol version: with a
// Hello when the client speaks version 2, falling back to version 1 (on a
// new connection) when the daemon refuses the Hello with BadVersion.
func (c *Client) connect(ctx context.Context) (net.Conn, session, error) {
	conn, err := dial(ctx, c.ep, &c.opts)
	if err != nil || c.opts.maxVersion < wire.Version2 {
		return conn, session{version: wire.Version}, err
	}
	s, err := c.hello(conn)
	var ne *NackError
	if errors.As(err, &ne) && ne.Code == wire.CodeBadVersion {
		conn.Close()
		c.log.Info("weir client: the daemon speaks only wire version 1; falling back", "addr", c.ep.address)
		conn, err = dial(ctx, c.ep, &c.opts)
		return conn, session{version: wire.Version}, err
	}
	if err != nil {
		conn.Close()
		return nil, session{}, err
	}
	return conn, s, nil
}

// hello sends a Hello on a fresh connection and reads the answer, within
// the dial timeout.
func (c *Client) hello(conn net.Conn) (session, error) {
	conn.SetDeadline(time.Now().Add(c.opts.dialTimeout))
	defer conn.SetDeadline(time.Time{})
	h := wire.Hello{MaxVersion: c.opts.maxVersion, Flags: wire.FlagIdempotent | wire.FlagReplay, Producer: c.prod.id}
	if _, err := conn.Write(wire.AppendHello(nil, h)); err != nil {
		return session{}, fmt.Errorf("client: hello: %w", err)
	}
	// Nothing else is in flight on the connection yet, and ReadResponse
	// reads exactly one frame: no buffer is needed.
	resp, err := wire.ReadResponse(conn)
	switch {
	case err != nil:
		return session{}, fmt.Errorf("client: hello: %w", err)
	case resp.Type == wire.TypeNack:
		return session{}, &NackError{Code: resp.Code, Message: resp.Message}
	case resp.Type != wire.TypeHelloAck:
		return session{}, fmt.Errorf("client: hello answered by %s", resp.Type)
	}
	a := resp.Hello
	return session{version: min(max(a.Version, wire.Version), wire.MaxVersion), flags: a.Flags, maxFrame: int(a.MaxFrameBytes)}, nil
}

// downgrade re-encodes a version-2 push frame as version 1, for a daemon
// that speaks only version 1; records with metadata cannot be.
func downgrade(frame []byte) ([]byte, error) {
	f, err := wire.NewDecoder(bytes.NewReader(frame), len(frame)).Next()
	if err != nil {
		return nil, err
	}
	if f.Metas != nil {
		return nil, ErrUnsupported
	}
	p := wire.Push{RequestID: f.RequestID, Durability: f.Durability, Payloads: f.Payloads}
	return wire.AppendPush(make([]byte, 0, wire.HeaderSize+wire.PushBodySize(p.Payloads)), p), nil
}
