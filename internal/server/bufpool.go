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
// classes from 256 bytes to 64 KiB, four to each doubling (256, 320, 384,
// 448, 512, 640, ...), so that a buffer is at most a quarter larger than
// its frame needs — a 256-byte record with its 31 bytes of metadata takes
// 320 bytes, not 512; larger frames get a buffer of their own.
const (
	minBufShift = 8  // 256 bytes
	maxBufShift = 16 // 64 KiB
	// classesPerShift is the number of classes in each doubling.
	classesPerShift = 4
	numBufClasses   = 1 + classesPerShift*(maxBufShift-minBufShift)
)

var bufPools [numBufClasses]sync.Pool

// bufClass is the pool class of an n-byte buffer, or -1 for one too large
// to pool.
func bufClass(n int) int {
	if n <= 1<<minBufShift {
		return 0
	}
	shift := bits.Len(uint(n-1)) - 1 // 1<<shift < n <= 1<<(shift+1)
	if shift >= maxBufShift {
		return -1
	}
	quarter := (n - 1 - 1<<shift) >> (shift - 2) // 0..3
	return 1 + classesPerShift*(shift-minBufShift) + quarter
}

// classSize is the capacity of the buffers of class c.
func classSize(c int) int {
	if c == 0 {
		return 1 << minBufShift
	}
	shift := (c-1)/classesPerShift + minBufShift
	return 1<<shift + ((c-1)%classesPerShift+1)<<(shift-2)
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
	b := make([]byte, n, classSize(class))
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
