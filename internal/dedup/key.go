package dedup

import (
	"crypto/sha256"
	"encoding/binary"
)

// KeyOf is the claim key of a record of stream whose key material (the
// declared fields, as the check stage encodes them) is material: SHA-256
// over the stream name and the material, each preceded by its length as a
// big-endian uint64, so that no two (stream, material) pairs share an
// encoding and equal material in two streams never collides.
func KeyOf(stream string, material []byte) Key {
	var n [8]byte
	h := sha256.New()
	binary.BigEndian.PutUint64(n[:], uint64(len(stream)))
	h.Write(n[:])
	h.Write([]byte(stream))
	binary.BigEndian.PutUint64(n[:], uint64(len(material)))
	h.Write(n[:])
	h.Write(material)
	var k Key
	h.Sum(k[:0])
	return k
}
