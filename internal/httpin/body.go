package httpin

import (
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/weir-io/weir/internal/flow"
)

// readChunk is the step a body is held and read in: a body takes memory
// from the budget a chunk at a time, before the chunk is read.
const readChunk = 64 << 10

// zstdMaxWindow bounds the memory a zstd stream may ask the decoder for.
const zstdMaxWindow = 8 << 20

// bodyLimits bound one body.
type bodyLimits struct {
	maxBody    int64 // as sent
	maxDecoded int64 // decompressed
	wait       time.Duration
}

// decoder returns the reader of a Content-Encoding over r, and what to
// close once read.
func decoder(encoding string, r io.Reader) (io.Reader, func(), *Problem) {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "identity":
		return r, func() {}, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, bodyProblem(err, "gzip")
		}
		return zr, func() { _ = zr.Close() }, nil
	case "zstd":
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderMaxMemory(DefaultMaxDecodedBytes))
		if err != nil {
			return nil, nil, bodyProblem(err, "zstd")
		}
		return zr, zr.Close, nil
	}
	return nil, nil, problem(ReasonMediaType, "Content-Encoding %q is not accepted (gzip, zstd or identity)", encoding)
}

// readBody reads a whole body, decompressed, into memory held in h: each
// chunk is held before it is read, and the buffer's growth too (the old
// and the new buffer both count until the body is read). raw counts the
// bytes as sent.
func readBody(r io.Reader, encoding string, sizeHint int64, lim bodyLimits, h *flow.Hold) (body []byte, raw int64, p *Problem) {
	cr := &countingReader{r: r}
	dr, closeDec, p := decoder(encoding, cr)
	if p != nil {
		return nil, cr.n, p
	}
	defer closeDec()
	capHint := int64(readChunk)
	if sizeHint > 0 && (encoding == "" || encoding == "identity") {
		capHint = min(sizeHint+1, lim.maxDecoded+1) // +1: the read that sees EOF
	}
	if p := hold(h, capHint, lim.wait); p != nil {
		return nil, cr.n, p
	}
	buf := make([]byte, 0, capHint)
	for {
		if len(buf) == cap(buf) {
			grow := min(max(int64(cap(buf)), readChunk), lim.maxDecoded+1-int64(cap(buf)))
			if grow <= 0 {
				return nil, cr.n, decodedTooLarge(lim)
			}
			if p := hold(h, int64(cap(buf))+grow, lim.wait); p != nil {
				return nil, cr.n, p
			}
			nb := make([]byte, len(buf), int64(cap(buf))+grow)
			copy(nb, buf)
			buf = nb
		}
		n, err := dr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > lim.maxDecoded {
			return nil, cr.n, decodedTooLarge(lim)
		}
		if err == io.EOF {
			return buf, cr.n, nil
		}
		if err != nil {
			return nil, cr.n, bodyProblem(err, encoding)
		}
	}
}

func decodedTooLarge(lim bodyLimits) *Problem {
	p := problem(ReasonBodyTooLarge, "the body decompresses to more than %d bytes (http.max_decoded_bytes)", lim.maxDecoded)
	p.Limit = lim.maxDecoded
	return p
}

// hold takes n more bytes of the budget for a body, or says why not.
func hold(h *flow.Hold, n int64, wait time.Duration) *Problem {
	ok, err := h.Grow(n, wait)
	switch {
	case errors.Is(err, flow.ErrOversize):
		return problem(ReasonOverloaded, "the body needs %d bytes of memory, more than the daemon's budget grants now: %v", n, err)
	case err != nil:
		return problem(ReasonOverloaded, "memory budget: %v", err)
	case !ok:
		return problem(ReasonOverloaded, "memory budget exhausted: %d bytes not granted within flow.admission_wait %s", n, wait)
	}
	return nil
}

// bodyProblem classifies an error reading a body.
func bodyProblem(err error, encoding string) *Problem {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		p := problem(ReasonBodyTooLarge, "the body is larger than %d bytes (http.max_body_bytes)", mbe.Limit)
		p.Limit = mbe.Limit
		return p
	case errors.Is(err, os.ErrDeadlineExceeded):
		return problem(ReasonTimeout, "the body did not arrive within http.read_timeout")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return problem(ReasonTruncated, "the body ended before it was complete (%s)", encodingName(encoding))
	case encoding != "" && encoding != "identity":
		return problem(ReasonDecode, "the %s body does not decompress: %v", encodingName(encoding), err)
	}
	return problem(ReasonTruncated, "reading the body: %v", err)
}

func encodingName(e string) string {
	if e == "" {
		return "identity"
	}
	return e
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}
