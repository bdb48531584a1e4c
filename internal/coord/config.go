package coord

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrOff is Start's answer in mode 0: coordination is not run. A feature
// that needs it refuses to start with this error wrapped.
var ErrOff = errors.New("coord: coordination is off (mode 0)")

// ErrConfig classifies every Validate error.
var ErrConfig = errors.New("coord: invalid configuration")

// Defaults applied by Start to zero durations.
const (
	DefaultReadyTimeout = 30 * time.Second
	DefaultHandoffGrace = 20 * time.Second
	DefaultSessionTTL   = 10
)

// Config configures one node's coordination.
type Config struct {
	Mode         int           // 0 off; 1, 3, 5 or 7 voting members
	Node         string        // unique, stable; trailing digits are its ordinal
	DataDir      string        // embedded member data
	PeerListen   string        // host:port for raft peers (advertised as is)
	ClientListen string        // host:port for clients (advertised as is)
	Join         []string      // client addresses (host:port) of existing members; empty: bootstrap
	Endpoints    []string      // an external etcd cluster: no embedded server
	ReadyTimeout time.Duration // startup fails after this long without progress
	HandoffGrace time.Duration // how long Close may spend handing off
	SessionTTL   int           // seconds, check-in lease TTL

	// Restore is called when bootstrapping with an empty DataDir; true
	// means it filled DataDir from a backup.
	Restore func(ctx context.Context, dataDir, name, peerURL string) (bool, error)
	// BeforeStop is called by Close on every voting member that still
	// reaches quorum, before it hands off, with a client of that member
	// alone (take a backup). A member that reaches no quorum skips it.
	BeforeStop func(ctx context.Context, cli *clientv3.Client) error

	trace func(event string) // tests: handoff steps in order
}

// Validate checks the configuration; every error wraps ErrConfig.
func (c Config) Validate() error {
	if err := validMode(c.Mode); err != nil {
		return err
	}
	if c.Mode == 0 {
		return nil
	}
	if c.Node == "" || strings.ContainsAny(c.Node, "/ \t\r\n") {
		return fmt.Errorf("%w: node %q must be non-empty, without '/' or spaces", ErrConfig, c.Node)
	}
	if c.ReadyTimeout < 0 || c.HandoffGrace < 0 || c.SessionTTL < 0 {
		return fmt.Errorf("%w: ready timeout, handoff grace and session TTL must not be negative", ErrConfig)
	}
	if len(c.Endpoints) > 0 {
		if len(c.Join) > 0 {
			return fmt.Errorf("%w: join and endpoints exclude each other (endpoints: an external cluster, nothing embedded)", ErrConfig)
		}
		return checkAddrs("endpoints", c.Endpoints)
	}
	if c.DataDir == "" {
		return fmt.Errorf("%w: data dir is required for an embedded member", ErrConfig)
	}
	if err := checkAddrs("peer listen", []string{c.PeerListen}); err != nil {
		return err
	}
	if err := checkAddrs("client listen", []string{c.ClientListen}); err != nil {
		return err
	}
	if c.PeerListen == c.ClientListen {
		return fmt.Errorf("%w: peer and client listen addresses must differ (both %s)", ErrConfig, c.PeerListen)
	}
	return checkAddrs("join", c.Join)
}

func validMode(m int) error {
	switch m {
	case 0, 1, 3, 5, 7:
		return nil
	case 2:
		return fmt.Errorf("%w: mode 2 refused: a quorum of two is two, so losing either node halts writes — worse than mode 1; use 1 or 3", ErrConfig)
	case 4, 6:
		return fmt.Errorf("%w: mode %d refused: an even size adds a voter without adding failure tolerance (it tolerates as many failures as %d); use %d or %d",
			ErrConfig, m, m-1, m-1, m+1)
	default:
		return fmt.Errorf("%w: mode %d: must be 0 (off), 1, 3, 5 or 7", ErrConfig, m)
	}
}

// checkAddrs accepts host:port, or a URL for external endpoints.
func checkAddrs(what string, addrs []string) error {
	for _, a := range addrs {
		hp := a
		if i := strings.Index(a, "://"); i >= 0 {
			hp = a[i+3:]
		}
		host, port, err := net.SplitHostPort(hp)
		if err != nil || host == "" || port == "" {
			return fmt.Errorf("%w: %s address %q: want host:port", ErrConfig, what, a)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.HandoffGrace == 0 {
		c.HandoffGrace = DefaultHandoffGrace
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	return c
}

func (c Config) peerURL() string   { return toURL(c.PeerListen) }
func (c Config) clientURL() string { return toURL(c.ClientListen) }

// toURL makes host:port an http URL; a URL is kept as is.
func toURL(a string) string {
	if strings.Contains(a, "://") {
		return a
	}
	return "http://" + a
}

func toURLs(addrs []string) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, toURL(a))
	}
	return out
}

// ordinal is the number the name ends with, or -1 when it ends with no digit.
func ordinal(name string) int {
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	n, err := strconv.Atoi(name[i:])
	if i == len(name) || err != nil {
		return -1
	}
	return n
}

// lessNode orders names by ordinal; names without one come after all
// numbered ones; ties by name.
func lessNode(a, b string) bool {
	oa, ob := ordinal(a), ordinal(b)
	switch {
	case oa == ob:
		return a < b
	case oa < 0:
		return false
	case ob < 0:
		return true
	}
	return oa < ob
}

func (c Config) tracef(event string) {
	if c.trace != nil {
		c.trace(event)
	}
}
