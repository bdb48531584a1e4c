package statuspage

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/weir-io/weir/internal/readout"
)

// Snapshot is what the page shows: the node's state at one moment, with
// rates over the last few seconds. /status.json serves it as is.
type Snapshot struct {
	At           time.Time      `json:"at"`
	Window       float64        `json:"window_seconds"` // of the rates and latencies; 0 before a second reading
	Node         NodeView       `json:"node"`
	Health       HealthView     `json:"health"`
	Flow         FlowView       `json:"flow"`
	Sources      []SourceView   `json:"sources"`
	Latency      LatencyView    `json:"latency"`
	Buffer       BufferView     `json:"buffer"`
	Sinks        []SinkView     `json:"sinks"`
	Quarantine   QuarantineView `json:"quarantine"`
	Codes        []CodeView     `json:"codes"`
	Coordination CoordView      `json:"coordination"`
	Logs         LogsView       `json:"logs"`
	Timeline     Timeline       `json:"timeline"`
	// Levels are the worst of the rows of the sources and of the sinks.
	Levels struct {
		Sources string `json:"sources"`
		Sinks   string `json:"sinks"`
	} `json:"levels"`
}

// Levels: how a figure or a row is to be read. The page colours by it.
const (
	levelOK   = "ok"
	levelWarn = "warn"
	levelBad  = "bad"
	levelIdle = "idle" // not known yet, or nothing to say
)

// NodeView says which node this is.
type NodeView struct {
	Host       string  `json:"host"`
	Version    string  `json:"version"`
	Revision   string  `json:"revision"`
	GoVersion  string  `json:"go_version"`
	Uptime     float64 `json:"uptime_seconds"`
	ConfigFile string  `json:"config_file"`
}

// HealthView is /live and /ready, with their reasons.
type HealthView struct {
	Live      bool   `json:"live"`
	Ready     bool   `json:"ready"`
	LiveText  string `json:"live_text"`  // "live", or why not
	ReadyText string `json:"ready_text"` // "ready", or why not
	Degraded  string `json:"degraded"`   // why a ready node is degraded; ""
	Level     string `json:"level"`
}

// FlowView is the backpressure state and the memory budget.
type FlowView struct {
	State      string  `json:"state"`
	Level      string  `json:"level"`
	Stuck      string  `json:"stuck_stage"`
	Budget     float64 `json:"budget_bytes"`
	InUse      float64 `json:"in_use_bytes"`
	InUseRatio float64 `json:"in_use_ratio"` // -1 without a budget
	Grantable  float64 `json:"grantable_bytes"`
	Waiting    float64 `json:"waiting_bytes"`
	SinkBound  bool    `json:"sink_bound"`
}

// SourceView is one source's ingest.
type SourceView struct {
	Name    string  `json:"name"`
	Records float64 `json:"records_per_second"` // -1: not known yet
	Bytes   float64 `json:"bytes_per_second"`   // -1: not known, or not measured for this source
	Status  string  `json:"status"`
	Level   string  `json:"level"`
}

// LatencyView is the time to an answer, over the window.
type LatencyView struct {
	// HTTP door: arrival to answer (for a 200, every record's tier
	// promise held); NaN-free: -1 when nothing was answered in the window.
	HTTPP50 float64 `json:"http_p50_seconds"`
	HTTPP99 float64 `json:"http_p99_seconds"`
	// The fdatasync a Durable acknowledgement waits for.
	SyncP50 float64 `json:"fdatasync_p50_seconds"`
	SyncP99 float64 `json:"fdatasync_p99_seconds"`
}

