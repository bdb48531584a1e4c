package backup

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Errors of encrypted backups, told apart with errors.Is.
var (
	// ErrKey: a key is malformed, or none of the configured keys is the
	// one an object was sealed with.
	ErrKey = errors.New("backup: wrong or malformed encryption key")
	// ErrAuth: an encrypted object fails authentication — tampered with,
	// truncated, or sealed under another key with the same key id.
	ErrAuth = errors.New("backup: encrypted snapshot fails authentication (tampered or truncated)")
	// ErrNoKey: an encrypted object, and no key configured.
	ErrNoKey = errors.New("backup: snapshot is encrypted and no key is configured")
	// ErrPlain: a plain (unencrypted) object while keys are configured.
	ErrPlain = errors.New("backup: snapshot is not encrypted but a key is configured")
)

// The sealed object format (see the package doc).
const (
	sealMagic    = "WEIRBK"
	sealVersion  = 1
	sealAESGCM   = 1 // AES-256-GCM, HKDF-SHA256 per-object key
	keyIDLen     = 8
	saltLen      = 16
	headerLen    = len(sealMagic) + 2 + keyIDLen + saltLen + 4
	sealChunk    = 64 << 10 // plaintext bytes in each chunk but the last
	maxSealChunk = 16 << 20 // the most a reader accepts from a header
	keyLen       = 32
	sealedExt    = ".enc" // appended to an encrypted snapshot's key
	hkdfInfo     = "weir coordination backup v1"
	keyIDContext = "weir coordination backup key id\x00"
)

// ParseKeys reads backup keys: 32 bytes each, written as 64 hex digits or
// standard base64, separated by newlines, commas or spaces; lines starting
// with # are comments. The first key seals new backups; all of them open
// old ones.
func ParseKeys(text string) ([][]byte, error) {
	var keys [][]byte
	for line := range strings.Lines(text) {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, f := range strings.FieldsFunc(line, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' }) {
			k, err := hex.DecodeString(f)
			if err != nil || len(k) != keyLen {
				k, err = base64.StdEncoding.DecodeString(f)
			}
			if err != nil || len(k) != keyLen {
				return nil, fmt.Errorf("%w: key %d is not 32 bytes as 64 hex digits or base64", ErrKey, len(keys)+1)
			}
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no key given", ErrKey)
	}
	return keys, nil
}

// KeyID names a key without revealing it: the first 8 bytes of SHA-256
// over a fixed context and the key, in hex.
func KeyID(key []byte) string {
	h := sha256.Sum256(append([]byte(keyIDContext), key...))
	return hex.EncodeToString(h[:keyIDLen])
}

// objectAEAD derives the per-object AES-256-GCM from key and salt.
func objectAEAD(key, salt []byte) (cipher.AEAD, error) {
	k, err := hkdf.Key(sha256.New, key, salt, hkdfInfo, keyLen)
	if err != nil {
		return nil, fmt.Errorf("backup: derive key: %w", err)
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, fmt.Errorf("backup: cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("backup: cipher: %w", err)
	}
	return aead, nil
}

// chunkNonce is the chunk's index (big-endian) in bytes 0-7 and 1 in byte
// 11 for the last chunk.
func chunkNonce(dst []byte, i uint64, last bool) []byte {
	dst = dst[:12]
	clear(dst)
	binary.BigEndian.PutUint64(dst, i)
	if last {
		dst[11] = 1
	}
	return dst
}

// sealer is a reader of src sealed under key: the header, then the chunks.
type sealer struct {
	src        *bufio.Reader
	aead       cipher.AEAD
	hdr        []byte
	plain, out []byte
	sealed     []byte
	nonce      [12]byte
	i          uint64
	sentHdr    bool
	done       bool
}

func newSealer(src io.Reader, key []byte) (*sealer, error) {
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return nil, fmt.Errorf("backup: salt: %w", err)
	}
	aead, err := objectAEAD(key, salt)
	if err != nil {
		return nil, err
	}
	hdr := make([]byte, 0, headerLen)
	hdr = append(hdr, sealMagic...)
	hdr = append(hdr, sealVersion, sealAESGCM)
	id, _ := hex.DecodeString(KeyID(key))
	hdr = append(hdr, id...)
	hdr = append(hdr, salt...)
	hdr = binary.BigEndian.AppendUint32(hdr, sealChunk)
	return &sealer{src: bufio.NewReaderSize(src, sealChunk), aead: aead, hdr: hdr,
		plain: make([]byte, sealChunk), sealed: make([]byte, 0, sealChunk+aead.Overhead())}, nil
}

func (s *sealer) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if !s.sentHdr {
			s.out, s.sentHdr = s.hdr, true
			break
		}
		if s.done {
			return 0, io.EOF
		}
		n, last, err := readChunk(s.src, s.plain)
		if err != nil {
			return 0, err
		}
		s.out = s.aead.Seal(s.sealed[:0], chunkNonce(s.nonce[:], s.i, last), s.plain[:n], s.hdr)
		s.i++
		s.done = last
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// readChunk fills buf from r; last tells that r has nothing after it.
func readChunk(r *bufio.Reader, buf []byte) (int, bool, error) {
	n, err := io.ReadFull(r, buf)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return n, true, nil
	case err != nil:
		return n, false, err
	}
	if _, err := r.Peek(1); err == io.EOF {
		return n, true, nil
	} else if err != nil {
		return n, false, err
	}
	return n, false, nil
}

