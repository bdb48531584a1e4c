package httpin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// maxTokenFileBytes bounds the token file read.
const maxTokenFileBytes = 1 << 20

// Tokens are the bearer tokens the listener accepts, kept as their
// SHA-256 hashes: the file (http.token_file) holds one hash a line, 64 hex
// digits, optionally followed by a space and a name for people; blank
// lines and lines starting with # are skipped. `printf %s "$TOKEN" |
// sha256sum` makes a line. Reload re-reads the file (SIGHUP); a file that
// fails to read or parse keeps the previous set.
type Tokens struct {
	path string
	log  *slog.Logger
	mu   sync.Mutex // serialises reloads
	set  atomic.Pointer[[][sha256.Size]byte]
}

// LoadTokens reads path; an unreadable or malformed file is an error.
func LoadTokens(path string, log *slog.Logger) (*Tokens, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Tokens{path: path, log: log}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload re-reads the file.
func (t *Tokens) Reload() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	hashes, err := readTokenFile(t.path)
	if err != nil {
		return err
	}
	t.set.Store(&hashes)
	t.log.Info("http tokens loaded", "token_file", t.path, "tokens", len(hashes))
	return nil
}

// Run reloads the file whenever hup delivers, until ctx ends.
func (t *Tokens) Run(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := t.Reload(); err != nil {
				t.log.Error("http token file not reloaded; the previous tokens stay in force", "token_file", t.path, "err", err)
			}
		}
	}
}

// Valid reports whether token's hash is in the set. Every stored hash is
// compared, in constant time, whatever matches.
func (t *Tokens) Valid(token string) bool {
	sum := sha256.Sum256([]byte(token))
	ok := 0
	for _, h := range *t.set.Load() {
		ok |= subtle.ConstantTimeCompare(sum[:], h[:])
	}
	return ok == 1
}

func readTokenFile(path string) ([][sha256.Size]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("http.token_file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("http.token_file %s: %w", path, err)
	}
	if len(b) > maxTokenFileBytes {
		return nil, fmt.Errorf("http.token_file %s: larger than %d bytes", path, maxTokenFileBytes)
	}
	var out [][sha256.Size]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		field, _, _ := strings.Cut(line, " ")
		var h [sha256.Size]byte
		if len(field) != 2*sha256.Size {
			return nil, fmt.Errorf("http.token_file %s line %d: want the token's SHA-256 as 64 hex digits, not the token itself", path, n)
		}
		if _, err := hex.Decode(h[:], []byte(field)); err != nil {
			return nil, fmt.Errorf("http.token_file %s line %d: %w", path, n, err)
		}
		out = append(out, h)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("http.token_file %s: %w", path, err)
	}
	return out, nil
}

// bearer returns the token of an Authorization: Bearer header.
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}
