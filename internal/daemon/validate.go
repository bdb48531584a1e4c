package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/coord"
	"github.com/weir-io/weir/internal/coord/backup"
	"github.com/weir-io/weir/internal/dedup"
	"github.com/weir-io/weir/internal/pgopen"
)

// Check makes the checks of cfg that Run makes as it starts, beyond
// those of loading the configuration, with the same code and without
// opening, binding or starting anything: the TLS material of tcp_listen
// and of the HTTP door is read and parsed, http.token_file is read, the
// coordination backup keys are parsed and the coordination settings are
// checked as the member checks them. Each problem is a *config.Problem
// naming its key. `weir validate` runs it after config.Validate.
func Check(cfg *config.Config) []error {
	discard := slog.New(slog.DiscardHandler)
	var errs []error
	problem := func(key string, err error) {
		why := strings.TrimPrefix(err.Error(), "tls: ")
		errs = append(errs, config.NewProblem(key, "", why))
	}
	if cfg.TCPListen != "" && cfg.TLSCertFile != "" && cfg.TLSKeyFile != "" && cfg.TLSClientCAFile != "" {
		if _, err := loadTLS(cfg, discard); err != nil {
			problem("tcp_listen", errors.Unwrap(err))
		}
	}
	if cfg.HTTP.Enabled {
		if _, err := httpTokens(cfg, discard); err != nil {
			problem("http.token_file", err)
		}
		if _, err := httpTLS(cfg, discard); err != nil {
			problem("http.tls_*", errors.Unwrap(err))
		}
	}
	if co := cfg.Coordination; co.On() {
		if _, err := backupKeys(co); err != nil {
			key := "coordination.backup_key"
			if co.BackupKeyFile != "" {
				key = "coordination.backup_key_file"
			}
			problem(key, err)
		}
		if err := coordConfig(co).Validate(); err != nil {
			problem("coordination", err)
		}
	}
	return errs
}

// Server is one server a configuration names, as Probe found it.
type Server struct {
	// What says where the configuration names it: "[sink] postgres",
	// `[[secondary]] "pg" quarantine_postgres_url`, "coordination.endpoints".
	What string
	// Err is why it could not be reached or did not accept the
	// configured credentials; nil when it answered.
	Err error
	// Took is how long the probe took.
	Took time.Duration
}

// probe is one server to dial.
type probe struct {
	what string
	run  func(ctx context.Context) error
}

// Probe dials every server cfg names and authenticates, with the code
// the daemon connects with (each kind's component.Sink.Probe or
// component.Source.Probe, pgopen, the dedup store's client, the
// coordination client, the backup store's bucket): the [sink], each
// [[secondary]] and its quarantine table, each [[source]], the dq-audit
// table, each contract's Redis, the external etcd cluster or the members
// a node joins, the coordination backup location. Each is bounded by
// timeout; they run at once. Nothing is written or created on any of
// them. A configuration that names no server gives none.
func Probe(ctx context.Context, cfg *config.Config, timeout time.Duration) []Server {
	var ps []probe
	add := func(what string, run func(ctx context.Context) error) { ps = append(ps, probe{what, run}) }
	sinkProbe := func(what string, s config.SinkConfig) {
		sk, ok := cfg.Components.Sink(s.Type)
		if !ok || s.Settings() == nil {
			return
		}
		if !sk.HasServer() {
			return
		}
		settings := s.Settings()
		add(what+" "+s.Type, func(ctx context.Context) error { return sk.Probe(ctx, settings) })
	}
	sinkProbe("[sink]", cfg.Sink)
	for _, sc := range cfg.Secondaries {
		where := fmt.Sprintf("[[secondary]] %q", sc.Name)
		sinkProbe(where, sc.Sink)
		if url := sc.QuarantinePostgresURL; url != "" {
			add(where+" quarantine_postgres_url", func(ctx context.Context) error { return pgopen.Ping(ctx, url, timeout) })
		}
	}
	if cfg.Role != "recovery" {
		for _, sc := range cfg.Sources {
			sk, ok := cfg.Components.Source(sc.Type)
			if !ok || sc.Settings == nil {
				continue
			}
			if !sk.HasServer() {
				continue
			}
			settings := sc.Settings
			add(fmt.Sprintf("[[source]] %q %s", sc.Name, sc.Type), func(ctx context.Context) error { return sk.Probe(ctx, settings) })
		}
	}
	if url := cfg.DQAudit.PostgresURL; url != "" && len(cfg.Contracts) > 0 {
		add("dq_audit.postgres_url", func(ctx context.Context) error { return pgopen.Ping(ctx, url, timeout) })
	}
	for _, cc := range cfg.Contracts {
		if d := cc.Dedup; d != nil && strings.EqualFold(d.Store, "redis") && d.RedisURL != "" {
			url := d.RedisURL
			add(fmt.Sprintf("[[contract]] %q dedup redis_url", cc.Source), func(ctx context.Context) error {
				return dedup.PingRedis(ctx, dedup.RedisOptions{URL: url, Timeout: timeout})
			})
		}
	}
	if co := cfg.Coordination; co.On() {
		switch {
		case len(co.Endpoints) > 0:
			add("coordination.endpoints", func(ctx context.Context) error { return coord.Ping(ctx, co.Endpoints, nil) })
		case len(co.Join) > 0:
			add("coordination.join", func(ctx context.Context) error { return coord.Ping(ctx, co.Join, nil) })
		}
		if url := co.BackupURL; url != "" {
			add("coordination.backup_url", func(ctx context.Context) error { return backup.Probe(ctx, url) })
		}
	}

	out := make([]Server, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			start := time.Now()
			err := p.run(pctx)
			if err == nil && pctx.Err() != nil {
				err = fmt.Errorf("no answer within %s", timeout)
			}
			out[i] = Server{What: p.what, Err: err, Took: time.Since(start)}
		})
	}
	wg.Wait()
	return out
}