// BufferView is the write-ahead buffer's backlog and the drain.
type BufferView struct {
	Segments  float64 `json:"segments"`
	Bytes     float64 `json:"bytes"`
	OldestAge float64 `json:"oldest_age_seconds"` // -1: nothing waiting, or not known
	Written   float64 `json:"written_bytes_per_second"`
	Delivered float64 `json:"delivered_bytes_per_second"`
	Drain     string  `json:"drain_state"`
	Shards    string  `json:"shards"` // "4, none failed" or which failed
	// Damaged are sealed segments the drain found damaged and set aside
	// on disk; -1 while the daemon does not export the gauge.
	Damaged float64 `json:"damaged_segments"`
	Level   string  `json:"level"`
}

// SinkView is one row of the sinks table: the [sink] or a [[secondary]].
type SinkView struct {
	Name      string  `json:"name"`
	Role      string  `json:"role"`
	Health    string  `json:"health"`
	Commits   float64 `json:"commits_per_second"` // -1: not known (secondaries count records only)
	Records   float64 `json:"records_per_second"`
	Failures  float64 `json:"failures_per_second"`
	Lag       string  `json:"lag"`
	Coverage  string  `json:"coverage"`
	Recovery  string  `json:"recovery"`
	LastError string  `json:"last_error"`
	Level     string  `json:"level"`
}

// QuarantineView is the rejection lanes' fill.
type QuarantineView struct {
	DeadLetterFiles float64 `json:"dead_letter_files"`
	DeadLetterBytes float64 `json:"dead_letter_bytes"`
	DeadLetterMax   float64 `json:"dead_letter_max_bytes"` // 0: no cap exported
	DeadLetterFill  float64 `json:"dead_letter_fill"`      // -1 without a cap
	Shed            float64 `json:"shed_records"`          // secondaries' quarantine records shed
	RecoveryBacklog float64 `json:"recovery_backlog"`      // -1 without secondaries
	Level           string  `json:"level"`
}

// CodeView is one rejection reason code: records handed to any lane.
type CodeView struct {
	Code    string  `json:"code"`
	Records float64 `json:"records"`
	Rate    float64 `json:"records_per_second"`
	Level   string  `json:"level"`
}

// CoordView is the coordination tier as this node sees it.
type CoordView struct {
	On         bool    `json:"on"`
	Role       string  `json:"role"`
	Members    float64 `json:"members"`
	Learners   float64 `json:"learners"`
	Leader     string  `json:"leader"` // the member the list names leader; "" when none
	List       string  `json:"member_list"`
	LeasesHeld float64 `json:"leases_held"`
	Level      string  `json:"level"`
}

// LogsView are the last warnings and errors, newest first.
type LogsView struct {
	Warnings float64    `json:"warnings"`
	Errors   float64    `json:"errors"`
	Entries  []LogEntry `json:"entries"`
}

// Timeline is the flow state over the last minutes: runs of one state,
// and the budget's fill, each at seconds relative to the snapshot (<= 0).
type Timeline struct {
	Span   float64      `json:"span_seconds"`
	Runs   []Run        `json:"runs"`
	Budget [][2]float64 `json:"budget"` // [seconds, in-use ratio]
}

// Run is a stretch of one flow state.
type Run struct {
	State string  `json:"state"`
	From  float64 `json:"from"`
	To    float64 `json:"to"`
}

// reading is one gather of the registry.
type reading struct {
	at  time.Time
	set readout.Set
}

// healthState is metrics.Health's answers at one moment.
type healthState struct {
	live, ready error
	degraded    string
}

// point is one timeline sample.
type point struct {
	at     time.Time
	state  string
	budget float64 // in-use ratio, -1 without a budget
}

// inputs are what a snapshot is built from.
type inputs struct {
	info Info
	now  reading
	base reading // an earlier reading, for rates; zero before there is one
	// recent is the newest reading at least recentSpan before now (zero
	// when none): what a sink did in the last seconds.
	recent   reading
	health   healthState
	logs     *LogRing
	points   []point
	timeline time.Duration
}

// window is what rates are computed over.
type window struct {
	now, base readout.Set
	dt        float64
}

