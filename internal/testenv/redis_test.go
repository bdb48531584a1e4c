package testenv

import (
	"context"
	"testing"
	"time"
)

// TestStartRedis: a private server answers, stops answering when stopped,
// and answers again on the same address when started.
func TestStartRedis(t *testing.T) {
	s := StartRedis(t)
	ping := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return pingRedis(ctx, s.Addr)
	}
	if err := ping(); err != nil {
		t.Fatalf("started: %v", err)
	}
	addr := s.Addr
	s.Stop()
	s.Stop() // twice is fine
	if err := dialable(s.Addr); err == nil {
		t.Fatal("stopped server still accepts connections")
	}
	s.Start()
	if err := ping(); err != nil || s.Addr != addr {
		t.Fatalf("restarted on %s (was %s): %v", s.Addr, addr, err)
	}
}
