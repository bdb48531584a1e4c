package config

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// The topology tables, [[secondary]] and [[source]], are arrays of tables:
// they exist only in the TOML file, with no flag or environment form. The
// main decoder hands them over as primitives; each is decoded here, so a
// key the table does not know is still reported as an unknown key.

// DefaultSecondaryDirName is where a file or Parquet secondary writes when
// its dir is not set: <data_dir>/secondary/<name>.
const DefaultSecondaryDirName = "secondary"

// DefaultQuarantineDirName is where a secondary's quarantine lane writes
// when quarantine_dir is not set: <data_dir>/quarantine/<name>.
const DefaultQuarantineDirName = "quarantine"

// DefaultQuarantineMaxBytes bounds a quarantine directory unless
// quarantine_max_bytes says otherwise.
const DefaultQuarantineMaxBytes = 256 << 20

// Source types.
const (
	SourceKafka = "kafka"
	SourceNATS  = "nats"
	SourceFile  = "file"
)

// SecondaryConfig is one [[secondary]] sink: delivered from primary raw
// after raw is durable, never on the source's path.
type SecondaryConfig struct {
	Name         string // name: keys its coverage in the offset store
	QueueBatches int    // queue_batches
	// QuarantineBuffer bounds the secondary's quarantine lane, in records
	// (quarantine_buffer).
	QuarantineBuffer int
	// QuarantineDir is where the secondary's refused records are kept
	// with their reasons, as NDJSON (quarantine_dir).
	QuarantineDir string
	// QuarantineMaxBytes bounds QuarantineDir; past it refused records are
	// shed (counted). 0 keeps no files: they are logged and counted only
	// (quarantine_max_bytes).
	QuarantineMaxBytes int64
	// StartAtEnd: a secondary the offset store has never seen starts at
	// raw's end instead of being filled from all of raw (start_at_end).
	StartAtEnd bool
	Sink       SinkConfig // type and [secondary.<type>], the keys of [sink.<type>]
}

// SourceConfig is one [[source]]: a broker or file source the daemon runs,
// writing through the write-ahead buffer (its gate).
type SourceConfig struct {
	Name string // name: its metrics label and cursor key
	Type string // type: kafka|nats|file
	// OwnRaw: the source's replayable origin is the primary raw (own_raw,
	// file sources only). RawDir holds its position index and the offset
	// store (raw_dir; default <data_dir>/origin/<name>).
	OwnRaw bool
	RawDir string
	Kafka  KafkaSourceConfig // [source.kafka]
	NATS   NATSSourceConfig  // [source.nats]
	File   FileSourceConfig  // [source.file]
}

// KafkaSourceConfig is [source.kafka]. Zero values take the kafkasrc
// defaults.
type KafkaSourceConfig struct {
	Brokers          []string      // brokers (required)
	Topics           []string      // topics (required)
	Group            string        // group (required)
	Cluster          string        // cluster: names the cluster in record ids
	MaxPollRecords   int           // max_poll_records
	PerRecordCommit  bool          // per_record_commit
	StartAtEnd       bool          // start_at_end
	CommitTimeout    time.Duration // commit_timeout
	RebalanceTimeout time.Duration // rebalance_timeout
	SessionTimeout   time.Duration // session_timeout
}

// NATSSourceConfig is [source.nats]. Zero values take the natssrc
// defaults.
type NATSSourceConfig struct {
	URL            string        // url (default nats://127.0.0.1:4222)
	Stream         string        // stream (required)
	Consumer       string        // consumer (required): durable consumer name
	FilterSubjects []string      // filter_subjects
	FetchBatch     int           // fetch_batch
	FetchMaxWait   time.Duration // fetch_max_wait
	AckWait        time.Duration // ack_wait
	MaxAckPending  int           // max_ack_pending
	MaxDeliver     int           // max_deliver
}

// FileSourceConfig is [source.file]. Zero values take the filesrc
// defaults.
type FileSourceConfig struct {
	Glob            string        // glob (required)
	PollInterval    time.Duration // poll_interval
	MaxBatchRecords int           // max_batch_records
	MaxLineBytes    int           // max_line_bytes
	RotateGrace     time.Duration // rotate_grace
}

// topologyTOML is what the file said, before defaults and validation.
type topologyTOML struct {
	path        string
	secondaries []secondaryTOML
	sources     []sourceTOML
}

