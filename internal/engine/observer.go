package engine

import (
	"time"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// Observer sees what the fan-out does, for metrics. Calls come from the
// fan-out's goroutines and must not block. Embed NopObserver to implement
// only some of it.
type Observer interface {
	// LiveDropped: a batch for the sink found its queue full.
	LiveDropped(sinkName string, records int)
	// Delivered: records durably committed (or rejected) by the sink.
	Delivered(sinkName string, records int, recovery bool)
	// Fresh: a live commit to the sink succeeded at at, with recs.
	Fresh(sinkName string, recs []sink.Record, at time.Time)
	// CommitFailed: a commit to the sink failed and will be retried.
	CommitFailed(sinkName string, err error, recovery bool)
	// Quarantined: rejected records handed to the sink's quarantine lane,
	// once per reason code among them.
	Quarantined(sinkName string, code record.Code, records int, recovery bool)
	// QuarantineShed: quarantine records dropped because the lane was full
	// or its writer failed.
	QuarantineShed(sinkName string, records int)
	// QuarantineSkipped: rejected records recovery did not quarantine
	// (RecoverySkipQuarantine).
	QuarantineSkipped(sinkName string, records int)
	// Coverage: the sink's contiguous covered prefix, how many positions
	// below raw's end it has not durably received (lag: queued for live
	// delivery or missing), and how many of those are not even queued
	// (missing: only recovery will deliver them). Reported every flush
	// interval.
	Coverage(sinkName string, prefix, lag, missing uint64)
	// Unrecoverable: positions the sink lacked that raw no longer keeps
	// (sink.PositionsGone): recovery stepped over them, and the sink will
	// never hold their records.
	Unrecoverable(sinkName string, positions uint64)
	// RecoveryBacklog: the largest lag over all secondaries — raw
	// positions the furthest-behind one has not durably received; 0 when
	// every secondary holds all of raw. Reported every flush interval.
	RecoveryBacklog(positions uint64)
	// SecondaryHealth: what the sink's Health answered at a poll (every
	// FanoutOptions.HealthInterval).
	SecondaryHealth(sinkName string, h sink.Health)
	// RecoveryWindows, with FanoutOptions.Claims: the sink's claimable
	// recovery windows below raw's end that hold a gap and that no node
	// holds, and the claims this node holds on the sink's windows.
	// Reported every flush interval.
	RecoveryWindows(sinkName string, unclaimed, held uint64)
}

// NopObserver ignores everything.
type NopObserver struct{}

func (NopObserver) LiveDropped(string, int)                    {}
func (NopObserver) Delivered(string, int, bool)                {}
func (NopObserver) Fresh(string, []sink.Record, time.Time)     {}
func (NopObserver) CommitFailed(string, error, bool)           {}
func (NopObserver) Quarantined(string, record.Code, int, bool) {}
func (NopObserver) QuarantineShed(string, int)                 {}
func (NopObserver) QuarantineSkipped(string, int)              {}
func (NopObserver) Coverage(string, uint64, uint64, uint64)    {}
func (NopObserver) Unrecoverable(string, uint64)               {}
func (NopObserver) RecoveryBacklog(uint64)                     {}
func (NopObserver) SecondaryHealth(string, sink.Health)        {}
func (NopObserver) RecoveryWindows(string, uint64, uint64)     {}
