package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/components"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/server"
	"github.com/weir-io/weir/internal/tlsconf"
	"github.com/weir-io/weir/wab"
	"github.com/weir-io/weir/wire"
)

// Defaults. Where the write-ahead buffer or the wire codec already own a
// default, the knob falls back to theirs so the two cannot drift apart.
const (
	DefaultDataDir    = "./data"
	DefaultSocketName = "weir.sock" // under data_dir
	DefaultWABName    = "wab"       // under data_dir
	// DefaultShards (0) is resolved at load to AutoShards.
	DefaultShards = 0
	// MaxAutoShards caps AutoShards.
	MaxAutoShards           = 4
	DefaultMaxConnections   = 1024
	DefaultMaxFrameBytes    = wire.DefaultMaxFrameBytes
	DefaultFrameReadTimeout = 10 * time.Second
	DefaultIdleTimeout      = 5 * time.Minute
	DefaultWriteTimeout     = 10 * time.Second
	DefaultConnMaxInflight  = 4096
	DefaultConnMaxInflightB = server.DefaultConnMaxInflightBytes
	DefaultQueueCapacity    = wab.DefaultQueueCapacity
	DefaultQueueCapacityB   = wab.DefaultQueueCapacityBytes
	DefaultQueueTimeout     = time.Second
	DefaultShutdownTimeout  = 30 * time.Second
	DefaultBatchMaxRecords  = wab.DefaultBatchMaxRecords
	DefaultBatchDeadline    = wab.DefaultBatchDeadline
	DefaultSegmentMaxBytes  = wab.DefaultSegmentMaxBytes
	DefaultSegmentMaxAge    = wab.DefaultSegmentMaxAge
	DefaultPreallocateBytes = wab.DefaultPreallocateBytes
	DefaultDrainRetryBase   = drain.DefaultRetryBase
	DefaultDrainRetryMax    = drain.DefaultRetryMax
	DefaultDrainMaxRetries  = drain.DefaultMaxRetries
	DefaultDrainLinger      = drain.DefaultLinger
	DefaultDeadLetterMax    = drain.DefaultDeadLetterMaxBytes
	DefaultDeadLetterCheck  = drain.DefaultDeadLetterCheckInterval
	DefaultHealthInterval   = drain.DefaultHealthInterval
	DefaultMetricsBind      = "127.0.0.1"
	DefaultMetricsPort      = 9185
	DefaultLiveStallTimeout = time.Minute
	DefaultLogLevel         = "info"
	DefaultLogFormat        = "text"
	DefaultTLSReload        = 30 * time.Second
	DefaultRole             = "both"
	DefaultGate             = "buffer"
	DefaultRecoveryMode     = "rehydrate"
	DefaultWindowRecords    = engine.DefaultWindowRecords
	DefaultWindowTime       = engine.DefaultWindowTime
	DefaultCoverageFlush    = engine.DefaultFlushInterval
	DefaultQueueBatches     = engine.DefaultQueueBatches
	DefaultQuarantineBuffer = engine.DefaultQuarantineBuffer

	// MaxSocketPathBytes is the longest Unix socket path the kernel accepts:
	// sun_path holds 108 bytes including the terminating NUL.
	MaxSocketPathBytes = 107
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// kind is how a knob's value is written.
type kind = setting.Kind

const kindBool = setting.KindBool

// knob is one configuration setting. The table returned by knobs is the only
// place a setting is declared: the flag set, the environment reader, the TOML
// reader, defaults, validation, Usage and the reference table in
// docs/configuration.md are all generated from it. The keys of the sink
// kinds' tables ([sink.<kind>]) come from the component registry
// (sinkKnobs) and take their place in the table like any other.
type knob struct {
	Key     string // TOML key, dotted for nested tables
	Kind    kind
	Default string // as shown to people
	Range   string // as shown to people
	Help    string

	// parse reads the text form (flag, environment, TOML string) into p.
	parse func(p *partial, s string) error
	// parseTOML reads a TOML value (string, int64, ...) into p.
	parseTOML func(p *partial, v any) error
	// merge copies the value from src into dst if src has one.
	merge func(dst, src *partial)
	// isSet reports whether p holds a value.
	isSet func(p *partial) bool
	// apply stores p's value, or the default, in c.
	apply func(c *Config, p *partial)
	// check validates the final value in c; "" means valid.
	check func(c *Config) string
	// value renders the final value in c for messages.
	value func(c *Config) string
}

// Flag is the knob's command-line flag, without dashes.
func (k *knob) Flag() string {
	return strings.NewReplacer(".", "-", "_", "-").Replace(k.Key)
}

// Env is the knob's environment variable.
func (k *knob) Env() string {
	return "WEIR_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(k.Key))
}

// spec describes a knob of Go type T; newKnob turns it into the closures.
type spec[T any] struct {
	key, help  string
	typ        setting.Type[T]
	def        T
	defText    string // overrides the rendered default when non-empty
	field      func(*partial) **T
	out        func(*Config) *T
	skipDefApp bool // default is derived later (paths under data_dir)
}

func newKnob[T any](s spec[T]) knob {
	k := knob{Key: s.key, Kind: s.typ.Kind, Help: s.help, Range: s.typ.Range}
	k.Default = s.defText
	if k.Default == "" {
		k.Default = s.typ.Format(s.def)
	}
	set := func(p *partial, v T) { *s.field(p) = &v }
	k.parse = func(p *partial, text string) error {
		v, err := s.typ.Parse(text)
		if err != nil {
			return err
		}
		set(p, v)
		return nil
	}
	k.parseTOML = func(p *partial, raw any) error {
		v, err := s.typ.FromTOML(raw)
		if err != nil {
			return err
		}
		set(p, v)
		return nil
	}
	k.merge = func(dst, src *partial) {
		if v := *s.field(src); v != nil {
			*s.field(dst) = v
		}
	}
	k.isSet = func(p *partial) bool { return *s.field(p) != nil }
	k.apply = func(c *Config, p *partial) {
		if v := *s.field(p); v != nil {
			*s.out(c) = *v
		} else if !s.skipDefApp {
			*s.out(c) = s.def
		}
	}
	k.check = func(c *Config) string { return s.typ.Valid(*s.out(c)) }
	k.value = func(c *Config) string { return s.typ.Format(*s.out(c)) }
	return k
}

func intKnob(key string, def, lo, hi int, help string, field func(*partial) **int, out func(*Config) *int) knob {
	return newKnob(spec[int]{key: key, help: help, typ: setting.Int(lo, hi), def: def, field: field, out: out})
}

func sizeKnob(key string, def, lo, hi int64, help string, field func(*partial) **int64, out func(*Config) *int64) knob {
	return newKnob(spec[int64]{key: key, help: help, typ: setting.Size(lo, hi), def: def, field: field, out: out})
}

// intSizeKnob is a size held in an int field.
func intSizeKnob(key string, def, lo, hi int64, help string, field func(*partial) **int, out func(*Config) *int) knob {
	return newKnob(spec[int]{key: key, help: help, typ: setting.IntSize(lo, hi), def: int(def), field: field, out: out})
}

func durationKnob(key string, def, lo, hi time.Duration, help string, field func(*partial) **time.Duration, out func(*Config) *time.Duration) knob {
	return newKnob(spec[time.Duration]{key: key, help: help, typ: setting.Duration(lo, hi), def: def, field: field, out: out})
}

func enumKnob(key, def string, values []string, help string, field func(*partial) **string, out func(*Config) *string) knob {
	return newKnob(spec[string]{key: key, help: help, typ: setting.Enum(values...), def: def, field: field, out: out})
}

// hostKnob is a listen address: an IP address or a host name, without a
// port.
func hostKnob(key, def, help string, field func(*partial) **string, out func(*Config) *string) knob {
	return newKnob(spec[string]{key: key, help: help, typ: setting.Host(), def: def, field: field, out: out})
}

// pathKnob is a path; defText documents a default derived from data_dir
// (applied by derivePaths), or def is the default itself.
func pathKnob(key, def, defText, help string, field func(*partial) **string, out func(*Config) *string) knob {
	typ := setting.Path()
	if key == "socket_path" {
		typ.Range = fmt.Sprintf("%s; at most %d bytes once absolute", typ.Range, MaxSocketPathBytes)
	}
	return newKnob(spec[string]{key: key, help: help, typ: typ, def: def, defText: defText,
		field: field, out: out, skipDefApp: def == ""})
}

// optPathKnob is a path with no default: empty means not set.
func optPathKnob(key, rangeText, help string, field func(*partial) **string, out func(*Config) *string) knob {
	return newKnob(spec[string]{key: key, help: help, typ: setting.OptionalPath(rangeText), field: field, out: out})
}

// addressKnob is a TCP host:port to listen on; empty turns it off.
func addressKnob(key, help string, field func(*partial) **string, out func(*Config) *string) knob {
	return newKnob(spec[string]{key: key, help: help, typ: setting.Address(), field: field, out: out})
}

// listKnob is a list of strings: comma-separated in flags and environment
// variables, an array of strings (or one comma-separated string) in TOML.
// An empty list is nil. check validates one entry.
func listKnob(key, rangeText, help string, check func(string) error, field func(*partial) **[]string, out func(*Config) *[]string) knob {
	return newKnob(spec[[]string]{key: key, help: help, typ: setting.List(rangeText, check), field: field, out: out})
}

// boolKnob is true or false; TOML takes a boolean (or the string form).
func boolKnob(key string, def bool, help string, field func(*partial) **bool, out func(*Config) *bool) knob {
	return newKnob(spec[bool]{key: key, help: help, typ: setting.Bool(), def: def, field: field, out: out})
}

// sinkKnobs are the keys of every registered sink kind, [sink.<kind>]:
// sink.<kind>.<key>, with a flag and a variable like every knob. A kind's
// settings live in Config.Sink.Kinds, made by the kind with its defaults.
func sinkKnobs(reg *component.Registry) []knob {
	var ks []knob
	for _, sk := range reg.Sinks() {
		fields := sk.Fields()
		for i := range fields {
			ks = append(ks, fieldKnob(sk, &fields[i]))
		}
	}
	return ks
}

func fieldKnob(sk *component.SinkKind, f *component.Field) knob {
	key := "sink." + sk.Name() + "." + f.Key
	settings := func(c *Config) any { return c.Sink.settings(sk) }
	k := knob{Key: key, Kind: f.Kind, Default: f.Default, Range: f.Range, Help: f.Help}
	k.parse = func(p *partial, s string) error {
		v, err := f.Parse(s)
		if err == nil {
			p.setKindValue(key, v)
		}
		return err
	}
	k.parseTOML = func(p *partial, raw any) error {
		v, err := f.ParseTOML(raw)
		if err == nil {
			p.setKindValue(key, v)
		}
		return err
	}
	k.merge = func(dst, src *partial) {
		if v, ok := src.kindValues[key]; ok {
			dst.setKindValue(key, v)
		}
	}
	k.isSet = func(p *partial) bool { _, ok := p.kindValues[key]; return ok }
	k.apply = func(c *Config, p *partial) {
		s := settings(c) // made with the kind's defaults
		if v, ok := p.kindValues[key]; ok {
			f.Set(s, v)
		}
	}
	k.check = func(c *Config) string { return f.Check(settings(c)) }
	k.value = func(c *Config) string { return f.Value(settings(c)) }
	return k
}

// settings returns the settings of kind k in s, made with k's defaults
// if s has none yet.
func (s *SinkConfig) settings(k *component.SinkKind) any {
	if s.Kinds == nil {
		s.Kinds = map[string]any{}
	}
	v, ok := s.Kinds[k.Name()]
	if !ok {
		v = k.NewConfig()
		s.Kinds[k.Name()] = v
	}
	return v
}

// knobs is the table of every setting with the built-in kinds.
func knobs() []knob { return knobsFor(components.Registry()) }

// knobsFor is the table of every setting, in documentation order, with
// reg's sink kinds: their keys follow sink.durable.
func knobsFor(reg *component.Registry) []knob {
	ks := scalarKnobs(reg)
	i := slices.IndexFunc(ks, func(k knob) bool { return k.Key == "sink.durable" }) + 1
	return slices.Insert(ks, i, sinkKnobs(reg)...)
}

// scalarKnobs are the settings declared here, in documentation order.
func scalarKnobs(reg *component.Registry) []knob {
	ks := []knob{
		pathKnob("data_dir", DefaultDataDir, "", "Directory for the daemon's state; the other paths default to places under it.",
			func(p *partial) **string { return &p.DataDir }, func(c *Config) *string { return &c.DataDir }),
		pathKnob("socket_path", "", "<data_dir>/"+DefaultSocketName, "Unix socket producers connect to.",
			func(p *partial) **string { return &p.SocketPath }, func(c *Config) *string { return &c.SocketPath }),
		pathKnob("wab_dir", "", "<data_dir>/"+DefaultWABName, "Directory of the write-ahead buffer's segment files.",
			func(p *partial) **string { return &p.WABDir }, func(c *Config) *string { return &c.WABDir }),

		intKnob("shards", DefaultShards, 0, 256, "Number of write-ahead buffer shards, each with its own segment files and flusher. 0: one per CPU the daemon may use (GOMAXPROCS), at most 4 — each shard's flusher pays its own fdatasync, so shards beyond the cores only add syncs that compete for them.",
			func(p *partial) **int { return &p.Shards }, func(c *Config) *int { return &c.Shards }),
		intKnob("max_connections", DefaultMaxConnections, 1, 65536, "Most producer connections open at once. A connection counts until the daemon has read its close and answered what it sent; one arriving at the limit waits up to 100ms for such a place to free, then is refused.",
			func(p *partial) **int { return &p.MaxConnections }, func(c *Config) *int { return &c.MaxConnections }),
		intSizeKnob("max_frame_bytes", DefaultMaxFrameBytes, 64, 256*mib, "Largest frame body accepted from a producer; checked before any allocation.",
			func(p *partial) **int { return &p.MaxFrameBytes }, func(c *Config) *int { return &c.MaxFrameBytes }),
		durationKnob("frame_read_timeout", DefaultFrameReadTimeout, time.Millisecond, time.Hour, "Time allowed to read one frame once its first byte has arrived.",
			func(p *partial) **time.Duration { return &p.FrameReadTimeout }, func(c *Config) *time.Duration { return &c.FrameReadTimeout }),
		durationKnob("idle_timeout", DefaultIdleTimeout, time.Second, 24*time.Hour, "A connection with no frame for this long is closed (at most a sixteenth of it later).",
			func(p *partial) **time.Duration { return &p.IdleTimeout }, func(c *Config) *time.Duration { return &c.IdleTimeout }),
		durationKnob("write_timeout", DefaultWriteTimeout, time.Millisecond, time.Hour, "Time allowed to write a reply to a producer before the connection is dropped (at least this, at most a sixteenth more).",
			func(p *partial) **time.Duration { return &p.WriteTimeout }, func(c *Config) *time.Duration { return &c.WriteTimeout }),
		intKnob("conn_max_inflight", DefaultConnMaxInflight, 1, 1<<20, "Requests (frames, of one record or a batch) one connection may have sent but not yet had answered; the daemon stops reading the connection beyond it.",
			func(p *partial) **int { return &p.ConnMaxInflight }, func(c *Config) *int { return &c.ConnMaxInflight }),
		sizeKnob("conn_max_inflight_bytes", DefaultConnMaxInflightB, 64*kib, 1<<40, "Memory one connection's unanswered frames may hold (their records as the daemon keeps them, stored metadata and bookkeeping included), taken from memory_budget; a frame beyond it waits for the connection's own answers (at most flow.admission_wait, then Overloaded), and a larger frame is let in only alone. Off with flow.admission = false.",
			func(p *partial) **int64 { return &p.ConnMaxInflightBytes }, func(c *Config) *int64 { return &c.ConnMaxInflightBytes }),
		intKnob("queue_capacity", DefaultQueueCapacity, 1, 1<<24, "Hand-offs queued per shard between the connections and the shard's flusher: one frame, or the frames (up to 32) a connection read at once.",
			func(p *partial) **int { return &p.QueueCapacity }, func(c *Config) *int { return &c.QueueCapacity }),
		sizeKnob("queue_capacity_bytes", DefaultQueueCapacityB, 64*kib, 1<<40, "Payload and metadata bytes queued per shard ahead of its flusher; beyond it a request waits as for queue_capacity (queue_timeout, then QueueTimeout). A request larger than this enters only an empty queue. The fuller of the two shares is a queue fill flow control watches.",
			func(p *partial) **int64 { return &p.QueueCapacityBytes }, func(c *Config) *int64 { return &c.QueueCapacityBytes }),
		durationKnob("queue_timeout", DefaultQueueTimeout, time.Millisecond, time.Minute, "How long a request waits for room in a full shard queue (queue_capacity, queue_capacity_bytes) before its producer gets a QueueTimeout reply.",
			func(p *partial) **time.Duration { return &p.QueueTimeout }, func(c *Config) *time.Duration { return &c.QueueTimeout }),
		durationKnob("shutdown_timeout", DefaultShutdownTimeout, 100*time.Millisecond, time.Hour, "Bound on the whole graceful shutdown: every part of the node (sources and listeners, drain, sinks, buffer, contracts, coordination) stops within it; a part still stopping then is abandoned, and the process exits at most half a second later.",
			func(p *partial) **time.Duration { return &p.ShutdownTimeout }, func(c *Config) *time.Duration { return &c.ShutdownTimeout }),

		addressKnob("tcp_listen", "TCP address producers may also connect to, with mutual TLS only (there is no plaintext TCP); empty serves the Unix socket alone.",
			func(p *partial) **string { return &p.TCPListen }, func(c *Config) *string { return &c.TCPListen }),
		optPathKnob("tls_cert_file", "required when tcp_listen is set",
			"PEM certificate chain the daemon presents to TCP producers, leaf first.",
			func(p *partial) **string { return &p.TLSCertFile }, func(c *Config) *string { return &c.TLSCertFile }),
		optPathKnob("tls_key_file", "required when tcp_listen is set",
			"PEM private key of tls_cert_file; keep it mode 0600.",
			func(p *partial) **string { return &p.TLSKeyFile }, func(c *Config) *string { return &c.TLSKeyFile }),
		optPathKnob("tls_client_ca_file", "required when tcp_listen is set",
			"PEM bundle of the CAs a producer's client certificate must chain to.",
			func(p *partial) **string { return &p.TLSClientCAFile }, func(c *Config) *string { return &c.TLSClientCAFile }),
		listKnob("tls_allowed_identities", "each a DNS name, a URI with a scheme (spiffe://…) or an email address; no wildcards",
			"Client certificate SANs allowed to connect over TCP; empty allows every certificate the client CA signed.",
			func(s string) error { _, err := tlsconf.ParseIdentity(s); return err },
			func(p *partial) **[]string { return &p.TLSAllowedIdentities }, func(c *Config) *[]string { return &c.TLSAllowedIdentities }),
		durationKnob("tls_reload_interval", DefaultTLSReload, time.Second, 24*time.Hour, "How often the certificate, key and client CA files are checked for changes (SIGHUP checks at once).",
			func(p *partial) **time.Duration { return &p.TLSReloadInterval }, func(c *Config) *time.Duration { return &c.TLSReloadInterval }),

		intKnob("batch_max_records", DefaultBatchMaxRecords, 1, 1<<20, "Most records a flusher writes (and syncs) as one batch.",
			func(p *partial) **int { return &p.BatchMaxRecords }, func(c *Config) *int { return &c.BatchMaxRecords }),
		durationKnob("batch_deadline", DefaultBatchDeadline, 0, 10*time.Second, "How long a flusher waits to fill a batch; 0 writes whatever is queued at once.",
			func(p *partial) **time.Duration { return &p.BatchDeadline }, func(c *Config) *time.Duration { return &c.BatchDeadline }),
		sizeKnob("segment_max_bytes", DefaultSegmentMaxBytes, mib, 4*gib, "A segment is sealed once it reaches this size.",
			func(p *partial) **int64 { return &p.SegmentMaxBytes }, func(c *Config) *int64 { return &c.SegmentMaxBytes }),
		durationKnob("segment_max_age", DefaultSegmentMaxAge, time.Millisecond, 24*time.Hour, "A segment is sealed once it is this old (its records reach the drain before that: drain_open_segments).",
			func(p *partial) **time.Duration { return &p.SegmentMaxAge }, func(c *Config) *time.Duration { return &c.SegmentMaxAge }),
		sizeKnob("segment_preallocate_bytes", DefaultPreallocateBytes, 0, 4*gib, "Disk space reserved for each new segment ahead of writes; 0 turns preallocation off. Never more than segment_max_bytes. On a disk with less free space, less is reserved (halved down to 1MiB, then just what each batch needs; logged once, weir_wab_preallocate_reduced), and a segment is made when a push needs it rather than ahead, so idle segments hold no space the sink needs: a push fails with DiskFull only when its own bytes cannot be reserved.",
			func(p *partial) **int64 { return &p.PreallocateBytes }, func(c *Config) *int64 { return &c.PreallocateBytes }),

		durationKnob("drain_retry_base", DefaultDrainRetryBase, time.Millisecond, time.Minute, "First back-off after a sink reports a transient error; doubles per attempt.",
			func(p *partial) **time.Duration { return &p.DrainRetryBase }, func(c *Config) *time.Duration { return &c.DrainRetryBase }),
		durationKnob("drain_retry_max", DefaultDrainRetryMax, time.Millisecond, time.Hour, "Cap on the drain's back-off between retries; at least drain_retry_base.",
			func(p *partial) **time.Duration { return &p.DrainRetryMax }, func(c *Config) *time.Duration { return &c.DrainRetryMax }),
		boolKnob("drain_open_segments", true, "The drain delivers an open segment's records as soon as their tier's promise holds — a Durable record once fdatasynced, a Buffered one once written — instead of waiting for the segment's seal (segment_max_age, segment_max_bytes). false: sealed segments only (docs/drain.md).",
			func(p *partial) **bool { return &p.DrainOpenSegments }, func(c *Config) *bool { return &c.DrainOpenSegments }),
		durationKnob("drain_linger", DefaultDrainLinger, 0, time.Second, "How long records readable in an open segment, fewer than a full sub-batch, wait for more before the drain sends them: under light load a record goes out within about this long, under heavy load sub-batches stay full. 0: no wait.",
			func(p *partial) **time.Duration { return &p.DrainLinger }, func(c *Config) *time.Duration { return &c.DrainLinger }),
		intKnob("drain_max_retries", DefaultDrainMaxRetries, 0, 1000, "Retries of a sub-batch after a transient sink error before the segment is set aside (left on disk, retried on a later pass).",
			func(p *partial) **int { return &p.DrainMaxRetries }, func(c *Config) *int { return &c.DrainMaxRetries }),
		sizeKnob("dead_letter_max_bytes", DefaultDeadLetterMax, 1<<20, 1<<40, "Cap on the dead-letter lane's size on disk; at the cap the drain blocks (state blocked_dead_letter_full) until an operator frees space.",
			func(p *partial) **int64 { return &p.DeadLetterMaxBytes }, func(c *Config) *int64 { return &c.DeadLetterMaxBytes }),
		durationKnob("dead_letter_check_interval", DefaultDeadLetterCheck, 10*time.Millisecond, time.Hour, "How often a drain blocked on a full dead-letter lane rescans it for space an operator freed.",
			func(p *partial) **time.Duration { return &p.DeadLetterCheckInterval }, func(c *Config) *time.Duration { return &c.DeadLetterCheckInterval }),
		durationKnob("sink_health_interval", DefaultHealthInterval, 100*time.Millisecond, time.Hour, "How often the sink's health is polled, also while idle or blocked (the weir_sink_health gauge), and each secondary's (weir_secondary_health).",
			func(p *partial) **time.Duration { return &p.SinkHealthInterval }, func(c *Config) *time.Duration { return &c.SinkHealthInterval }),

		enumKnob("sink.type", reg.DefaultSink(), reg.SinkNames(), "Which sink the drain delivers to. With [[secondary]] sinks it is primary raw and must have a raw mode ("+orList(reg.RawSinkNames())+").",
			func(p *partial) **string { return &p.SinkType }, func(c *Config) *string { return &c.Sink.Type }),
		boolKnob("sink.durable", true, "The [sink] acknowledges only what is on stable storage. It is the pipeline's primary raw (its system of record), so false is refused; a [[secondary]] of a kind that supports it may set durable = false (docs/topology.md).",
			func(p *partial) **bool { return &p.SinkDurable }, func(c *Config) *bool { return &c.Sink.Durable }),

		enumKnob("gate", DefaultGate, []string{"buffer", "raw"}, "What a [[source]] waits for before it commits its position: the write-ahead buffer's durable write (buffer), or the [sink]'s own durable commit with no write-ahead buffer at all (raw: no producers, no drain; records the sink refuses go to <data_dir>/quarantine/raw).",
			func(p *partial) **string { return &p.Gate }, func(c *Config) *string { return &c.Gate }),
		enumKnob("role", DefaultRole, []string{"both", "ingest", "recovery"}, "What this node does for [[secondary]] sinks: deliver live batches and recover gaps (both), only deliver live (ingest), or only recover (recovery): a recovery-only node reads another node's primary raw (the [sink]: a file or Parquet directory, or a Postgres raw table) read-only and runs no buffer, listener or source.",
			func(p *partial) **string { return &p.Role }, func(c *Config) *string { return &c.Role }),
		enumKnob("recovery_mode", DefaultRecoveryMode, []string{"rehydrate", "skip-quarantine"}, "Whether records a secondary rejects during recovery go to its quarantine lane again (rehydrate) or are only counted (skip-quarantine).",
			func(p *partial) **string { return &p.RecoveryMode }, func(c *Config) *string { return &c.RecoveryMode }),
		intKnob("recovery_window_records", DefaultWindowRecords, 1, 1<<20, "Most records one recovery window reads from raw and commits to a lagging secondary.",
			func(p *partial) **int { return &p.RecoveryWindowRecords }, func(c *Config) *int { return &c.RecoveryWindowRecords }),
		durationKnob("recovery_window_time", DefaultWindowTime, 10*time.Millisecond, time.Hour, "Deadline of one recovery window's commit; a window that misses it is retried at half the size.",
			func(p *partial) **time.Duration { return &p.RecoveryWindowTime }, func(c *Config) *time.Duration { return &c.RecoveryWindowTime }),
		durationKnob("coverage_flush_interval", DefaultCoverageFlush, 10*time.Millisecond, time.Minute, "How often the secondaries' coverage is written to the offset store in the raw directory (and the recovery gauges are updated).",
			func(p *partial) **time.Duration { return &p.CoverageFlushInterval }, func(c *Config) *time.Duration { return &c.CoverageFlushInterval }),
	}
	ks = append(ks, flowKnobs()...)
	ks = append(ks, dqAuditKnobs()...)
	ks = append(ks, coordKnobs()...)
	ks = append(ks, httpKnobs()...)
	return append(ks,
		hostKnob("metrics_bind", DefaultMetricsBind, "Address the metrics and health endpoint listens on: an IP address or a host name. /metrics, /live and /ready are unauthenticated; keep them on loopback or a private network. Beyond loopback its admin routes (the status page, weir tap, /debug/pprof/) need the HTTP door's authentication (an admin-scope token of http.token_file, or metrics_tls with client certificates) or metrics_allow_unauthenticated = true; the daemon refuses to start otherwise.",
			func(p *partial) **string { return &p.MetricsBind }, func(c *Config) *string { return &c.MetricsBind }),
		intKnob("metrics_port", DefaultMetricsPort, 0, 65535, "TCP port of the metrics and health endpoint (/metrics, /live, /ready); 0 turns the endpoint off.",
			func(p *partial) **int { return &p.MetricsPort }, func(c *Config) *int { return &c.MetricsPort }),
		durationKnob("live_stall_timeout", DefaultLiveStallTimeout, time.Second, time.Hour, "/live fails once a shard flusher or the drain has been busy this long without progress (a sink that is slow or down never counts).",
			func(p *partial) **time.Duration { return &p.LiveStallTimeout }, func(c *Config) *time.Duration { return &c.LiveStallTimeout }),
		boolKnob("debug_pprof", false, "Also serve Go's profiler at /debug/pprof/ on the metrics endpoint (for diagnosis): an admin route, authenticated as the status page.",
			func(p *partial) **bool { return &p.DebugPprof }, func(c *Config) *bool { return &c.DebugPprof }),
		boolKnob("metrics_tls", false, "Serve the metrics endpoint over HTTPS (TLS 1.3) with the HTTP door's material (http.tls_cert_file, http.tls_key_file; reloaded with it). With http.tls_client_ca_file a client certificate is asked for, not required: /metrics, /live and /ready answer without one, and one verified as the door verifies it (http.tls_allowed_identities) opens the admin routes like an admin token.",
			func(p *partial) **bool { return &p.MetricsTLS }, func(c *Config) *bool { return &c.MetricsTLS }),
		boolKnob("metrics_allow_unauthenticated", false, "Let metrics_bind be an address beyond loopback while the admin routes (the status page and /status.json, weir tap, /debug/pprof/) have no authentication (no http.token_file, no metrics_tls): anyone who reaches the endpoint may read them, and weir tap shows records' payloads.",
			func(p *partial) **bool { return &p.MetricsAllowUnauthenticated }, func(c *Config) *bool { return &c.MetricsAllowUnauthenticated }),

		enumKnob("log_level", DefaultLogLevel, []string{"debug", "info", "warn", "error"}, "Least severe log level written.",
			func(p *partial) **string { return &p.LogLevel }, func(c *Config) *string { return &c.LogLevel }),
		enumKnob("log_format", DefaultLogFormat, []string{"text", "json"}, "Log line format.",
			func(p *partial) **string { return &p.LogFormat }, func(c *Config) *string { return &c.LogFormat }),
	)
}

// partial is one layer's view of the configuration: nil means the layer
// does not set the knob.
type partial struct {
	DataDir, SocketPath, WABDir *string

	Shards, MaxConnections, MaxFrameBytes *int
	FrameReadTimeout, IdleTimeout         *time.Duration
	WriteTimeout                          *time.Duration
	ConnMaxInflight, QueueCapacity        *int
	ConnMaxInflightBytes                  *int64
	QueueCapacityBytes                    *int64
	QueueTimeout, ShutdownTimeout         *time.Duration

	TCPListen, TLSCertFile, TLSKeyFile *string
	TLSClientCAFile                    *string
	TLSAllowedIdentities               *[]string
	TLSReloadInterval                  *time.Duration

	BatchMaxRecords  *int
	BatchDeadline    *time.Duration
	SegmentMaxBytes  *int64
	SegmentMaxAge    *time.Duration
	PreallocateBytes *int64

	DrainRetryBase, DrainRetryMax *time.Duration
	DrainMaxRetries               *int
	DrainOpenSegments             *bool
	DrainLinger                   *time.Duration
	DeadLetterMaxBytes            *int64
	DeadLetterCheckInterval       *time.Duration
	SinkHealthInterval            *time.Duration

	SinkType    *string
	SinkDurable *bool

	// kindValues holds the sink kinds' keys this layer sets, by knob key
	// (sink.<kind>.<key>); see fieldKnob.
	kindValues map[string]any

	MetricsBind      *string
	MetricsPort      *int
	LiveStallTimeout *time.Duration
	DebugPprof       *bool

	MetricsTLS, MetricsAllowUnauthenticated *bool

	Role, RecoveryMode    *string
	Gate                  *string
	RecoveryWindowRecords *int
	RecoveryWindowTime    *time.Duration
	CoverageFlushInterval *time.Duration

	LogLevel, LogFormat *string

	flow    flowPartial
	dqAudit dqAuditPartial
	coord   coordPartial
	http    httpPartial

	// topology holds the [[secondary]] and [[source]] tables as read from
	// the file; they have no flag or environment form.
	topology *topologyTOML
}

func (p *partial) setKindValue(key string, v any) {
	if p.kindValues == nil {
		p.kindValues = map[string]any{}
	}
	p.kindValues[key] = v
}

// orList writes "a, b or c".
func orList(vs []string) string {
	if len(vs) < 2 {
		return strings.Join(vs, "")
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
}