type secondaryTOML struct {
	name       *string
	queue      *int64
	quarantine *int64
	qDir       *string
	qMaxBytes  *int64
	startAtEnd bool
	sink       *partial
	present    []string // [secondary.<table>] tables given
}

// tomlDuration reads a Go duration string.
type tomlDuration struct{ d time.Duration }

func (t *tomlDuration) UnmarshalText(b []byte) error {
	d, err := parseDuration(string(b))
	if err != nil {
		return err
	}
	if d < 0 {
		return fmt.Errorf("%q is negative", string(b))
	}
	t.d = d
	return nil
}

type sourceTOML struct {
	Name   *string    `toml:"name"`
	Type   *string    `toml:"type"`
	OwnRaw bool       `toml:"own_raw"`
	RawDir string     `toml:"raw_dir"`
	Kafka  *kafkaTOML `toml:"kafka"`
	NATS   *natsTOML  `toml:"nats"`
	File   *fileTOML  `toml:"file"`
}

type kafkaTOML struct {
	Brokers          []string     `toml:"brokers"`
	Topics           []string     `toml:"topics"`
	Group            string       `toml:"group"`
	Cluster          string       `toml:"cluster"`
	MaxPollRecords   int          `toml:"max_poll_records"`
	PerRecordCommit  bool         `toml:"per_record_commit"`
	StartAtEnd       bool         `toml:"start_at_end"`
	CommitTimeout    tomlDuration `toml:"commit_timeout"`
	RebalanceTimeout tomlDuration `toml:"rebalance_timeout"`
	SessionTimeout   tomlDuration `toml:"session_timeout"`
}

type natsTOML struct {
	URL            string       `toml:"url"`
	Stream         string       `toml:"stream"`
	Consumer       string       `toml:"consumer"`
	FilterSubjects []string     `toml:"filter_subjects"`
	FetchBatch     int          `toml:"fetch_batch"`
	FetchMaxWait   tomlDuration `toml:"fetch_max_wait"`
	AckWait        tomlDuration `toml:"ack_wait"`
	MaxAckPending  int          `toml:"max_ack_pending"`
	MaxDeliver     int          `toml:"max_deliver"`
}

type fileTOML struct {
	Glob            string       `toml:"glob"`
	PollInterval    tomlDuration `toml:"poll_interval"`
	MaxBatchRecords int          `toml:"max_batch_records"`
	MaxLineBytes    int          `toml:"max_line_bytes"`
	RotateGrace     tomlDuration `toml:"rotate_grace"`
}

const (
	secondaryField = "TopologySecondary"
	sourceField    = "TopologySource"
)

// withTopology adds the two arrays of tables to the document struct.
func withTopology(t reflect.Type) reflect.Type {
	fields := make([]reflect.StructField, 0, t.NumField()+2)
	for i := range t.NumField() {
		fields = append(fields, t.Field(i))
	}
	prims := reflect.TypeFor[[]toml.Primitive]()
	fields = append(fields,
		reflect.StructField{Name: secondaryField, Type: prims, Tag: `toml:"secondary"`},
		reflect.StructField{Name: sourceField, Type: prims, Tag: `toml:"source"`})
	return reflect.StructOf(fields)
}

func childNode(n *tomlNode, name string) *tomlNode {
	for _, c := range n.children {
		if c.name == name {
			return c
		}
	}
	panic("config: no table " + name)
}

