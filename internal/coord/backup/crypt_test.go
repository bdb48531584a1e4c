package backup

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/coord/etcdtest"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, keyLen)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestParseKeys(t *testing.T) {
	a, b := newKey(t), newKey(t)
	keys, err := ParseKeys("# new key first\n" + hex.EncodeToString(a) + "\n  " + base64.StdEncoding.EncodeToString(b) + "\n")
	if err != nil || len(keys) != 2 || !bytes.Equal(keys[0], a) || !bytes.Equal(keys[1], b) {
		t.Fatalf("ParseKeys = %d keys, %v", len(keys), err)
	}
	if keys, err := ParseKeys(hex.EncodeToString(a) + "," + hex.EncodeToString(b)); err != nil || len(keys) != 2 {
		t.Fatalf("comma-separated: %d keys, %v", len(keys), err)
	}
	for _, bad := range []string{"", "# only a comment\n", "abcd", hex.EncodeToString(a[:16])} {
		if _, err := ParseKeys(bad); !errors.Is(err, ErrKey) {
			t.Errorf("ParseKeys(%q) = %v, want ErrKey", bad, err)
		}
	}
}

func seal(t *testing.T, plain, key []byte) []byte {
	t.Helper()
	s, err := newSealer(bytes.NewReader(plain), key)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := out.ReadFrom(s); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func unsealBytes(sealed []byte, keys ...[]byte) ([]byte, error) {
	var out bytes.Buffer
	err := unseal(&out, bufio.NewReader(bytes.NewReader(sealed)), keys)
	return out.Bytes(), err
}

// Sealing round-trips at every size around the chunk boundaries, and any
// change to the sealed bytes — a flipped bit, a cut at a chunk boundary,
// chunks swapped, a chunk dropped — is refused.
func TestSealChunks(t *testing.T) {
	key := newKey(t)
	step := sealChunk + 16
	for _, n := range []int{0, 1, sealChunk - 1, sealChunk, sealChunk + 1, 3 * sealChunk, 3*sealChunk + 7} {
		plain := make([]byte, n)
		_, _ = rand.Read(plain)
		sealed := seal(t, plain, key)
		got, err := unsealBytes(sealed, key)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("%d bytes: unseal = %d bytes, %v", n, len(got), err)
		}
		if bytes.Contains(sealed, plain[:min(n, 64)]) && n >= 16 {
			t.Fatalf("%d bytes: plaintext visible in the sealed object", n)
		}
		tampered := map[string][]byte{
			"bit flipped":   flip(sealed, len(sealed)-1),
			"header bit":    flip(sealed, headerLen-5),
			"last byte cut": sealed[:len(sealed)-1],
		}
		if n > sealChunk {
			tampered["cut at a chunk boundary"] = sealed[:headerLen+step]
			tampered["chunk dropped"] = append(bytes.Clone(sealed[:headerLen]), sealed[headerLen+step:]...)
		}
		if n >= 3*sealChunk {
			sw := bytes.Clone(sealed)
			copy(sw[headerLen:], sealed[headerLen+step:headerLen+2*step])
			copy(sw[headerLen+step:], sealed[headerLen:headerLen+step])
			tampered["chunks swapped"] = sw
		}
		for what, b := range tampered {
			if _, err := unsealBytes(b, key); !errors.Is(err, ErrAuth) {
				t.Errorf("%d bytes, %s: unseal = %v, want ErrAuth", n, what, err)
			}
		}
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x40
	return c
}

// An encrypted backup restores with its key and holds no key or value in
// the clear.
func TestEncryptedRoundTrip(t *testing.T) {
	s, _ := openStore(t, fileURL(t))
	s.Keys = [][]byte{newKey(t)}
	roundTrip(t, s)
	info, _, err := s.Latest(testCtx(t))
	if err != nil || !strings.HasSuffix(info.Key, ".db.enc") || info.KeyID != KeyID(s.Keys[0]) {
		t.Fatalf("latest %+v, %v: want a sealed snapshot under the key's id", info, err)
	}
	raw, err := s.bucket.ReadAll(testCtx(t), info.Key)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(raw, []byte(sealMagic)) || bytes.Contains(raw, []byte("k/000")) {
		t.Fatal("snapshot object is not sealed")
	}
}

// restoreErr saves a seeded store with s's keys, lets mutate change the
// stored object, and restores with keys.
func restoreErr(t *testing.T, s *Store, keys [][]byte, mutate func([]byte) []byte) error {
	t.Helper()
	ctx := testCtx(t)
	cli := etcdtest.Start(t).Client(t)
	seed(t, cli, 20, "a")
	info, err := s.Save(ctx, cli, "weir-0")
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		raw, err := s.bucket.ReadAll(ctx, info.Key)
		if err != nil {
			t.Fatal(err)
		}
		raw = mutate(raw)
		sum := sha256.Sum256(raw)
		info.Bytes, info.SHA256 = int64(len(raw)), hex.EncodeToString(sum[:])
		ptr, _ := json.Marshal(info)
		if err := s.bucket.WriteAll(ctx, info.Key, raw, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.bucket.WriteAll(ctx, latestKey, ptr, nil); err != nil {
			t.Fatal(err)
		}
	}
	s.Keys = keys
	dir := filepath.Join(t.TempDir(), "member-data")
	_, err = s.RestoreHook()(ctx, dir, "weir-1", freePeer(t))
	return err
}

func TestRestoreRefusesWrongKey(t *testing.T) {
	s, _ := openStore(t, fileURL(t))
	s.Keys = [][]byte{newKey(t)}
	err := restoreErr(t, s, [][]byte{newKey(t)}, nil)
	if !errors.Is(err, ErrKey) || !strings.Contains(err.Error(), KeyID(s.Keys[0])) {
		t.Fatalf("restore with another key: %v, want ErrKey naming the configured key id", err)
	}
	t.Log(err)
}

func TestRestoreRefusesWithoutKey(t *testing.T) {
	s, _ := openStore(t, fileURL(t))
	s.Keys = [][]byte{newKey(t)}
	if err := restoreErr(t, s, nil, nil); !errors.Is(err, ErrNoKey) {
		t.Fatalf("restore with no key: %v, want ErrNoKey", err)
	}
}

// A sealed object changed after its upload — its pointer rewritten to
// match, so the checksum passes — is refused by authentication.
func TestRestoreRefusesTampered(t *testing.T) {
	s, _ := openStore(t, fileURL(t))
	key := newKey(t)
	s.Keys = [][]byte{key}
	err := restoreErr(t, s, [][]byte{key}, func(b []byte) []byte { return flip(b, len(b)/2) })
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("restore of a tampered object: %v, want ErrAuth", err)
	}
	t.Log(err)
}

