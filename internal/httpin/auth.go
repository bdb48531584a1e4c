package httpin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// maxTokenFileBytes bounds the token file read.
const maxTokenFileBytes = 1 << 20

// Tokens are the bearer tokens the listener accepts, kept as their
// SHA-256 hashes: the file (http.token_file) holds one hash a line, 64 hex
// digits, optionally followed by words: `scopes=push,admin` says what the
// token may do (push alone when absent), any other word is a name for
// people; blank lines and lines starting with # are skipped.
// `printf %s "$TOKEN" | sha256sum` makes a line. Reload re-reads the file
// (SIGHUP); a file that fails to read or parse keeps the previous set.
type Tokens struct {
	path string
	log  *slog.Logger
	mu   sync.Mutex // serialises reloads
	set  atomic.Pointer[[]tokenEntry]
}

// Scope is what a token may do.
type Scope uint8

const (
	// ScopePush writes records: POST /v1/records, GET /v1/stream.
	ScopePush Scope = 1 << iota
	// ScopeAdmin reads the node: the status page, taps, the profiler.
	ScopeAdmin
)

var scopeNames = map[string]Scope{"push": ScopePush, "admin": ScopeAdmin}

// Authorization failures: a token not in the file (401), or one in it
// without the scope asked for (403).
var (
	ErrUnknownToken = errors.New("the bearer token is not valid")
	ErrScope        = errors.New("the bearer token may not do this")
)

// tokenEntry is one line of the file.
type tokenEntry struct {
	hash   [sha256.Size]byte
	scopes Scope
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
	t.log.Info("bearer tokens loaded", "token_file", t.path, "tokens", len(hashes))
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

// Authorize says whether token may do s: nil, ErrUnknownToken or
// ErrScope. Every stored hash is compared, in constant time, whatever
// matches.
func (t *Tokens) Authorize(token string, s Scope) error {
	sum := sha256.Sum256([]byte(token))
	var scopes Scope
	known := 0
	for _, e := range *t.set.Load() {
		eq := subtle.ConstantTimeCompare(sum[:], e.hash[:])
		known |= eq
		scopes |= e.scopes & Scope(-eq) // the entry's scopes when eq is 1
	}
	switch {
	case known == 0:
		return ErrUnknownToken
	case scopes&s == 0:
		return ErrScope
	}
	return nil
}

// AuthorizeRequest checks r's Authorization: Bearer header for s.
func (t *Tokens) AuthorizeRequest(r *http.Request, s Scope) error {
	h := r.Header.Get("Authorization")
	if h == "" {
		return fmt.Errorf("%w: a bearer token is required (Authorization: Bearer <token>)", ErrUnknownToken)
	}
	tok, ok := bearer(h)
	if !ok {
		return fmt.Errorf("%w: want Authorization: Bearer <token>", ErrUnknownToken)
	}
	return t.Authorize(tok, s)
}

func readTokenFile(path string) ([]tokenEntry, error) {
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
	var out []tokenEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		e := tokenEntry{scopes: ScopePush}
		if len(fields[0]) != 2*sha256.Size {
			return nil, fmt.Errorf("http.token_file %s line %d: want the token's SHA-256 as 64 hex digits, not the token itself", path, n)
		}
		if _, err := hex.Decode(e.hash[:], []byte(fields[0])); err != nil {
			return nil, fmt.Errorf("http.token_file %s line %d: %w", path, n, err)
		}
		for _, f := range fields[1:] {
			list, ok := strings.CutPrefix(f, "scopes=")
			if !ok {
				continue // a name for people
			}
			e.scopes = 0
			for name := range strings.SplitSeq(list, ",") {
				sc, ok := scopeNames[name]
				if !ok {
					return nil, fmt.Errorf("http.token_file %s line %d: scope %q: want push or admin", path, n, name)
				}
				e.scopes |= sc
			}
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("http.token_file %s: %w", path, err)
	}
	return out, nil
}

// errNoCertificate refuses an admin request without a client
// certificate where there are no tokens to show instead.
var errNoCertificate = errors.New("a verified client certificate is required")

// AdminAuth is the admin routes' authentication (the status page, weir
// tap, pprof on the metrics endpoint): the HTTP door's credentials — a
// client certificate verified on the connection (tlsconf's
// OptionalClientConfig: signed by http.tls_client_ca_file, allowed by
// http.tls_allowed_identities), or a token of http.token_file with the
// admin scope, as a bearer token or as the password of HTTP Basic
// authentication (any user name: what a browser sends once it has asked
// for it). It returns ErrUnknownToken, ErrScope (a known token without
// the admin scope) or another error. tokens may be nil (certificates
// only).
func AdminAuth(tokens *Tokens) func(*http.Request) error {
	return func(r *http.Request) error {
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			return nil
		}
		if tokens == nil {
			return errNoCertificate
		}
		if _, pass, ok := r.BasicAuth(); ok {
			return tokens.Authorize(pass, ScopeAdmin)
		}
		return tokens.AuthorizeRequest(r, ScopeAdmin)
	}
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
