package config

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/weir-io/weir/internal/config/setting"
)

// The coordination tier's defaults (docs/coordination.md).
const (
	DefaultCoordDirName        = "coordination" // under data_dir
	DefaultCoordPeerListen     = "127.0.0.1:2380"
	DefaultCoordClientListen   = "127.0.0.1:2379"
	DefaultCoordBackupInterval = 5 * time.Minute
	DefaultCoordBackupKeep     = 5
	DefaultCoordReadyTimeout   = 30 * time.Second
	DefaultCoordHandoffGrace   = 20 * time.Second
	DefaultCoordSessionTTL     = 10 * time.Second
	DefaultCoordLeaseTTL       = 10 * time.Second
	DefaultCoordClaimPositions = 65536
)

// CoordinationConfig is [coordination]: the etcd cluster weir's nodes
// share for membership, roles and recovery leases — embedded in the
// weir process (mode 1, 3, 5 or 7 members) or an external cluster
// (endpoints). Mode 0 turns it off.
type CoordinationConfig struct {
	Mode           int           // coordination.mode: 0, 1, 3, 5 or 7
	Node           string        // coordination.node; "" is the host name
	DataDir        string        // coordination.data_dir
	PeerListen     string        // coordination.peer_listen
	ClientListen   string        // coordination.client_listen
	Join           []string      // coordination.join
	Endpoints      []string      // coordination.endpoints
	BackupURL      string        // coordination.backup_url
	BackupKeyFile  string        // coordination.backup_key_file
	BackupKey      string        // coordination.backup_key
	BackupInterval time.Duration // coordination.backup_interval
	BackupKeep     int           // coordination.backup_keep
	ReadyTimeout   time.Duration // coordination.ready_timeout
	HandoffGrace   time.Duration // coordination.handoff_grace
	SessionTTL     time.Duration // coordination.session_ttl
	RecoveryLeases bool          // coordination.recovery_leases
	LeaseTTL       time.Duration // coordination.lease_ttl
	ClaimPositions int           // coordination.claim_positions
}

// On reports whether the node takes part in a coordination cluster.
func (c CoordinationConfig) On() bool { return c.Mode != 0 }

type coordPartial struct {
	Mode, BackupKeep, ClaimPositions                   *int
	Node, DataDir, PeerListen, ClientListen, BackupURL *string
	BackupKeyFile, BackupKey                           *string
	Join, Endpoints                                    *[]string
	BackupInterval, ReadyTimeout, HandoffGrace         *time.Duration
	SessionTTL, LeaseTTL                               *time.Duration
	RecoveryLeases                                     *bool
}

