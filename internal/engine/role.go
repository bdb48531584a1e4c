package engine

import "fmt"

// Role is what a node does with a topology.
type Role int

const (
	// RoleBoth delivers live and recovers lagging secondaries (default).
	RoleBoth Role = iota
	// RoleIngest writes raw and delivers live to the secondaries; it runs
	// no recovery loop (a recovery node fills the gaps).
	RoleIngest
	// RoleRecovery only replays raw into lagging secondaries; Commit still
	// writes raw but hands nothing to the secondaries.
	RoleRecovery
)

func (r Role) String() string {
	switch r {
	case RoleBoth:
		return "both"
	case RoleIngest:
		return "ingest"
	case RoleRecovery:
		return "recovery"
	}
	return fmt.Sprintf("role(%d)", int(r))
}

// ParseRole reads "both", "ingest" or "recovery" ("" is both).
func ParseRole(s string) (Role, error) {
	switch s {
	case "", "both":
		return RoleBoth, nil
	case "ingest":
		return RoleIngest, nil
	case "recovery":
		return RoleRecovery, nil
	}
	return 0, fmt.Errorf("engine: role %q: want both, ingest or recovery", s)
}

func (r Role) live() bool     { return r == RoleBoth || r == RoleIngest }
func (r Role) recovers() bool { return r == RoleBoth || r == RoleRecovery }

// RecoveryMode says what recovery does with records a secondary rejects.
type RecoveryMode int

const (
	// RecoveryRehydrate sends them to the sink's quarantine lane, so that
	// the quarantine view is complete for recovered windows (default).
	RecoveryRehydrate RecoveryMode = iota
	// RecoverySkipQuarantine does not: clean records are recovered as
	// usual, rejected ones are only counted (Observer.QuarantineSkipped).
	// The quarantine view then stays incomplete for the windows recovered
	// this way; the records themselves remain in raw.
	RecoverySkipQuarantine
)

func (m RecoveryMode) String() string {
	if m == RecoverySkipQuarantine {
		return "skip-quarantine"
	}
	return "rehydrate"
}

// ParseRecoveryMode reads "rehydrate" or "skip-quarantine" ("" is
// rehydrate).
func ParseRecoveryMode(s string) (RecoveryMode, error) {
	switch s {
	case "", "rehydrate":
		return RecoveryRehydrate, nil
	case "skip-quarantine":
		return RecoverySkipQuarantine, nil
	}
	return 0, fmt.Errorf("engine: recovery mode %q: want rehydrate or skip-quarantine", s)
}