// rate is the per-second increase of the series of name matching match;
// -1 before there is a window. A counter that went down (a reset) counts
// from zero.
func (w window) rate(name string, match map[string]string) float64 {
	if w.dt <= 0 {
		return -1
	}
	d := w.now.Sum(name, match) - w.base.Sum(name, match)
	if d < 0 {
		d = w.now.Sum(name, match)
	}
	return d / w.dt
}

// histRate is the per-second increase of the observations of a
// histogram; -1 before there is a window.
func (w window) histRate(name string, match map[string]string) float64 {
	if w.dt <= 0 {
		return -1
	}
	h, _ := w.now.Histogram(name, match)
	old, _ := w.base.Histogram(name, match)
	return h.Since(old).Count / w.dt
}

// quantile is the q-quantile of a histogram's observations in the
// window (over all time before there is a window); -1 when none.
func (w window) quantile(name string, match map[string]string, q float64) float64 {
	h, ok := w.now.Histogram(name, match)
	if !ok {
		return -1
	}
	if w.dt > 0 {
		old, _ := w.base.Histogram(name, match)
		h = h.Since(old)
	}
	v := h.Quantile(q)
	if math.IsNaN(v) {
		return -1
	}
	return v
}

func one(v float64) bool { return v == 1 }

// recentSpan is the least span of the recent window: a sink whose
// commits all failed over it is failing.
const recentSpan = time.Second

// windowOf is the window from an earlier reading to now (no window when
// there is none).
func windowOf(now, then reading) window {
	w := window{now: now.set}
	if !then.at.IsZero() && now.at.After(then.at) {
		w.base, w.dt = then.set, now.at.Sub(then.at).Seconds()
	}
	return w
}

// build makes the snapshot of in.
func build(in inputs) Snapshot {
	m := in.now.set
	w := windowOf(in.now, in.base)
	s := Snapshot{At: in.now.at, Window: w.dt}
	s.Node = nodeView(in, m)
	s.Health = healthView(in.health)
	s.Flow = flowView(m)
	s.Sources = sourceViews(m, w, s.Flow.State)
	s.Latency = LatencyView{
		HTTPP50: w.quantile("weir_http_request_duration_seconds", map[string]string{"route": "/v1/records"}, 0.5),
		HTTPP99: w.quantile("weir_http_request_duration_seconds", map[string]string{"route": "/v1/records"}, 0.99),
		SyncP50: w.quantile("weir_fdatasync_duration_seconds", nil, 0.5),
		SyncP99: w.quantile("weir_fdatasync_duration_seconds", nil, 0.99),
	}
	s.Buffer = bufferView(m, w, in.now.at)
	s.Sinks = sinkViews(in, m, w, windowOf(in.now, in.recent), s.Buffer)
	s.Quarantine = quarantineView(m, s.Buffer.Drain)
	s.Codes = codeViews(m, w)
	s.Coordination = coordView(m)
	s.Logs = logsView(in.logs)
	s.Timeline = timeline(in.points, in.now.at, in.timeline)
	s.Levels.Sources, s.Levels.Sinks = levelIdle, levelIdle
	for _, v := range s.Sources {
		s.Levels.Sources = worst(s.Levels.Sources, v.Level)
	}
	for _, v := range s.Sinks {
		s.Levels.Sinks = worst(s.Levels.Sinks, v.Level)
	}
	return s
}

func nodeView(in inputs, m readout.Set) NodeView {
	n := NodeView{Host: in.info.Host, ConfigFile: in.info.ConfigFile, Version: readout.Dash, Revision: readout.Dash, GoVersion: readout.Dash}
	if n.ConfigFile == "" {
		n.ConfigFile = "none (flags, environment and defaults)"
	}
	for _, b := range m.Series("weir_build_info") {
		n.Version, n.Revision, n.GoVersion = b.Labels["version"], b.Labels["revision"], b.Labels["goversion"]
	}
	if !in.info.Started.IsZero() {
		n.Uptime = max(in.now.at.Sub(in.info.Started).Seconds(), 0)
	}
	return n
}