// coordKnobs are [coordination]'s settings, in documentation order.
func coordKnobs() []knob {
	type cp = coordPartial
	type cc = CoordinationConfig
	str := func(f func(*cp) **string, o func(*cc) *string) (func(*partial) **string, func(*Config) *string) {
		return func(p *partial) **string { return f(&p.coord) }, func(c *Config) *string { return o(&c.Coordination) }
	}
	dur := func(key string, def, lo, hi time.Duration, help string, f func(*cp) **time.Duration, o func(*cc) *time.Duration) knob {
		return durationKnob(key, def, lo, hi, help, func(p *partial) **time.Duration { return f(&p.coord) },
			func(c *Config) *time.Duration { return o(&c.Coordination) })
	}
	list := func(key, help string, f func(*cp) **[]string, o func(*cc) *[]string) knob {
		return listKnob(key, "host:port addresses", help, checkHostPort,
			func(p *partial) **[]string { return f(&p.coord) }, func(c *Config) *[]string { return o(&c.Coordination) })
	}
	nodeF, nodeO := str(func(p *cp) **string { return &p.Node }, func(c *cc) *string { return &c.Node })
	dirF, dirO := str(func(p *cp) **string { return &p.DataDir }, func(c *cc) *string { return &c.DataDir })
	peerF, peerO := str(func(p *cp) **string { return &p.PeerListen }, func(c *cc) *string { return &c.PeerListen })
	cliF, cliO := str(func(p *cp) **string { return &p.ClientListen }, func(c *cc) *string { return &c.ClientListen })
	bkF, bkO := str(func(p *cp) **string { return &p.BackupURL }, func(c *cc) *string { return &c.BackupURL })
	kfF, kfO := str(func(p *cp) **string { return &p.BackupKeyFile }, func(c *cc) *string { return &c.BackupKeyFile })
	keyF, keyO := str(func(p *cp) **string { return &p.BackupKey }, func(c *cc) *string { return &c.BackupKey })
	return []knob{
		intKnob("coordination.mode", 0, 0, 7, "Members of the coordination cluster (etcd): 0 turns coordination off; 1, 3, 5 or 7 voting members, embedded in weir nodes (or an external cluster, coordination.endpoints). Even sizes are refused: 2 halts on losing either member.",
			func(p *partial) **int { return &p.coord.Mode }, func(c *Config) *int { return &c.Coordination.Mode }),
		newKnob(spec[string]{key: "coordination.node", typ: setting.Text("a unique, stable name; trailing digits are its ordinal", checkNodeName), def: "", defText: "the host name",
			help: "This node's name in the cluster; the lowest ordinal (weir-0 before weir-1) takes a quorum role first.", field: nodeF, out: nodeO}),
		pathKnob("coordination.data_dir", "", "<data_dir>/"+DefaultCoordDirName, "Directory of the embedded etcd member's data.", dirF, dirO),
		newKnob(spec[string]{key: "coordination.peer_listen", typ: setting.Address(), def: DefaultCoordPeerListen,
			help: "host:port the embedded member listens on for its peers (and advertises to them).", field: peerF, out: peerO}),
		newKnob(spec[string]{key: "coordination.client_listen", typ: setting.Address(), def: DefaultCoordClientListen,
			help: "host:port the embedded member serves etcd clients on (and advertises).", field: cliF, out: cliO}),
		list("coordination.join", "Client addresses of existing members to check in with; empty bootstraps a new cluster (or restarts a member from coordination.data_dir).",
			func(p *cp) **[]string { return &p.Join }, func(c *cc) *[]string { return &c.Join }),
		list("coordination.endpoints", "An external etcd cluster's client addresses: no embedded member; the same client code.",
			func(p *cp) **[]string { return &p.Endpoints }, func(c *cc) *[]string { return &c.Endpoints }),
		newKnob(spec[string]{key: "coordination.backup_url", typ: setting.Secret("file:///path or s3://bucket/prefix?region=…&endpoint=…"), def: "",
			help: "Object storage for snapshots of the coordination store: taken every coordination.backup_interval by the leader and by every member that stops gracefully while it reaches quorum; restored when a cluster bootstraps with no data. Empty: no backups.", field: bkF, out: bkO}),
		optPathKnob("coordination.backup_key_file", "a file of 32-byte keys, 64 hex digits or base64 each, one a line", "Encrypts coordination backups (AES-256-GCM): the first key seals new snapshots, every key listed opens old ones (rotation: put the new key first, keep the old ones until their snapshots are gone). With a key set, a plain snapshot is refused at restore; without one, an encrypted snapshot is.",
			kfF, kfO),
		newKnob(spec[string]{key: "coordination.backup_key", typ: setting.Secret("32-byte keys, 64 hex digits or base64 each, separated by commas"), def: "",
			help: "The keys of coordination.backup_key_file given inline (usually as the environment variable); set one of the two.", field: keyF, out: keyO}),
		dur("coordination.backup_interval", DefaultCoordBackupInterval, time.Second, 24*time.Hour, "How often the leader snapshots the coordination store to coordination.backup_url; losing a mode-1 node costs at most this much coordination state.",
			func(p *cp) **time.Duration { return &p.BackupInterval }, func(c *cc) *time.Duration { return &c.BackupInterval }),
		intKnob("coordination.backup_keep", DefaultCoordBackupKeep, 1, 1000, "Snapshots kept in coordination.backup_url; older ones are deleted after a successful backup.",
			func(p *partial) **int { return &p.coord.BackupKeep }, func(c *Config) *int { return &c.Coordination.BackupKeep }),
		dur("coordination.ready_timeout", DefaultCoordReadyTimeout, time.Second, time.Hour, "Start fails when the embedded member makes no progress (raft term, index, reachable peers) for this long — never hangs on a stale data directory.",
			func(p *cp) **time.Duration { return &p.ReadyTimeout }, func(c *cc) *time.Duration { return &c.ReadyTimeout }),
		dur("coordination.handoff_grace", DefaultCoordHandoffGrace, time.Second, time.Hour, "How long a stopping quorum member may spend moving leadership away and handing its seat to a replacement.",
			func(p *cp) **time.Duration { return &p.HandoffGrace }, func(c *cc) *time.Duration { return &c.HandoffGrace }),
		dur("coordination.session_ttl", DefaultCoordSessionTTL, 2*time.Second, 10*time.Minute, "Lease of a node's check-in: a node silent this long counts as gone.",
			func(p *cp) **time.Duration { return &p.SessionTTL }, func(c *cc) *time.Duration { return &c.SessionTTL }),
		boolKnob("coordination.recovery_leases", false, "Claim recovery windows by lease, so that several nodes sharing one raw never replay the same window at once; needs coordination.mode 1 or more.",
			func(p *partial) **bool { return &p.coord.RecoveryLeases }, func(c *Config) *bool { return &c.Coordination.RecoveryLeases }),
		dur("coordination.lease_ttl", DefaultCoordLeaseTTL, 2*time.Second, 10*time.Minute, "Lease of a claimed recovery window: a dead node's windows are claimed again after this long, or up to about 3 s (two to three election timeouts) longer when the coordination leader changes meanwhile.",
			func(p *cp) **time.Duration { return &p.LeaseTTL }, func(c *cc) *time.Duration { return &c.LeaseTTL }),
		intKnob("coordination.claim_positions", DefaultCoordClaimPositions, 1024, 1<<30, "Raw positions in one claimable recovery window (the unit of work nodes share).",
			func(p *partial) **int { return &p.coord.ClaimPositions }, func(c *Config) *int { return &c.Coordination.ClaimPositions }),
	}
}

