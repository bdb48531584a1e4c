// Package cli implements weir's subcommands. cmd/weir only calls Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/daemon"
	"github.com/weir-io/weir/internal/flow"
)

const usage = `weir — crash-safe ingestion engine

Usage:
  weir serve [flags]   run the daemon (weir serve --help lists every flag)
  weir push  [flags]   push newline-delimited records from stdin (weir push --help)
  weir inspect [DIR]   describe every segment of a WAB directory (offline, read-only)
  weir verify  [DIR]   check a WAB directory; exit 1 on corruption (offline, read-only)
  weir repair [--cut | --salvage] [DIR]   list damage weir serve refuses; --salvage keeps
                       every valid record around it, --cut cuts it (offline, locks DIR)
  weir deadletter list|show|replay|purge   manage the dead-letter lane
  weir quarantine list|show|replay   inspect and replay quarantined records (ids kept)
  weir status          summary of a running daemon (reads its /metrics, /live, /ready)
  weir validate --config FILE [--connect]   check a configuration as weir serve would,
                       without starting anything; --connect dials every server it names
  weir tap --at POINT  live records at a point of a running daemon's pipeline, as NDJSON
                       (weir tap --help)
  weir dq [flags]      summary of the dq-audit trail (weir dq --help)
  weir kinds [KIND]    the sink and source kinds and their capabilities, or one kind's keys
  weir version         print the version

Documentation: docs/ in the source tree.
`

// Version is set at build time with -ldflags "-X .../internal/cli.Version=…".
var Version = "dev"

// Main runs a subcommand and returns the process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "push":
		return push(args[1:], stdin, stdout, stderr)
	case "inspect":
		return inspect(args[1:], stdout, stderr, false)
	case "verify":
		return inspect(args[1:], stdout, stderr, true)
	case "repair":
		return repair(args[1:], stdout, stderr)
	case "status":
		return status(args[1:], stdout, stderr)
	case "validate":
		return validate(args[1:], stdout, stderr)
	case "tap":
		return tapCmd(args[1:], stdout, stderr)
	case "deadletter":
		return deadletter(args[1:], stdout, stderr)
	case "quarantine":
		return quarantineCmd(args[1:], stdout, stderr)
	case "dq":
		return dq(args[1:], stdout, stderr)
	case "kinds":
		return kinds(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "weir", Version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "weir: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

func serve(args []string, stdout, stderr io.Writer) int {
	boot := slog.New(slog.NewTextHandler(stderr, nil))
	cfg, err := config.Load(args, os.Environ(), boot)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, config.Usage())
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "weir serve: %v\n", err)
		return 2
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "weir serve: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	defer noteHUP(log)()
	if budget, _ := cfg.BudgetLimit(); budget > 0 {
		if l := flow.SetGoMemoryLimit(budget); l > 0 {
			log.Info("Go memory limit set from the memory budget (GOMEMLIMIT unset)", "bytes", l)
		}
	}
	if err := daemon.Run(ctx, cfg, log); err != nil {
		log.Error("weir serve failed", "err", err)
		if errors.Is(err, flow.ErrStuck) {
			return flow.ExitStuck
		}
		return 1
	}
	return 0
}

// noteHUP keeps SIGHUP from ending the daemon (its default action), from
// the start, whatever is configured: what reloads on it (a token file, TLS
// material) watches it too; this only logs that it came. The returned
// function stops watching.
func noteHUP(log *slog.Logger) func() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range hup {
			log.Info("SIGHUP: token files and TLS material are re-read where configured; nothing else reloads")
		}
	}()
	return func() {
		signal.Stop(hup)
		close(hup)
		<-done
	}
}

func newLogger(cfg *config.Config, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return nil, fmt.Errorf("log_level %q: %w", cfg.LogLevel, err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(cfg.LogFormat) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
}