func healthView(h healthState) HealthView {
	v := HealthView{Live: h.live == nil, Ready: h.ready == nil, Degraded: h.degraded, LiveText: "live", ReadyText: "ready", Level: levelOK}
	if h.ready != nil {
		v.ReadyText = "not ready: " + oneLine(h.ready.Error())
		v.Level = levelWarn
	}
	if h.degraded != "" {
		v.Level = levelWarn
	}
	if h.live != nil {
		v.LiveText = "NOT live: " + oneLine(h.live.Error())
		v.Level = levelBad
	}
	return v
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }

func flowView(m readout.Set) FlowView {
	f := FlowView{
		State:     orDash(strings.Join(m.LabelsWhere("weir_flow_state", "state", one), ",")),
		Stuck:     orDash(strings.Join(m.LabelsWhere("weir_flow_stuck_stage", "stage", one), ",")),
		Budget:    m.Sum("weir_memory_budget_bytes", nil),
		InUse:     m.Sum("weir_memory_budget_in_use_bytes", nil),
		Grantable: m.Sum("weir_memory_budget_grantable_bytes", nil),
		Waiting:   m.Sum("weir_memory_budget_waiting_bytes", nil),
		SinkBound: m.Sum("weir_flow_sink_bound", nil) == 1,
	}
	f.InUseRatio = ratio(f.InUse, f.Budget)
	f.Level = flowLevel(f.State)
	if f.Stuck != "clear" && f.Stuck != readout.Dash {
		f.Level = levelBad
	}
	return f
}

func flowLevel(state string) string {
	switch state {
	case "normal":
		return levelOK
	case "degraded", "recovery":
		return levelWarn
	case "critical":
		return levelBad
	}
	return levelIdle
}

func ratio(v, of float64) float64 {
	if of <= 0 {
		return -1
	}
	return v / of
}

func orDash(s string) string {
	if s == "" {
		return readout.Dash
	}
	return s
}

