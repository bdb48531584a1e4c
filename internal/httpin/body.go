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

// decoderMemory is what a decoder of encoding may hold besides the body:
// gzip's 32 KiB window and buffers; zstd's window and a block.
func decoderMemory(encoding string) int64 {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "gzip", "x-gzip":
		return 64 << 10
	case "zstd":
		return zstdMaxWindow + 256<<10
	}
	return 0
}

// bodyLimits bound one body.
type bodyLimits struct {
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

// readBody reads a whole body, decompressed, into memory held in h, and
// never holds more than it has read plus one chunk: an uncompressed body
// of known length is read into one buffer of that length, held first;
// any other is read a chunk at a time, each chunk held before it is read
// — so a compression bomb is refused (413) having held no more than
// maxDecoded — and the chunks are joined once the body has ended (the
// chunks and the joined copy are both held while the bytes are copied,
// then the chunks' hold is given back). raw counts the bytes as sent.
func readBody(r io.Reader, encoding string, sizeHint int64, lim bodyLimits, h *flow.Hold) (body []byte, raw int64, p *Problem) {
	cr := &countingReader{r: r}
	if p := hold(h, decoderMemory(encoding), lim.wait); p != nil {
		return nil, 0, p
	}
	dr, closeDec, p := decoder(encoding, cr)
	if p != nil {
		return nil, cr.n, p
	}
	defer closeDec()
	if sizeHint > 0 && sizeHint <= lim.maxDecoded && (encoding == "" || encoding == "identity") {
		if p := hold(h, sizeHint, lim.wait); p != nil {
			return nil, cr.n, p
		}
		buf := make([]byte, sizeHint)
		if _, err := io.ReadFull(dr, buf); err != nil {
			return nil, cr.n, bodyProblem(err, encoding)
		}
		return buf, cr.n, nil
	}
	var chunks [][]byte
	total := int64(0)
	for done := false; !done; {
		if p := hold(h, readChunk, lim.wait); p != nil {
			return nil, cr.n, p
		}
		c := make([]byte, readChunk)
		n, err := fill(dr, c)
		total += int64(n)
		if total > lim.maxDecoded {
			return nil, cr.n, decodedTooLarge(lim)
		}
		switch {
		case err == io.EOF:
			done = true
		case err != nil:
			return nil, cr.n, bodyProblem(err, encoding)
		}
		chunks = append(chunks, c[:n])
	}
	if len(chunks) == 1 {
		c := chunks[0]
		if len(c) > readChunk/4 {
			return c, cr.n, nil
		}
		// A small body: a copy of its size, and the chunk's hold back.
		if p := hold(h, int64(len(c)), lim.wait); p != nil {
			return nil, cr.n, p
		}
		h.Shrink(readChunk)
		return append([]byte(nil), c...), cr.n, nil
	}
	if p := hold(h, total, lim.wait); p != nil {
		return nil, cr.n, p
	}
	body = make([]byte, 0, total)
	for _, c := range chunks {
		body = append(body, c...)
	}
	h.Shrink(int64(len(chunks)) * readChunk) // the chunks are garbage now
	return body, cr.n, nil
}

// fill reads into b until it is full (nil), the reader ends (io.EOF, with
// what was read before) or fails.
func fill(r io.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
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
