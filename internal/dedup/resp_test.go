package dedup

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// TestClaimReply reads whole, partial and malformed replies to SET NX GET,
// each fed at once and a byte at a time.
func TestClaimReply(t *testing.T) {
	id := "0123456789abcdef"
	const (
		ok = iota
		protocol
		server
		eof
	)
	cases := []struct {
		name  string
		in    string
		want  []Answer // the answers before the error, if any
		fails int
	}{
		{"null: claimed", "$-1\r\n", []Answer{Claimed}, ok},
		{"RESP3 null: claimed", "_\r\n", []Answer{Claimed}, ok},
		{"own id: redelivery", "$16\r\n" + id + "\r\n", []Answer{Redelivery}, ok},
		{"other id: duplicate", "$16\r\n0123456789abcdeX\r\n", []Answer{Duplicate}, ok},
		{"other length: duplicate", "$3\r\nabc\r\n$0\r\n\r\n", []Answer{Duplicate, Duplicate}, ok},
		{"id with CR LF inside", "$16\r\n\r\n23456789abcd\r\n\r\n", []Answer{Duplicate}, ok},
		{"a run", "$-1\r\n$16\r\n" + id + "\r\n_\r\n$2\r\nxx\r\n", []Answer{Claimed, Redelivery, Claimed, Duplicate}, ok},
		{"long value skipped", "$40000\r\n" + strings.Repeat("v", 40000) + "\r\n$-1\r\n", []Answer{Duplicate, Claimed}, ok},
		{"error reply", "-ERR syntax error\r\n", nil, server},
		{"OOM after a claim", "$-1\r\n-OOM command not allowed\r\n", []Answer{Claimed}, server},
		{"empty input", "", nil, eof},
		{"cut in a line", "$-", nil, eof},
		{"cut before CRLF", "$-1", nil, eof},
		{"cut in a bulk", "$16\r\n0123", nil, eof},
		{"cut before bulk CRLF", "$16\r\n" + id, nil, eof},
		{"cut in a skipped bulk", "$100\r\nabc", nil, eof},
		{"LF without CR", "$-1\n", nil, protocol},
		{"empty line", "\r\n", nil, protocol},
		{"status reply", "+OK\r\n", nil, protocol},
		{"integer reply", ":1\r\n", nil, protocol},
		{"array reply", "*1\r\n$-1\r\n", nil, protocol},
		{"bad length", "$x\r\n", nil, protocol},
		{"empty length", "$\r\n", nil, protocol},
		{"negative length", "$-2\r\n", nil, protocol},
		{"huge length", "$9999999999999999999\r\n", nil, protocol},
		{"bulk not ended by CRLF", "$16\r\n" + id + "XY", nil, protocol},
		{"skipped bulk not ended by CRLF", "$2\r\nabXY", nil, protocol},
		{"RESP3 null with more", "_x\r\n", nil, protocol},
		{"line too long", "-" + strings.Repeat("e", respReadBuf) + "\r\n", nil, protocol},
	}
	for _, c := range cases {
		for _, oneByte := range []bool{false, true} {
			var rd io.Reader = strings.NewReader(c.in)
			if oneByte {
				rd = iotest.OneByteReader(rd)
			}
			in := newRespReader(rd)
			var got []Answer
			var err error
			for {
				var a Answer
				if a, err = in.claimReply([]byte(id)); err != nil {
					break
				}
				got = append(got, a)
				if len(got) == len(c.want) && c.fails == ok {
					break
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("%s (one byte %v): answers %v, want %v", c.name, oneByte, got, c.want)
			}
			var se serverError
			switch c.fails {
			case ok:
				if err != nil {
					t.Errorf("%s (one byte %v): %v", c.name, oneByte, err)
				} else if in.r != in.w {
					t.Errorf("%s (one byte %v): %d bytes left unread", c.name, oneByte, in.w-in.r)
				}
			case protocol:
				if !errors.Is(err, errProtocol) {
					t.Errorf("%s (one byte %v): error %v, want a protocol error", c.name, oneByte, err)
				}
			case server:
				if !errors.As(err, &se) || !strings.Contains(c.in, "-"+string(se)+"\r\n") {
					t.Errorf("%s (one byte %v): error %v, want the server's", c.name, oneByte, err)
				}
			case eof:
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("%s (one byte %v): error %v, want unexpected EOF", c.name, oneByte, err)
				}
			}
		}
	}
}

// TestReaderErrors: the connection's own error comes back as it is.
func TestReaderErrors(t *testing.T) {
	boom := errors.New("boom")
	in := newRespReader(iotest.ErrReader(boom))
	if _, err := in.claimReply(make([]byte, 16)); !errors.Is(err, boom) {
		t.Fatalf("error %v, want %v", err, boom)
	}
	in = newRespReader(iotest.DataErrReader(strings.NewReader("+PONG\r\n")))
	if err := in.statusReply("PONG"); err != nil {
		t.Fatalf("PONG with EOF: %v", err)
	}
	for _, c := range []struct{ in, want string }{{"+QUEUED\r\n", "protocol"}, {"-NOAUTH x\r\n", "NOAUTH"}, {"$2\r\nOK\r\n", "protocol"}} {
		in := newRespReader(strings.NewReader(c.in))
		if err := in.statusReply("OK"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("statusReply(%q) = %v, want %s", c.in, err, c.want)
		}
	}
}

// TestAppendCommand: the hand-written frames are RESP arrays of bulks.
func TestAppendCommand(t *testing.T) {
	got := appendCommand(nil, "AUTH", "u", "")
	if want := "*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$0\r\n\r\n"; !bytes.Equal(got, []byte(want)) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