// sourceViews lists every source that reports written records: the
// producer socket, the HTTP door's stream, each [[source]].
func sourceViews(m readout.Set, w window, flowState string) []SourceView {
	var names []string
	for _, metric := range []string{"weir_source_records_written_total", "weir_source_running", "weir_flow_source_paused"} {
		for _, n := range m.Values(metric, "source") {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	httpStream := ""
	for _, l := range m.Series("weir_http_listener") {
		if l.Value == 1 {
			httpStream = l.Labels["stream"]
		}
	}
	out := make([]SourceView, 0, len(names))
	for _, n := range names {
		by := map[string]string{"source": n}
		v := SourceView{Name: n, Records: w.rate("weir_source_records_written_total", by), Bytes: -1, Status: "running", Level: levelOK}
		producers := false // producer-managed: told to retry rather than paused
		switch n {
		case "socket":
			v.Bytes, producers = w.rate("weir_bytes_received_total", nil), true
		case httpStream:
			v.Bytes, producers = w.rate("weir_http_received_bytes_total", nil), true
		}
		switch {
		case hasSeries(m, "weir_source_running", by) && m.Sum("weir_source_running", by) == 0:
			v.Status, v.Level = "restarting after an error", levelBad
		case m.Sum("weir_flow_source_paused", by) == 1:
			v.Status, v.Level = "throttled: paused by flow control", levelBad
		case m.Sum("weir_contract_breaker_open", by) == 1:
			v.Status, v.Level = "paused: contract breaker open", levelBad
		case producers && flowState == "critical":
			v.Status, v.Level = "throttled: producers told to retry", levelBad
		case producers && flowState == "degraded":
			v.Status, v.Level = "slowed: smaller batches", levelWarn
		}
		out = append(out, v)
	}
	return out
}

func hasSeries(m readout.Set, name string, match map[string]string) bool {
	for _, s := range m.Series(name) {
		ok := true
		for k, v := range match {
			ok = ok && s.Labels[k] == v
		}
		if ok {
			return true
		}
	}
	return false
}

// damagedMetric is the gauge of sealed segments the drain found damaged
// and set aside on disk. A node without a drain has none: the page shows
// a dash there rather than a figure it cannot know.
const damagedMetric = "weir_segments_damaged"

func bufferView(m readout.Set, w window, now time.Time) BufferView {
	b := BufferView{
		Segments:  m.Sum("weir_wab_segments", nil),
		Bytes:     m.Sum("weir_wab_bytes", nil),
		OldestAge: -1,
		Written:   w.rate("weir_wab_written_bytes_total", nil),
		Delivered: w.rate("weir_wab_delivered_bytes_total", nil),
		Drain:     orDash(strings.Join(m.LabelsWhere("weir_drain_state", "state", one), ",")),
		Damaged:   -1,
		Level:     levelOK,
	}
	if ts := m.Sum("weir_wab_oldest_segment_timestamp_seconds", nil); ts > 0 {
		b.OldestAge = max(now.Sub(time.Unix(0, int64(ts*1e9))).Seconds(), 0)
	}
	if m.Has(damagedMetric) {
		b.Damaged = m.Sum(damagedMetric, nil)
		if b.Damaged > 0 {
			b.Level = levelBad
		}
	}
	shards := len(m.Series("weir_shard_failed"))
	failed := m.LabelsWhere("weir_shard_failed", "shard", func(v float64) bool { return v > 0 })
	b.Shards = fmt.Sprintf("%d, none failed", shards)
	if len(failed) > 0 {
		b.Shards = fmt.Sprintf("%d, FAILED: %s (restart to recover)", shards, strings.Join(failed, ", "))
		b.Level = levelBad
	}
	switch b.Drain {
	case "blocked_dead_letter_full":
		b.Level = levelBad
	case "retrying_transient":
		b.Level = worst(b.Level, levelWarn)
	}
	if !m.Has("weir_wab_segments") {
		b.Level = levelIdle // no buffer on this node
	}
	return b
}

var levelRank = map[string]int{levelIdle: 0, levelOK: 1, levelWarn: 2, levelBad: 3}

func worst(a, b string) string {
	if levelRank[b] > levelRank[a] {
		return b
	}
	return a
}

// healthLevel reads a sink health state.
func healthLevel(state string) string {
	switch state {
	case "healthy":
		return levelOK
	case "degraded":
		return levelWarn
	case "down":
		return levelBad
	}
	return levelIdle
}

func sinkViews(in inputs, m readout.Set, w, recent window, buf BufferView) []SinkView {
	out := []SinkView{}
	secondaries := m.Values("weir_secondary_durable", "sink")
	for _, name := range m.Values("weir_sink_health", "sink") {
		by := map[string]string{"sink": name}
		v := SinkView{Name: name, Role: "sink", Coverage: readout.Dash, Recovery: readout.Dash}
		if len(secondaries) > 0 {
			v.Role = "primary raw"
		}
		v.Health = readout.Dash // before the first poll
		for _, s := range m.Series("weir_sink_health") {
			if s.Labels["sink"] == name && s.Value == 1 {
				v.Health = s.Labels["state"]
			}
		}
		ok := map[string]string{"sink": name, "result": "ok"}
		v.Commits = w.histRate("weir_sink_commit_duration_seconds", ok)
		v.Records = w.rate("weir_sink_commit_records_total", ok)
		if all := w.histRate("weir_sink_commit_duration_seconds", by); all >= 0 {
			v.Failures = max(all-v.Commits, 0)
		} else {
			v.Failures = -1
		}
		v.Lag = "in the buffer: " + readout.Bytes(buf.Bytes)
		if buf.OldestAge >= 0 {
			v.Lag += ", oldest " + readout.Age(buf.OldestAge)
		}
		if !m.Has("weir_wab_segments") {
			v.Lag = readout.Dash
		}
		v.LastError = lastError(in.logs, in.info.SinkLogName)
		okNow := recent.histRate("weir_sink_commit_duration_seconds", ok)
		v.Health, v.Level = sinkHealth(v.Health, okNow, recent.histRate("weir_sink_commit_duration_seconds", by)-okNow)
		out = append(out, v)
	}
	for _, name := range secondaries {
		by := map[string]string{"sink": name}
		v := SinkView{Name: name, Role: "secondary", Commits: -1}
		if m.Sum("weir_secondary_durable", by) != 1 {
			v.Role = "secondary, NOT durable"
		}
		v.Health = readout.Dash
		for _, s := range m.Series("weir_secondary_health") {
			if s.Labels["sink"] == name && s.Value == 1 {
				v.Health = s.Labels["state"]
			}
		}
		v.Records = w.rate("weir_secondary_delivered_records_total", by)
		v.Failures = w.rate("weir_secondary_commit_failures_total", by)
		v.Lag = readout.Num(m.Sum("weir_secondary_lag_positions", by)) + " positions"
		v.Coverage = readout.Num(m.Sum("weir_secondary_coverage_end", by))
		rec := []string{"missing " + readout.Num(m.Sum("weir_secondary_missing_positions", by))}
		if hasSeries(m, "weir_recovery_windows_unclaimed", by) {
			rec = append(rec, readout.Num(m.Sum("weir_recovery_windows_unclaimed", by))+" windows unclaimed",
				readout.Num(m.Sum("weir_recovery_leases_held", by))+" leases held")
		}
		v.Recovery = strings.Join(rec, ", ")
		v.LastError = lastError(in.logs, name)
		v.Health, v.Level = sinkHealth(v.Health, recent.rate("weir_secondary_delivered_records_total", by),
			recent.rate("weir_secondary_commit_failures_total", by))
		out = append(out, v)
	}
	return out
}

// sinkHealth reads a sink's polled health with its commits of the last
// seconds: failures and no progress is a failing sink whatever the last
// poll said (a poll may be a few seconds old, and a stalled commit fails
// before the next one does).
func sinkHealth(state string, progress, failures float64) (string, string) {
	level := healthLevel(state)
	if failures > 0 && progress <= 0 {
		return state + ", commits failing", worst(level, levelWarn)
	}
	return state, level
}

func lastError(logs *LogRing, sink string) string {
	if logs == nil || sink == "" {
		return ""
	}
	e, ok := logs.LastForSink(sink)
	if !ok {
		return ""
	}
	s := readout.Clock(e.Time) + " " + e.Msg
	if _, err, ok := strings.Cut(e.Attrs, "err="); ok {
		s += ": " + strings.Trim(err, `"`)
	}
	return shorten(s, maxMsgBytes)
}

func quarantineView(m readout.Set, drain string) QuarantineView {
	q := QuarantineView{
		DeadLetterFiles: m.Sum("weir_dead_letter_files", nil),
		DeadLetterBytes: m.Sum("weir_dead_letter_bytes", nil),
		DeadLetterMax:   m.Sum("weir_dead_letter_max_bytes", nil),
		Shed:            m.Sum("weir_secondary_quarantine_shed_records_total", nil),
		RecoveryBacklog: -1,
		Level:           levelOK,
	}
	q.DeadLetterFill = ratio(q.DeadLetterBytes, q.DeadLetterMax)
	if m.Has("weir_recovery_backlog") {
		q.RecoveryBacklog = m.Sum("weir_recovery_backlog", nil)
	}
	switch {
	case drain == "blocked_dead_letter_full" || q.DeadLetterFill >= 1:
		q.Level = levelBad
	case q.DeadLetterFill >= 0.8 || q.Shed > 0:
		q.Level = levelWarn
	}
	return q
}

func codeViews(m readout.Set, w window) []CodeView {
	codes := m.Values("weir_quarantined_records_total", "code")
	out := make([]CodeView, 0, len(codes))
	for _, c := range codes {
		by := map[string]string{"code": c}
		v := CodeView{Code: c, Records: m.Sum("weir_quarantined_records_total", by), Rate: w.rate("weir_quarantined_records_total", by), Level: levelIdle}
		if v.Records > 0 {
			v.Level = levelWarn
		}
		out = append(out, v)
	}
	return out
}

func coordView(m readout.Set) CoordView {
	c := CoordView{On: m.Has("weir_coordination_members"), Role: readout.Dash, Leader: readout.Dash, List: readout.Dash, Level: levelIdle}
	if !c.On {
		return c
	}
	c.Role = orDash(strings.Join(m.LabelsWhere("weir_coordination_role", "role", one), ","))
	c.Members = m.Sum("weir_coordination_members", nil)
	c.Learners = m.Sum("weir_coordination_learners", nil)
	c.LeasesHeld = m.Sum("weir_recovery_leases_held", nil)
	var list []string
	for _, s := range m.Series("weir_coordination_member") {
		if s.Value != 1 {
			continue
		}
		name := s.Labels["member"]
		if st := s.Labels["state"]; st == "leader" {
			c.Leader = name
			name += " (leader)"
		} else if st != "voter" {
			name += " (" + st + ")"
		}
		list = append(list, name)
	}
	slices.Sort(list)
	c.List = orDash(strings.Join(list, ", "))
	c.Level = levelOK
	switch {
	case c.Members == 0:
		c.Level = levelBad
	case c.Leader == readout.Dash:
		c.Level = levelWarn
	}
	return c
}

func logsView(l *LogRing) LogsView {
	if l == nil {
		return LogsView{Entries: []LogEntry{}}
	}
	es := l.Entries()
	if es == nil {
		es = []LogEntry{} // [] in JSON, not null
	}
	slices.Reverse(es)
	w, e := l.Counts()
	return LogsView{Warnings: float64(w), Errors: float64(e), Entries: es}
}

// budgetPoints is how many points of the budget's fill the timeline
// carries (each the highest of its stretch).
const budgetPoints = 120

// timeline turns the points of the last span into runs of one state
// and a thinned line of the budget's fill.
func timeline(ps []point, now time.Time, span time.Duration) Timeline {
	t := Timeline{Span: span.Seconds(), Runs: []Run{}, Budget: [][2]float64{}}
	from := now.Add(-span)
	rel := func(at time.Time) float64 { return math.Round(at.Sub(now).Seconds()*10) / 10 }
	step := span / budgetPoints
	var bucket time.Time
	for i, p := range ps {
		if p.at.Before(from) {
			continue
		}
		end := now
		if i+1 < len(ps) {
			end = ps[i+1].at
		}
		if n := len(t.Runs); n > 0 && t.Runs[n-1].State == p.state {
			t.Runs[n-1].To = rel(end)
		} else {
			t.Runs = append(t.Runs, Run{State: p.state, From: rel(p.at), To: rel(end)})
		}
		if p.budget < 0 {
			continue
		}
		r := math.Round(p.budget*1000) / 1000
		if n := len(t.Budget); n > 0 && p.at.Sub(bucket) < step {
			t.Budget[n-1][1] = max(t.Budget[n-1][1], r)
			continue
		}
		bucket = p.at
		t.Budget = append(t.Budget, [2]float64{rel(p.at), r})
	}
	return t
}

// zeroRows are empty rows, for the templates the page's script fills.
type zeroRows struct {
	Source SourceView
	Sink   SinkView
	Code   CodeView
	Log    LogEntry
}

// Zero gives the page template its empty rows.
func (Snapshot) Zero() zeroRows { return zeroRows{} }
