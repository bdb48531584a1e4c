package dedup

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// The store speaks just enough RESP2 (the Redis protocol) for its own
// commands: requests are arrays of bulk strings written by hand into one
// reused buffer, and replies are parsed in place in one reused read
// buffer. Nothing is allocated per record; an error reply's text is the
// only reply copied out.

// respReadBuf is the read buffer's size: every reply line must fit in it
// (a claim's reply is at most 23 bytes; an error line is a short sentence).
const respReadBuf = 16 << 10

// errProtocol marks a reply the store cannot read: the connection is out
// of step with the server and must be dropped.
var errProtocol = errors.New("redis protocol error")

func protocolErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errProtocol}, args...)...)
}

// serverError is an error reply (-ERR …, -OOM …, -NOAUTH …). The
// connection stays in step: the replies after it are still read.
type serverError string

func (e serverError) Error() string { return "redis: " + string(e) }

// appendBulk appends one RESP bulk string.
func appendBulk(b, s []byte) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// appendCommand appends one command: an array of bulk strings.
func appendCommand(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = appendBulk(b, []byte(a))
	}
	return b
}

// respReader reads replies from rd into buf, in place.
type respReader struct {
	rd   io.Reader
	buf  []byte
	r, w int // unread bytes are buf[r:w]
}

func newRespReader(rd io.Reader) respReader {
	return respReader{rd: rd, buf: make([]byte, respReadBuf)}
}

// fill reads at least one more byte, first moving the unread bytes to the
// front of buf. A reply that ends early is io.ErrUnexpectedEOF: the store
// reads only replies it is owed.
func (b *respReader) fill() error {
	if b.r > 0 {
		b.w = copy(b.buf, b.buf[b.r:b.w])
		b.r = 0
	}
	if b.w == len(b.buf) {
		return protocolErr("reply line longer than %d bytes", len(b.buf))
	}
	for range 100 {
		n, err := b.rd.Read(b.buf[b.w:])
		b.w += n
		switch {
		case n > 0:
			return nil
		case err == io.EOF:
			return io.ErrUnexpectedEOF
		case err != nil:
			return err
		}
	}
	return io.ErrNoProgress
}

// line returns the next line without its CRLF; it is valid until the
// next read.
func (b *respReader) line() ([]byte, error) {
	for scanned := 0; ; {
		if i := bytes.IndexByte(b.buf[b.r+scanned:b.w], '\n'); i >= 0 {
			end := b.r + scanned + i
			l := b.buf[b.r:end]
			b.r = end + 1
			if len(l) == 0 || l[len(l)-1] != '\r' {
				return nil, protocolErr("reply line not ended by CRLF")
			}
			return l[:len(l)-1], nil
		}
		scanned = b.w - b.r
		if err := b.fill(); err != nil {
			return nil, err
		}
	}
}

// bulkBody returns the next n bytes and checks the CRLF after them; n
// must fit in buf. The bytes are valid until the next read.
func (b *respReader) bulkBody(n int) ([]byte, error) {
	for b.w-b.r < n+2 {
		if err := b.fill(); err != nil {
			return nil, err
		}
	}
	v := b.buf[b.r : b.r+n]
	if b.buf[b.r+n] != '\r' || b.buf[b.r+n+1] != '\n' {
		return nil, protocolErr("bulk string not ended by CRLF")
	}
	b.r += n + 2
	return v, nil
}

// discard skips the next n bytes and the CRLF after them, however large n
// is: a bulk length read from the wire never sizes an allocation.
func (b *respReader) discard(n int) error {
	for n > 0 {
		if b.r == b.w {
			if err := b.fill(); err != nil {
				return err
			}
		}
		m := min(n, b.w-b.r)
		b.r += m
		n -= m
	}
	_, err := b.bulkBody(0)
	return err
}

// claimReply reads the reply to one SET key id NX GET PX: a null (RESP2
// $-1, or RESP3 _) is Claimed, a bulk string equal to id is Redelivery,
// any other bulk string is Duplicate. An error reply is a serverError;
// anything else is a protocol error.
func (b *respReader) claimReply(id []byte) (Answer, error) {
	l, err := b.line()
	if err != nil {
		return 0, err
	}
	if len(l) == 0 {
		return 0, protocolErr("empty reply line")
	}
	switch l[0] {
	case '$':
		n, ok := parseLen(l[1:])
		switch {
		case !ok:
			return 0, protocolErr("bad bulk length %q", trimmed(l))
		case n == -1:
			return Claimed, nil
		case n < 0:
			return 0, protocolErr("bad bulk length %q", trimmed(l))
		case n != len(id):
			return Duplicate, b.discard(n)
		}
		v, err := b.bulkBody(n)
		if err != nil {
			return 0, err
		}
		if bytes.Equal(v, id) {
			return Redelivery, nil
		}
		return Duplicate, nil
	case '_':
		if len(l) == 1 {
			return Claimed, nil
		}
	case '-':
		return 0, serverError(l[1:])
	}
	return 0, protocolErr("unexpected reply %q to SET NX GET", trimmed(l))
}

// statusReply reads a simple-string reply (+OK, +PONG) and checks it.
func (b *respReader) statusReply(want string) error {
	l, err := b.line()
	switch {
	case err != nil:
		return err
	case len(l) > 0 && l[0] == '-':
		return serverError(l[1:])
	case len(l) == 0 || l[0] != '+' || string(l[1:]) != want:
		return protocolErr("unexpected reply %q, want +%s", trimmed(l), want)
	}
	return nil
}

// parseLen parses a bulk length: -1 or a non-negative decimal of at most
// 18 digits.
func parseLen(s []byte) (int, bool) {
	if string(s) == "-1" {
		return -1, true
	}
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// trimmed is at most 64 bytes of a line, for an error message.
func trimmed(l []byte) []byte { return l[:min(len(l), 64)] }