// checkHostPort accepts host:port.
func checkHostPort(v string) error {
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		return fmt.Errorf("%q is not host:port", v)
	}
	return nil
}

// checkNodeName accepts a name etcd can use as a member name.
func checkNodeName(v string) string {
	if strings.ContainsAny(v, " \t\n=,/") {
		return "must not contain spaces, '=', ',' or '/'"
	}
	return ""
}

// validateCoordination checks the rules that span [coordination]'s keys
// and fills the node name.
func validateCoordination(ks []knob, c *Config) []error {
	co := &c.Coordination
	var errs []error
	switch m := co.Mode; {
	case m == 2:
		errs = append(errs, invalid(knobByKey(ks, "coordination.mode"), "2",
			"is refused: a quorum of two is two, so losing either member halts every write — worse than 1, which keeps serving alone; use 1 or 3"))
	case m%2 == 0 && m != 0:
		errs = append(errs, invalid(knobByKey(ks, "coordination.mode"), fmt.Sprint(m),
			fmt.Sprintf("is refused: an even size adds a voter without adding failure tolerance; use %d or %d", m-1, m+1)))
	}
	if co.RecoveryLeases && !co.On() {
		errs = append(errs, invalid(knobByKey(ks, "coordination.recovery_leases"), "true",
			"needs coordination: set coordination.mode to 1, 3, 5 or 7 (with coordination.endpoints for an external cluster)"))
	}
	if co.On() && len(co.Endpoints) == 0 && co.PeerListen == co.ClientListen {
		errs = append(errs, invalid(knobByKey(ks, "coordination.client_listen"), co.ClientListen, "must differ from coordination.peer_listen"))
	}
	if co.BackupKey != "" && co.BackupKeyFile != "" {
		errs = append(errs, invalid(knobByKey(ks, "coordination.backup_key"), "(set, not shown)", "set either it or coordination.backup_key_file, not both"))
	}
	if co.On() && co.Node == "" {
		if h, err := os.Hostname(); err == nil {
			co.Node = h
		}
	}
	return errs
}
