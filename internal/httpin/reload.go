package httpin

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/weir-io/weir/internal/tlsconf"
)

// ReloadOnHUP re-reads tokens' file on SIGHUP, and keeps m's TLS material
// fresh (every interval and on SIGHUP), until the returned function is
// called; either may be nil. A listener with a token file or TLS — the
// HTTP door, the Flight source — runs it while it serves.
func ReloadOnHUP(tokens *Tokens, m *tlsconf.Manager, interval time.Duration) (stop func() error) {
	if tokens == nil && m == nil {
		return func() error { return nil }
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var hups []chan os.Signal
	watch := func(run func(hup <-chan os.Signal)) {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		hups = append(hups, hup)
		wg.Add(1)
		go func() { defer wg.Done(); run(hup) }()
	}
	if tokens != nil {
		watch(func(hup <-chan os.Signal) { tokens.Run(ctx, hup) })
	}
	if m != nil {
		watch(func(hup <-chan os.Signal) { m.Run(ctx, interval, hup) })
	}
	return func() error {
		for _, h := range hups {
			signal.Stop(h)
		}
		cancel()
		wg.Wait()
		return nil
	}
}