// decodeTopology decodes [[secondary]] and [[source]] into p.topology.
func decodeTopology(root *tomlNode, md toml.MetaData, doc reflect.Value, p *partial, path string) []error {
	var errs []error
	topo := &topologyTOML{path: path}
	sinkNode := childNode(root, "sink")
	bodyType := sinkNode.structType()
	for i, prim := range doc.FieldByName(secondaryField).Interface().([]toml.Primitive) {
		where := fmt.Sprintf("[[secondary]] #%d", i+1)
		var head struct {
			Name             *string `toml:"name"`
			QueueBatches     *int64  `toml:"queue_batches"`
			QuarantineBuffer *int64  `toml:"quarantine_buffer"`
			QuarantineDir    *string `toml:"quarantine_dir"`
			QuarantineMax    *int64  `toml:"quarantine_max_bytes"`
			StartAtEnd       bool    `toml:"start_at_end"`
		}
		if err := md.PrimitiveDecode(prim, &head); err != nil {
			errs = append(errs, fileError(path, where, err))
			continue
		}
		body := reflect.New(bodyType)
		if err := md.PrimitiveDecode(prim, body.Interface()); err != nil {
			errs = append(errs, fileError(path, where, err))
			continue
		}
		sec := secondaryTOML{name: head.Name, queue: head.QueueBatches, quarantine: head.QuarantineBuffer,
			qDir: head.QuarantineDir, qMaxBytes: head.QuarantineMax, startAtEnd: head.StartAtEnd, sink: &partial{}}
		if sec.name != nil {
			where = fmt.Sprintf("[[secondary]] %q", *sec.name)
		}
		var walk func(n *tomlNode, v reflect.Value, top bool)
		walk = func(n *tomlNode, v reflect.Value, top bool) {
			for j, c := range n.children {
				f := v.Field(j)
				if c.k == nil {
					if top && !f.IsZero() {
						sec.present = append(sec.present, c.name)
					}
					walk(c, f, false)
					continue
				}
				if f.IsZero() {
					continue
				}
				leaf := &tomlLeaf{k: c.k, p: sec.sink}
				if err := md.PrimitiveDecode(f.Interface().(toml.Primitive), leaf); err != nil {
					errs = append(errs, fileError(path, where+" "+strings.TrimPrefix(c.k.Key, "sink."), err))
				}
			}
		}
		walk(sinkNode, body.Elem(), true)
		topo.secondaries = append(topo.secondaries, sec)
	}
	for i, prim := range doc.FieldByName(sourceField).Interface().([]toml.Primitive) {
		var src sourceTOML
		if err := md.PrimitiveDecode(prim, &src); err != nil {
			errs = append(errs, fileError(path, fmt.Sprintf("[[source]] #%d", i+1), err))
			continue
		}
		topo.sources = append(topo.sources, src)
	}
	p.topology = topo
	return errs
}

// validName is what a secondary or source may be called: it appears in
// metric labels, the offset store and (for file secondaries) a directory.
func validName(s string) string {
	if s == "" {
		return "is required"
	}
	if len(s) > 64 {
		return "must be at most 64 bytes"
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return "may hold only letters, digits, '-', '_' and '.'"
		}
	}
	if s == "." || s == ".." {
		return "must not be . or .."
	}
	return ""
}

func topoErr(path, where, key, value, why string) error {
	loc := ""
	if path != "" {
		loc = "file " + path + ": "
	}
	if value != "" {
		return fmt.Errorf("config: %s%s: %s = %s: %s (TOML only: no flag or environment form)", loc, where, key, value, why)
	}
	return fmt.Errorf("config: %s%s: %s %s (TOML only: no flag or environment form)", loc, where, key, why)
}