// isSealed reports whether r (not consumed) starts with the sealed magic.
func isSealed(r *bufio.Reader) bool {
	head, _ := r.Peek(len(sealMagic))
	return bytes.Equal(head, []byte(sealMagic))
}

// unseal copies the plaintext of the sealed object r to w, opening it with
// whichever of keys its header names.
func unseal(w io.Writer, r *bufio.Reader, keys [][]byte) error {
	hdr := make([]byte, headerLen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return fmt.Errorf("%w: header: %w", ErrAuth, err)
	}
	if hdr[len(sealMagic)] != sealVersion || hdr[len(sealMagic)+1] != sealAESGCM {
		return fmt.Errorf("%w: format version %d, cipher %d; this weir reads version %d, cipher %d",
			ErrAuth, hdr[len(sealMagic)], hdr[len(sealMagic)+1], sealVersion, sealAESGCM)
	}
	off := len(sealMagic) + 2
	id := hex.EncodeToString(hdr[off : off+keyIDLen])
	salt := hdr[off+keyIDLen : off+keyIDLen+saltLen]
	chunk := binary.BigEndian.Uint32(hdr[off+keyIDLen+saltLen:])
	if chunk == 0 || chunk > maxSealChunk {
		return fmt.Errorf("%w: chunk size %d", ErrAuth, chunk)
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w (sealed with key id %s)", ErrNoKey, id)
	}
	var key []byte
	ids := make([]string, len(keys))
	for i, k := range keys {
		if ids[i] = KeyID(k); ids[i] == id {
			key = k
			break
		}
	}
	if key == nil {
		return fmt.Errorf("%w: sealed with key id %s; the configured keys are %s", ErrKey, id, strings.Join(ids, ", "))
	}
	aead, err := objectAEAD(key, salt)
	if err != nil {
		return err
	}
	buf := make([]byte, int(chunk)+aead.Overhead())
	var nonce [12]byte
	for i := uint64(0); ; i++ {
		n, last, err := readChunk(r, buf)
		if err != nil {
			return fmt.Errorf("backup: read sealed snapshot: %w", err)
		}
		plain, err := aead.Open(buf[:0], chunkNonce(nonce[:], i, last), buf[:n], hdr)
		if err != nil {
			return fmt.Errorf("%w: chunk %d", ErrAuth, i)
		}
		if _, err := w.Write(plain); err != nil {
			return fmt.Errorf("backup: write snapshot: %w", err)
		}
		if last {
			return nil
		}
	}
}
