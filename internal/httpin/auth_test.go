package httpin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func tokenLine(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:]) + " a producer\n"
}

func TestBearerTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	admin := sha256.Sum256([]byte("watcher"))
	file := "# producers\n\n" + tokenLine("s3cret") + hex.EncodeToString(admin[:]) + " ops scopes=admin\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	toks, err := LoadTokens(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, url := start(t, &fakeBackend{}, Options{Tokens: toks})
	tests := []struct {
		name, auth string
		status     int
	}{
		{"no token", "", 401},
		{"wrong token", "Bearer guess", 401},
		{"other scheme", "Basic czNjcmV0", 401},
		{"the token", "Bearer s3cret", 200},
		{"an admin token", "Bearer watcher", 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var kv []string
			if tt.auth != "" {
				kv = []string{"Authorization", tt.auth}
			}
			resp := post(t, url, "x", kv...)
			if tt.status == 200 {
				decodeAnswer(t, resp)
				return
			}
			if tt.status == 403 {
				decodeProblem(t, resp, tt.status, ReasonForbidden)
				return
			}
			decodeProblem(t, resp, tt.status, ReasonUnauthorized)
			if resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("a 401 says how to authenticate")
			}
		})
	}

	// SIGHUP reloads the file: the new token works, the old one no longer.
	if err := os.WriteFile(path, []byte(tokenLine("rotated")), 0o600); err != nil {
		t.Fatal(err)
	}
	hup := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); toks.Run(ctx, hup) }()
	defer func() { cancel(); wg.Wait() }()
	hup <- syscall.SIGHUP
	deadline := time.Now().Add(5 * time.Second)
	for toks.Authorize("rotated", ScopePush) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the token file was not reloaded on SIGHUP")
		}
		time.Sleep(5 * time.Millisecond)
	}
	decodeAnswer(t, post(t, url, "x", "Authorization", "Bearer rotated"))
	decodeProblem(t, post(t, url, "x", "Authorization", "Bearer s3cret"), 401, ReasonUnauthorized)

	// A broken file keeps the tokens in force.
	if err := os.WriteFile(path, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := toks.Reload(); err == nil {
		t.Fatal("a file holding a token instead of its hash was accepted")
	}
	if toks.Authorize("rotated", ScopePush) != nil {
		t.Fatal("a failed reload dropped the tokens in force")
	}
}

// TestTokenScopes: scopes= on a line says what its token may do (push
// alone without it); an unknown scope refuses the file.
func TestTokenScopes(t *testing.T) {
	line := func(tok, rest string) string {
		s := sha256.Sum256([]byte(tok))
		return hex.EncodeToString(s[:]) + rest + "\n"
	}
	path := filepath.Join(t.TempDir(), "tokens")
	file := line("p", "") + line("a", " ops scopes=admin") + line("both", " scopes=push,admin name")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	toks, err := LoadTokens(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tok   string
		scope Scope
		want  error
	}{
		{"p", ScopePush, nil}, {"p", ScopeAdmin, ErrScope},
		{"a", ScopeAdmin, nil}, {"a", ScopePush, ErrScope},
		{"both", ScopePush, nil}, {"both", ScopeAdmin, nil},
		{"nobody", ScopePush, ErrUnknownToken}, {"", ScopeAdmin, ErrUnknownToken},
	} {
		if err := toks.Authorize(tc.tok, tc.scope); !errors.Is(err, tc.want) && err != tc.want {
			t.Errorf("Authorize(%q, %d) = %v, want %v", tc.tok, tc.scope, err, tc.want)
		}
	}
	if err := os.WriteFile(path, []byte(line("x", " scopes=root")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := toks.Reload(); err == nil || !strings.Contains(err.Error(), `scope "root"`) {
		t.Fatalf("an unknown scope: %v", err)
	}
}