// buildTopology applies defaults to the topology tables, validates them
// and the rules that tie them to the [sink], and stores them in c.
func buildTopology(ks []knob, c *Config, topo *topologyTOML, wd string) []error {
	var errs []error
	if !c.Sink.Durable {
		k := knobByKey(ks, "sink.durable")
		errs = append(errs, invalid(k, "false",
			"the [sink] is the pipeline's primary raw, its system of record, and must be durable: nothing may be acknowledged before it is on stable storage"))
	}
	if topo == nil {
		topo = &topologyTOML{}
	}
	path := topo.path
	names := map[string]string{}
	for i, st := range topo.secondaries {
		where := fmt.Sprintf("[[secondary]] #%d", i+1)
		sc := SecondaryConfig{QueueBatches: DefaultQueueBatches, QuarantineBuffer: DefaultQuarantineBuffer, StartAtEnd: st.startAtEnd}
		if st.name != nil {
			sc.Name = *st.name
			where = fmt.Sprintf("[[secondary]] %q", sc.Name)
		}
		if why := validName(sc.Name); why != "" {
			errs = append(errs, topoErr(path, where, "name", fmt.Sprintf("%q", sc.Name), why+" (a stable name keying the sink's coverage in the offset store)"))
		} else if prev, dup := names[sc.Name]; dup {
			errs = append(errs, topoErr(path, where, "name", fmt.Sprintf("%q", sc.Name), "is already used by "+prev+"; names must be unique"))
		} else {
			names[sc.Name] = fmt.Sprintf("[[secondary]] #%d", i+1)
		}
		if st.queue != nil {
			if *st.queue < 1 || *st.queue > 65536 {
				errs = append(errs, topoErr(path, where, "queue_batches", fmt.Sprint(*st.queue), "must be between 1 and 65536"))
			}
			sc.QueueBatches = int(*st.queue)
		}
		if st.quarantine != nil {
			if *st.quarantine < 1 || *st.quarantine > 1<<24 {
				errs = append(errs, topoErr(path, where, "quarantine_buffer", fmt.Sprint(*st.quarantine), "must be between 1 and 16777216"))
			}
			sc.QuarantineBuffer = int(*st.quarantine)
		}
		sc.QuarantineMaxBytes = DefaultQuarantineMaxBytes
		if st.qMaxBytes != nil {
			if *st.qMaxBytes < 0 || *st.qMaxBytes > 1<<50 {
				errs = append(errs, topoErr(path, where, "quarantine_max_bytes", fmt.Sprint(*st.qMaxBytes), "must be between 0 (keep no files: log and count) and 1125899906842624"))
			}
			sc.QuarantineMaxBytes = *st.qMaxBytes
		}
		switch {
		case st.qDir != nil:
			if abs, why := resolvePath(*st.qDir, wd); why != "" {
				errs = append(errs, topoErr(path, where, "quarantine_dir", fmt.Sprintf("%q", *st.qDir), why))
			} else {
				sc.QuarantineDir = abs
			}
		case c.DataDir != "" && sc.Name != "":
			sc.QuarantineDir = filepath.Join(c.DataDir, DefaultQuarantineDirName, sc.Name)
		}
		// The sub-tables are the [sink.<type>] knobs: same defaults, same
		// ranges.
		tmp := &Config{DataDir: c.DataDir}
		for j := range ks {
			if strings.HasPrefix(ks[j].Key, "sink.") {
				ks[j].apply(tmp, st.sink)
			}
		}
		typeKnob := knobByKey(ks, "sink.type")
		if st.sink.SinkType == nil {
			errs = append(errs, topoErr(path, where, "type", "", `is required: one of "file", "parquet", "postgres", "mysql"`))
			tmp.Sink.Type = ""
		} else if why := typeKnob.check(tmp); why != "" {
			errs = append(errs, topoErr(path, where, "type", fmt.Sprintf("%q", tmp.Sink.Type), why))
			tmp.Sink.Type = ""
		}
		for j := range ks {
			k := &ks[j]
			if !strings.HasPrefix(k.Key, "sink.") || k.Key == "sink.type" || !k.isSet(st.sink) {
				continue
			}
			if why := k.check(tmp); why != "" {
				errs = append(errs, topoErr(path, where, strings.TrimPrefix(k.Key, "sink."), k.value(tmp), why))
			}
		}
		if !tmp.Sink.Durable {
			errs = append(errs, topoErr(path, where, "durable", "false", "is not supported: every built-in sink acknowledges only what is on stable storage"))
		}
		for _, tbl := range st.present {
			if tmp.Sink.Type != "" && tbl != tmp.Sink.Type {
				errs = append(errs, topoErr(path, where, "["+"secondary."+tbl+"]", "", fmt.Sprintf("is given but type is %q; use [secondary.%s] or change type", tmp.Sink.Type, tmp.Sink.Type)))
			}
		}
		switch tmp.Sink.Type {
		case "postgres":
			if tmp.Sink.Postgres.DSN == "" {
				errs = append(errs, topoErr(path, where, "postgres.dsn", "", `is required because type is "postgres"`))
			}
		case "mysql":
			if tmp.Sink.MySQL.DSN == "" {
				errs = append(errs, topoErr(path, where, "mysql.dsn", "", `is required because type is "mysql"`))
			}
		case "file", "parquet":
			dir := &tmp.Sink.File.Dir
			key := "file.dir"
			if tmp.Sink.Type == "parquet" {
				dir, key = &tmp.Sink.Parquet.Dir, "parquet.dir"
			}
			if *dir == "" {
				if c.DataDir != "" && sc.Name != "" {
					*dir = filepath.Join(c.DataDir, DefaultSecondaryDirName, sc.Name)
				}
			} else if abs, why := resolvePath(*dir, wd); why != "" {
				errs = append(errs, topoErr(path, where, key, fmt.Sprintf("%q", *dir), why))
			} else {
				*dir = abs
			}
			if *dir != "" {
				others := []struct{ what, dir string }{
					{"wab_dir", c.WABDir},
					{"sink.file.dir (primary raw)", c.Sink.File.Dir},
				}
				if c.Sink.Type == "parquet" {
					others = append(others, struct{ what, dir string }{"sink.parquet.dir (primary raw)", c.Sink.Parquet.Dir})
				}
				for _, other := range others {
					if *dir == other.dir {
						errs = append(errs, topoErr(path, where, key, fmt.Sprintf("%q", *dir), "must differ from "+other.what))
					}
				}
				for _, prev := range c.Secondaries {
					if d := prev.Sink.File.Dir; prev.Sink.Type == "file" && d == *dir || prev.Sink.Parquet.Dir == *dir && prev.Sink.Type == "parquet" {
						errs = append(errs, topoErr(path, where, key, fmt.Sprintf("%q", *dir), fmt.Sprintf("is also the directory of [[secondary]] %q", prev.Name)))
					}
				}
			}
		}
		sc.Sink = tmp.Sink
		c.Secondaries = append(c.Secondaries, sc)
	}
	errs = append(errs, checkPrimaryRaw(ks, c)...)
	srcNames := map[string]string{}
	for i, st := range topo.sources {
		where := fmt.Sprintf("[[source]] #%d", i+1)
		var sc SourceConfig
		if st.Name != nil {
			sc.Name = *st.Name
			where = fmt.Sprintf("[[source]] %q", sc.Name)
		}
		if why := validName(sc.Name); why != "" {
			errs = append(errs, topoErr(path, where, "name", fmt.Sprintf("%q", sc.Name), why+" (names the source in metrics, record origins and the cursor store)"))
		} else if prev, dup := srcNames[sc.Name]; dup {
			errs = append(errs, topoErr(path, where, "name", fmt.Sprintf("%q", sc.Name), "is already used by "+prev+"; names must be unique"))
		} else {
			srcNames[sc.Name] = fmt.Sprintf("[[source]] #%d", i+1)
		}
		if st.Type != nil {
			sc.Type = *st.Type
		}
		given := map[string]bool{SourceKafka: st.Kafka != nil, SourceNATS: st.NATS != nil, SourceFile: st.File != nil}
		switch sc.Type {
		case SourceKafka, SourceNATS, SourceFile:
			for tbl, ok := range given {
				if ok && tbl != sc.Type {
					errs = append(errs, topoErr(path, where, "[source."+tbl+"]", "", fmt.Sprintf("is given but type is %q", sc.Type)))
				}
			}
		case "":
			errs = append(errs, topoErr(path, where, "type", "", `is required: one of "kafka", "nats", "file"`))
		default:
			errs = append(errs, topoErr(path, where, "type", fmt.Sprintf("%q", sc.Type), `must be one of "kafka", "nats", "file"`))
		}
		need := func(key string, missing bool) {
			if missing {
				errs = append(errs, topoErr(path, where, key, "", fmt.Sprintf("is required because type is %q", sc.Type)))
			}
		}
		nonNeg := func(key string, v int) {
			if v < 0 {
				errs = append(errs, topoErr(path, where, key, fmt.Sprint(v), "must not be negative (0 takes the default)"))
			}
		}
		switch sc.Type {
		case SourceKafka:
			k := st.Kafka
			if k == nil {
				k = &kafkaTOML{}
			}
			need("kafka.brokers", len(k.Brokers) == 0)
			need("kafka.topics", len(k.Topics) == 0)
			need("kafka.group", k.Group == "")
			nonNeg("kafka.max_poll_records", k.MaxPollRecords)
			sc.Kafka = KafkaSourceConfig{
				Brokers: k.Brokers, Topics: k.Topics, Group: k.Group, Cluster: k.Cluster,
				MaxPollRecords: k.MaxPollRecords, PerRecordCommit: k.PerRecordCommit, StartAtEnd: k.StartAtEnd,
				CommitTimeout: k.CommitTimeout.d, RebalanceTimeout: k.RebalanceTimeout.d, SessionTimeout: k.SessionTimeout.d,
			}
		case SourceNATS:
			n := st.NATS
			if n == nil {
				n = &natsTOML{}
			}
			need("nats.stream", n.Stream == "")
			need("nats.consumer", n.Consumer == "")
			nonNeg("nats.fetch_batch", n.FetchBatch)
			nonNeg("nats.max_ack_pending", n.MaxAckPending)
			nonNeg("nats.max_deliver", n.MaxDeliver)
			if n.AckWait.d != 0 && n.FetchMaxWait.d != 0 && n.AckWait.d <= n.FetchMaxWait.d {
				errs = append(errs, topoErr(path, where, "nats.ack_wait", formatDuration(n.AckWait.d),
					fmt.Sprintf("must exceed nats.fetch_max_wait (%s)", formatDuration(n.FetchMaxWait.d))))
			}
			sc.NATS = NATSSourceConfig{
				URL: n.URL, Stream: n.Stream, Consumer: n.Consumer, FilterSubjects: n.FilterSubjects,
				FetchBatch: n.FetchBatch, FetchMaxWait: n.FetchMaxWait.d, AckWait: n.AckWait.d,
				MaxAckPending: n.MaxAckPending, MaxDeliver: n.MaxDeliver,
			}
		case SourceFile:
			f := st.File
			if f == nil {
				f = &fileTOML{}
			}
			need("file.glob", f.Glob == "")
			if f.Glob != "" {
				if _, err := filepath.Match(f.Glob, ""); err != nil {
					errs = append(errs, topoErr(path, where, "file.glob", fmt.Sprintf("%q", f.Glob), "is not a valid pattern: "+err.Error()))
				}
			}
			nonNeg("file.max_batch_records", f.MaxBatchRecords)
			nonNeg("file.max_line_bytes", f.MaxLineBytes)
			glob := f.Glob
			if glob != "" && !filepath.IsAbs(glob) {
				glob = filepath.Join(wd, glob)
			}
			sc.File = FileSourceConfig{
				Glob: glob, PollInterval: f.PollInterval.d, MaxBatchRecords: f.MaxBatchRecords,
				MaxLineBytes: f.MaxLineBytes, RotateGrace: f.RotateGrace.d,
			}
		}
		sc.OwnRaw, sc.RawDir = st.OwnRaw, st.RawDir
		if sc.OwnRaw && sc.RawDir == "" && c.DataDir != "" && sc.Name != "" {
			sc.RawDir = filepath.Join(c.DataDir, DefaultOriginDirName, sc.Name)
		}
		if st.RawDir != "" && !st.OwnRaw {
			errs = append(errs, topoErr(path, where, "raw_dir", fmt.Sprintf("%q", st.RawDir), "is only used with own_raw = true"))
		}
		c.Sources = append(c.Sources, sc)
	}
	errs = append(errs, checkOwnRaw(ks, c, path)...)
	errs = append(errs, checkRawGate(ks, c)...)
	return append(errs, checkRecoveryNode(ks, c, path)...)
}

