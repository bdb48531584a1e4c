package engine

// SinkStats is one secondary's state.
type SinkStats struct {
	Name string
	// CoveredPrefix: every position below it is covered.
	CoveredPrefix uint64
	// Lag: positions below raw's end the sink has not durably received
	// (covered by neither an ack nor a recovery): Queued plus Missing.
	Lag uint64
	// Missing: positions below raw's end neither covered nor queued; only
	// recovery will deliver them.
	Missing uint64
	// Queued: positions waiting in (or being delivered from) the queue.
	Queued uint64
	// Counters since start.
	LiveDelivered, Recovered, LiveDropped, Quarantined, QuarantineShed, QuarantineSkipped, CommitFailures int64
	// Unrecoverable counts positions stepped over because raw no longer
	// keeps them.
	Unrecoverable int64
}

// FanoutStats is the fan-out's state.
type FanoutStats struct {
	RawEnd uint64
	// Backlog is the largest Lag over the secondaries.
	Backlog uint64
	Sinks   []SinkStats
}

// Stats reports the fan-out's state.
func (f *Fanout) Stats() FanoutStats {
	st := FanoutStats{RawEnd: f.end.Load()}
	for _, s := range f.secs {
		cov := s.f.store.Coverage(s.name)
		s.qmu.Lock()
		queued := s.inQ.Count(st.RawEnd)
		all := cov.Clone()
		all.AddSet(&s.inQ)
		s.qmu.Unlock()
		ss := SinkStats{Name: s.name, CoveredPrefix: cov.Prefix(), Lag: cov.Missing(st.RawEnd), Missing: all.Missing(st.RawEnd), Queued: queued,
			LiveDelivered: s.delivered.Load(), Recovered: s.recovered.Load(), LiveDropped: s.dropped.Load(),
			Quarantined: s.quarantined.Load(), QuarantineShed: s.shed.Load(), QuarantineSkipped: s.skipped.Load(),
			CommitFailures: s.failures.Load(), Unrecoverable: s.unrecoverable.Load()}
		st.Backlog = max(st.Backlog, ss.Lag)
		st.Sinks = append(st.Sinks, ss)
	}
	return st
}
