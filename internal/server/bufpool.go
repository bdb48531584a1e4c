package server

import (
	"math/bits"
	"sync"
)

// Frame buffers: every accepted frame's payloads, and the metadata its
// records are stored with, are copied into one buffer that the buffer's
// flusher reads until it calls the request's Done (it copies them into its
// own write buffer first; see wab.Request). The connection's writer gives
// the buffer back once it has answered the request, so in steady state a
// frame costs no allocation and no zeroing for its bytes. Buffers come in
// power-of-two classes from 256 bytes to 64 KiB; larger frames get a
// buffer of their own.
const (
	minBufShift = 8  // 256 bytes
	maxBufShift = 16 // 64 KiB
)

var bufPools [maxBufShift - minBufShift + 1]sync.Pool

// bufClass is the pool class of an n-byte buffer, or -1 for one too large
// to pool.
func bufClass(n int) int {
	if n <= 1<<minBufShift {
		return 0
	}
	shift := bits.Len(uint(n - 1))
	if shift > maxBufShift {
		return -1
	}
	return shift - minBufShift
}

// frameBuf is a buffer from the pools, kept by pointer so that giving it
// back allocates nothing.
type frameBuf struct {
	b     *[]byte
	class int // -1: not pooled
}

// getBuf returns a buffer of n bytes (contents undefined).
func getBuf(n int) frameBuf {
	class := bufClass(n)
	if class < 0 {
		b := make([]byte, n)
		return frameBuf{b: &b, class: -1}
	}
	if b, ok := bufPools[class].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return frameBuf{b: b, class: class}
	}
	b := make([]byte, n, 1<<(class+minBufShift))
	return frameBuf{b: &b, class: class}
}

// bytes is the buffer.
func (f frameBuf) bytes() []byte { return *f.b }

// put gives the buffer back; nothing may use it afterwards.
func (f frameBuf) put() {
	if f.class >= 0 {
		bufPools[f.class].Put(f.b)
	}
}