// DefaultOriginDirName is the directory under data_dir that holds, per
// source that is its own raw, its position index and offset store.
const DefaultOriginDirName = "origin"

// OwnRawSource returns the source that is its own primary raw, if any.
func (c *Config) OwnRawSource() (SourceConfig, bool) {
	for _, sc := range c.Sources {
		if sc.OwnRaw {
			return sc, true
		}
	}
	return SourceConfig{}, false
}

// checkOwnRaw checks own_raw: only a replayable origin (a file source)
// may be its own raw, and it is then the node's only primary raw — so the
// only source, with no producers, feeding [[secondary]] sinks.
func checkOwnRaw(ks []knob, c *Config, path string) []error {
	var errs []error
	own := 0
	for i, sc := range c.Sources {
		if !sc.OwnRaw {
			continue
		}
		where := fmt.Sprintf("[[source]] #%d", i+1)
		if sc.Name != "" {
			where = fmt.Sprintf("[[source]] %q", sc.Name)
		}
		own++
		if sc.Type != SourceFile {
			errs = append(errs, topoErr(path, where, "own_raw", "true", fmt.Sprintf(
				"is refused for a %s source: its origin is not replayable (the broker's retention and acknowledgements decide what can be read again), so it cannot be the system of record; leave own_raw unset and it writes through the write-ahead buffer into the [sink]", sc.Type)))
		}
		if own > 1 {
			errs = append(errs, topoErr(path, where, "own_raw", "true", "is set on a second source: a node has exactly one primary raw"))
		}
	}
	if own == 0 {
		return errs
	}
	if len(c.Sources) > own {
		errs = append(errs, topoErr(path, "[[source]]", "own_raw", "true",
			"leaves no place for the other [[source]] tables: the source that is its own raw is the node's only primary raw, and other sources would need the [sink] as a second one (run them on another node)"))
	}
	if len(c.Secondaries) == 0 {
		errs = append(errs, topoErr(path, "[[source]]", "own_raw", "true",
			"needs [[secondary]] tables: a source that is its own raw only feeds secondaries, and there are none"))
	}
	if c.TCPListen != "" {
		errs = append(errs, invalid(knobByKey(ks, "tcp_listen"), fmt.Sprintf("%q", c.TCPListen),
			"must be empty when a source is its own raw: the node accepts no producers (they would need the [sink] as a second primary raw)"))
	}
	return errs
}