// Key rotation: with the new key first and the old one after, the old
// backup restores and the next backup is sealed with the new key.
func TestKeyRotation(t *testing.T) {
	s, _ := openStore(t, fileURL(t))
	old, cur := newKey(t), newKey(t)
	s.Keys = [][]byte{old}
	if err := restoreErr(t, s, [][]byte{cur, old}, nil); err != nil {
		t.Fatalf("restore of an old-key backup with [new, old]: %v", err)
	}
	info, err := s.Save(testCtx(t), etcdtest.Start(t).Client(t), "weir-0")
	if err != nil || info.KeyID != KeyID(cur) {
		t.Fatalf("save after rotation: %+v, %v; want key id %s", info, err, KeyID(cur))
	}
}

// A plain backup restores without a key and is refused once a key is set.
func TestPlainBackupWithKey(t *testing.T) {
	s, _ := openStore(t, fileURL(t))
	if err := restoreErr(t, s, [][]byte{newKey(t)}, nil); !errors.Is(err, ErrPlain) {
		t.Fatalf("plain backup restored with a key set: %v, want ErrPlain", err)
	}
}

func TestEncryptedS3RoundTrip(t *testing.T) {
	rawURL, _ := fakeS3(t, "sealed")
	s, _ := openStore(t, rawURL)
	s.Keys = [][]byte{newKey(t)}
	roundTrip(t, s)
}