// RawSinkTypes are the sink types with a raw (position-numbered,
// replayable) mode: the only ones that may be primary raw.
var RawSinkTypes = []string{"file", "parquet", "postgres"}

// checkPrimaryRaw checks the [sink] when it is primary raw — when
// [[secondary]] sinks are configured, or on a recovery node: it must be
// replayable, read back by position for recovery.
func checkPrimaryRaw(ks []knob, c *Config) []error {
	if len(c.Secondaries) == 0 {
		return nil
	}
	if !slices.Contains(RawSinkTypes, c.Sink.Type) {
		return []error{invalid(knobByKey(ks, "sink.type"), fmt.Sprintf("%q", c.Sink.Type),
			fmt.Sprintf(`must be one of %q when [[secondary]] sinks are configured: the [sink] is then primary raw, which must be replayable (read back by position for recovery), and only those sinks have that raw (positions) mode`, RawSinkTypes))}
	}
	if c.Sink.Type == "postgres" && c.Sink.Postgres.PayloadType != "" && c.Sink.Postgres.PayloadType != "bytea" {
		return []error{invalid(knobByKey(ks, "sink.postgres.payload_type"), fmt.Sprintf("%q", c.Sink.Postgres.PayloadType),
			`must be "bytea" when the [sink] is primary raw: raw gives every payload back byte for byte, which jsonb does not`)}
	}
	return nil
}

// checkRawGate checks gate = "raw": sources write straight into the
// [sink] (primary raw), so there must be sources to run, and nothing that
// needs the write-ahead buffer — producers over the socket or TCP — or
// has no gate of this kind (a recovery node, a source that is its own
// raw).
func checkRawGate(ks []knob, c *Config) []error {
	if c.Gate != "raw" {
		return nil
	}
	k := knobByKey(ks, "gate")
	var errs []error
	if len(c.Sources) == 0 {
		errs = append(errs, invalid(k, `"raw"`, "needs [[source]] tables: without the write-ahead buffer there are no producers, so sources are all this node runs"))
	}
	if c.TCPListen != "" {
		errs = append(errs, invalid(knobByKey(ks, "tcp_listen"), fmt.Sprintf("%q", c.TCPListen),
			`must be empty with gate = "raw": producers need the write-ahead buffer`))
	}
	if c.Role == "recovery" {
		errs = append(errs, invalid(k, `"raw"`, `has no meaning with role = "recovery": a recovery node runs no source`))
	}
	if _, ok := c.OwnRawSource(); ok {
		errs = append(errs, invalid(k, `"raw"`, "has no meaning with own_raw: that source's gate is its own origin"))
	}
	return errs
}

// checkRecoveryNode checks what role = "recovery" implies: the node only
// replays another node's primary raw (sink.file.dir, read-only) into the
// [[secondary]] sinks. It accepts no producers and runs no source, so
// [[source]] tables and tcp_listen are refused rather than silently left
// unused; socket_path, wab_dir and the buffer knobs have defaults and are
// simply not used.
func checkRecoveryNode(ks []knob, c *Config, path string) []error {
	if c.Role != "recovery" {
		return nil
	}
	var errs []error
	if len(c.Secondaries) == 0 {
		errs = append(errs, invalid(knobByKey(ks, "role"), `"recovery"`,
			"needs [[secondary]] tables: a recovery node only replays primary raw (the [sink]) into the secondaries, and there are none"))
	}
	for i, sc := range c.Sources {
		where := fmt.Sprintf("[[source]] #%d", i+1)
		if sc.Name != "" {
			where = fmt.Sprintf("[[source]] %q", sc.Name)
		}
		errs = append(errs, topoErr(path, where, "table", "", `is not allowed with role = "recovery": a recovery node reads no source, it only replays primary raw into the secondaries (run sources on the ingest node)`))
	}
	if c.TCPListen != "" {
		errs = append(errs, invalid(knobByKey(ks, "tcp_listen"), fmt.Sprintf("%q", c.TCPListen),
			`must be empty with role = "recovery": a recovery node accepts no producers`))
	}
	return errs
}
