package config

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config/setting"
	"github.com/weir-io/weir/source"
)

// The topology tables, [[secondary]] and [[source]], are arrays of tables:
// they exist only in the TOML file, with no flag or environment form. The
// main decoder hands them over as primitives; each is decoded here, so a
// key the table does not know is still reported as an unknown key. A
// table's own keys are settings like any other (secondaryFields,
// sourceFields): parsed, range-checked and, for paths, resolved by the
// same setting.Types, with the same messages and generated docs rows.

// DefaultSecondaryDirName is where a file or Parquet secondary writes when
// its dir is not set: <data_dir>/secondary/<name>.
const DefaultSecondaryDirName = "secondary"

// DefaultQuarantineDirName is where a secondary's quarantine lane writes
// when quarantine_dir is not set: <data_dir>/quarantine/<name>.
const DefaultQuarantineDirName = "quarantine"

// DefaultQuarantineMaxBytes bounds a quarantine directory unless
// quarantine_max_bytes says otherwise.
const DefaultQuarantineMaxBytes = 256 << 20

// DefaultQuarantineBufferBytes bounds a quarantine lane's waiting records
// unless quarantine_buffer_bytes says otherwise; DefaultQuarantineTable
// is quarantine_table's default.
const (
	DefaultQuarantineBufferBytes = 16 << 20
	DefaultQuarantineTable       = "weir_quarantine"
)

// SecondaryConfig is one [[secondary]] sink: delivered from primary raw
// after raw is durable, never on the source's path.
type SecondaryConfig struct {
	Name         string // name: keys its coverage in the offset store
	QueueBatches int    // queue_batches
	// QueueMaxBytes bounds the live queue in bytes too (queue_max_bytes);
	// 0 derives it from the memory budget (see the key's help).
	QueueMaxBytes int64
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
	// QuarantineBufferBytes bounds the quarantine lane in bytes too: its
	// own budget, apart from memory_budget, so a stalled quarantine
	// writer never takes memory from the clean path
	// (quarantine_buffer_bytes).
	QuarantineBufferBytes int64
	// QuarantinePostgresURL keeps the refused records in a Postgres
	// table (QuarantineTable) instead of QuarantineDir
	// (quarantine_postgres_url, quarantine_table).
	QuarantinePostgresURL string
	QuarantineTable       string
	// StartAtEnd: a secondary the offset store has never seen starts at
	// raw's end instead of being filled from all of raw (start_at_end).
	StartAtEnd bool
	// MaxAttempts bounds the commits of a batch that keeps failing with
	// transient errors before its records go to quarantine as
	// retry-exhausted; 0 retries until the sink answers (max_attempts).
	MaxAttempts int
	// Sink is type, durable and [secondary.<type>] — the keys of
	// [sink.<type>]; Sink.Kinds holds only that kind's settings.
	Sink SinkConfig
}

// SourceConfig is one [[source]]: a broker or file source the daemon runs,
// writing through the gate.
type SourceConfig struct {
	Name string // name: its metrics label and cursor key
	Type string // type: a registered source kind
	// OwnRaw: the source's replayable origin is the primary raw (own_raw,
	// kinds with a replayable origin only). RawDir holds its position
	// index and the offset store (raw_dir; default <data_dir>/origin/<name>).
	OwnRaw bool
	RawDir string
	// Settings is the kind's table, [source.<type>], defaults filled in
	// and paths made absolute: the kind's own settings type (for "kafka",
	// *kafkasrc.Config).
	Settings any
}

// topologyTOML is what the file said, before defaults and validation.
type topologyTOML struct {
	path        string
	secondaries []secondaryTOML
	sources     []sourceTOML
	contracts   []contractTOML
}

type secondaryTOML struct {
	keys    map[string]any // the table's own keys (secondaryFields), as TOML values
	sink    *partial       // [secondary.<type>], through the [sink.<type>] knobs
	present []string       // [secondary.<table>] tables given
}

type sourceTOML struct {
	keys    map[string]any            // the table's own keys (sourceFields), as TOML values
	values  map[string]map[string]any // kind → key → value given
	present []string                  // [source.<table>] tables given
}

// secondaryFields are the keys of a [[secondary]] table itself, beside
// its [secondary.<type>] table. They are declared like every setting
// (package setting), so they get the same parsing, range checks, path
// resolution, messages and generated rows in docs/configuration.md.
func secondaryFields(reg *component.Registry) []component.Field {
	type S = SecondaryConfig
	return []component.Field{
		component.Key("name", nameType("a stable name keying the sink's coverage in the offset store"), "",
			"Stable name keying the secondary's coverage in the offset store; renaming a secondary makes it a new one, recovered from position 0. Not buffer or raw while quarantine_dir is not set: its default quarantine directory would be a gate's.",
			func(s *S) *string { return &s.Name }, component.Required()),
		component.Key("type", setting.Enum(reg.SinkNames()...), "", "The sink kind; its sub-table (such as [secondary.postgres]) takes the keys of that kind's [sink] table, with the same defaults and ranges.",
			func(s *S) *string { return &s.Sink.Type }, component.Required()),
		component.Key("durable", setting.Bool(), true, "false: the secondary's commits do not wait for stable storage (kinds with \"durable = false\" in the kinds table); what a crash of its host loses is not recovered (docs/topology.md).",
			func(s *S) *bool { return &s.Sink.Durable }),
		component.Key("queue_batches", setting.Int(1, 65536), DefaultQueueBatches, "Live queue bound, in batches; when it is full the secondary falls behind and recovery catches it up from raw.",
			func(s *S) *int { return &s.QueueBatches }),
		component.Key("queue_max_bytes", setting.OrZero(setting.Size(64<<10, 1<<40), "derived"), int64(0),
			"Live queue bound in bytes (what its batches hold in memory, reserved from memory_budget), besides queue_batches. 0 derives it: a quarter of the memory budget, shared among the secondaries.",
			func(s *S) *int64 { return &s.QueueMaxBytes }),
		component.Key("quarantine_buffer", setting.Int(1, 1<<24), DefaultQuarantineBuffer, "Quarantine lane bound, in records: what waits for the quarantine writer.",
			func(s *S) *int { return &s.QuarantineBuffer }),
		component.Key("quarantine_dir", setting.OptionalPath("a directory no other quarantine lane uses"), "", "Where the secondary's refused records are kept with their reasons, as NDJSON.",
			func(s *S) *string { return &s.QuarantineDir }, component.Shown("<data_dir>/"+DefaultQuarantineDirName+"/<name>")),
		component.Key("quarantine_buffer_bytes", setting.Size(64<<10, 1<<40), int64(DefaultQuarantineBufferBytes), "Quarantine lane bound in bytes (the records waiting for the quarantine writer): the lane's own budget, apart from memory_budget; past it refused records are shed (counted), never the clean path slowed.",
			func(s *S) *int64 { return &s.QuarantineBufferBytes }),
		component.Key("quarantine_postgres_url", setting.Secret("a Postgres connection string"), "", "Keep refused records in a Postgres table (quarantine_table) instead of quarantine_dir: code, rule, error, original bytes, id, origin, key, headers, time.",
			func(s *S) *string { return &s.QuarantinePostgresURL }),
		component.Key("quarantine_table", setting.Ident(), DefaultQuarantineTable, "The quarantine table, with quarantine_postgres_url; created when missing. Secondaries may share it (rows name their sink).",
			func(s *S) *string { return &s.QuarantineTable }),
		component.Key("quarantine_max_bytes", setting.Size(0, 1<<50), DefaultQuarantineMaxBytes, "Bound of quarantine_dir; past it refused records are shed (counted). 0 keeps no files: refused records are only logged and counted.",
			func(s *S) *int64 { return &s.QuarantineMaxBytes }),
		component.Key("start_at_end", setting.Bool(), false, "A secondary the offset store has never seen starts at raw's end instead of being filled from all of raw.",
			func(s *S) *bool { return &s.StartAtEnd }),
		component.Key("max_attempts", setting.Int(0, 1<<20), 0, "Commits of a batch that keeps failing with transient errors before its records are given up on: quarantined with code retry-exhausted and covered (raw keeps them; weir quarantine replay sends them again). 0 retries until the sink answers.",
			func(s *S) *int { return &s.MaxAttempts }),
	}
}

// sourceFields are the keys of a [[source]] table itself, beside its
// [source.<type>] table.
func sourceFields(reg *component.Registry) []component.Field {
	type S = SourceConfig
	return []component.Field{
		component.Key("name", nameType("names the source in metrics, record origins and the cursor store"), "",
			"Names the source in metrics, record origins and the cursor store.", func(s *S) *string { return &s.Name }, component.Required()),
		component.Key("type", setting.Enum(reg.SourceNames()...), "", "The source kind; its sub-table (such as [source.kafka]) takes the kind's keys (below).",
			func(s *S) *string { return &s.Type }, component.Required()),
		component.Key("own_raw", setting.Bool(), false, "The source's origin is the primary raw (kinds with \"own raw\" in the kinds table): no write-ahead buffer, no [sink].",
			func(s *S) *bool { return &s.OwnRaw }),
		component.Key("raw_dir", setting.OptionalPath("only with own_raw = true; differs from wab_dir and from every secondary's directory and quarantine_dir"), "",
			"With own_raw: the directory of the origin's position index and of the offset store.",
			func(s *S) *string { return &s.RawDir }, component.Shown("<data_dir>/"+DefaultOriginDirName+"/<name>")),
	}
}

// nameType is a secondary's or a source's name; purpose says what it is
// used for, in messages.
func nameType(purpose string) setting.Type[string] {
	return setting.Text("1 – 64 bytes of letters, digits, '-', '_' and '.'; not . or ..; unique in its array of tables", func(s string) string {
		if why := validName(s); why != "" {
			return why + " (" + purpose + ")"
		}
		return ""
	})
}

// keysType is a struct of one toml.Primitive per key of fields, so that
// decoding a table into it marks those keys decoded and leaves every
// other key to be reported as unknown.
func keysType(fields []component.Field) reflect.Type {
	keys := make([]reflect.StructField, len(fields))
	for j, f := range fields {
		keys[j] = reflect.StructField{Name: fmt.Sprintf("F%d", j), Type: primitiveType, Tag: reflect.StructTag(fmt.Sprintf(`toml:%q`, f.Key))}
	}
	return reflect.StructOf(keys)
}

// readKeys returns the keys of fields that prim holds as TOML values
// (string, int64, bool, []any…). They are parsed and checked by setKeys,
// once the table's name is known for the messages.
func readKeys(md toml.MetaData, prim toml.Primitive, fields []component.Field) (map[string]any, error) {
	v := reflect.New(keysType(fields))
	if err := md.PrimitiveDecode(prim, v.Interface()); err != nil {
		return nil, err
	}
	raw := map[string]any{}
	for j := range fields {
		p := v.Elem().Field(j).Interface().(toml.Primitive)
		if reflect.ValueOf(p).IsZero() {
			continue
		}
		var x any
		if err := md.PrimitiveDecode(p, &x); err != nil {
			return nil, err
		}
		raw[fields[j].Key] = x
	}
	return raw, nil
}

// setKeys fills cfg (the *C of fields) with the defaults and with the
// values raw holds, each parsed and range-checked like every setting.
// report gets each problem as key, value as shown and why; a required key
// raw lacks is reported with its range.
func setKeys(fields []component.Field, cfg any, raw map[string]any, report func(key, value, why string)) {
	for i := range fields {
		f := &fields[i]
		f.SetDefault(cfg)
		v, set := raw[f.Key]
		if !set && f.Required {
			report(f.Key, "", "is required: "+f.Range)
			continue
		}
		if set {
			x, err := f.ParseTOML(v)
			if err != nil {
				report(f.Key, tomlText(v), fmt.Sprintf("%v; allowed: %s", err, f.Range))
				continue
			}
			f.Set(cfg, x)
		}
		if why := f.Check(cfg); why != "" {
			report(f.Key, f.Value(cfg), why)
		}
	}
}

// tomlText shows a TOML value as written, for messages.
func tomlText(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("%q", v)
	case int64, float64, bool:
		return fmt.Sprint(v)
	}
	return setting.TOMLType(v)
}

// tableWhere names the i-th table of an array in messages: by its name
// when it has one.
func tableWhere(table string, i int, keys map[string]any) string {
	if n, ok := keys["name"].(string); ok {
		return fmt.Sprintf("[[%s]] %q", table, n)
	}
	return fmt.Sprintf("[[%s]] #%d", table, i+1)
}

const (
	secondaryField = "TopologySecondary"
	sourceField    = "TopologySource"
)

// withTopology adds the arrays of tables to the document struct.
func withTopology(t reflect.Type) reflect.Type {
	fields := make([]reflect.StructField, 0, t.NumField()+3)
	for i := range t.NumField() {
		fields = append(fields, t.Field(i))
	}
	prims := reflect.TypeFor[[]toml.Primitive]()
	fields = append(fields,
		reflect.StructField{Name: secondaryField, Type: prims, Tag: `toml:"secondary"`},
		reflect.StructField{Name: sourceField, Type: prims, Tag: `toml:"source"`},
		reflect.StructField{Name: contractField, Type: prims, Tag: `toml:"contract"`})
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

// decodeTopology decodes [[secondary]], [[source]] and [[contract]] into
// p.topology.
func decodeTopology(reg *component.Registry, root *tomlNode, md toml.MetaData, doc reflect.Value, p *partial, path string) []error {
	topo := &topologyTOML{path: path}
	errs := decodeSecondaries(reg, root, md, doc, topo)
	errs = append(errs, decodeSources(reg, md, doc, topo)...)
	errs = append(errs, decodeContracts(md, doc, topo)...)
	p.topology = topo
	return errs
}

// decodeSecondaries reads each [[secondary]]: its own keys
// (secondaryFields), and the [secondary.<kind>] tables through the
// [sink.<kind>] knobs, so they get the same parsing and ranges as
// [sink.<kind>].
func decodeSecondaries(reg *component.Registry, root *tomlNode, md toml.MetaData, doc reflect.Value, topo *topologyTOML) []error {
	var errs []error
	path := topo.path
	fields := secondaryFields(reg)
	sinkNode := childNode(root, "sink")
	bodyType := sinkNode.structType()
	for i, prim := range doc.FieldByName(secondaryField).Interface().([]toml.Primitive) {
		keys, err := readKeys(md, prim, fields)
		if err != nil {
			errs = append(errs, fileError(path, fmt.Sprintf("[[secondary]] #%d", i+1), err))
			continue
		}
		where := tableWhere("secondary", i, keys)
		body := reflect.New(bodyType)
		if err := md.PrimitiveDecode(prim, body.Interface()); err != nil {
			errs = append(errs, fileError(path, where, err))
			continue
		}
		sec := secondaryTOML{keys: keys, sink: &partial{}}
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
				// [sink]'s own keys (type, durable) are the
				// secondary's own keys, read above.
				if top || f.IsZero() {
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
	return errs
}

// sourceBodyType mirrors the [source.<kind>] tables of reg's source
// kinds: a pointer (nil when the table is absent) to a struct of one
// toml.Primitive per key, so the decoder reports every key a kind does
// not know as undecoded.
func sourceBodyType(reg *component.Registry) reflect.Type {
	var tables []reflect.StructField
	for i, sk := range reg.Sources() {
		tables = append(tables, reflect.StructField{Name: fmt.Sprintf("K%d", i),
			Type: reflect.PointerTo(keysType(sk.Fields())), Tag: reflect.StructTag(fmt.Sprintf(`toml:%q`, sk.Name()))})
	}
	return reflect.StructOf(tables)
}

// fieldLeaf decodes one key of a kind's table through its Field, so that
// the decoder's error carries the line and key.
type fieldLeaf struct {
	f   *component.Field
	dst map[string]any
}

func (l *fieldLeaf) UnmarshalTOML(v any) error {
	x, err := l.f.ParseTOML(v)
	if err != nil {
		return err
	}
	l.dst[l.f.Key] = x
	return nil
}

// decodeSources reads each [[source]]: its own keys (sourceFields) and
// the [source.<kind>] tables, each key through its kind's Field.
func decodeSources(reg *component.Registry, md toml.MetaData, doc reflect.Value, topo *topologyTOML) []error {
	var errs []error
	fields := sourceFields(reg)
	bodyType := sourceBodyType(reg)
	for i, prim := range doc.FieldByName(sourceField).Interface().([]toml.Primitive) {
		keys, err := readKeys(md, prim, fields)
		if err != nil {
			errs = append(errs, fileError(topo.path, fmt.Sprintf("[[source]] #%d", i+1), err))
			continue
		}
		where := tableWhere("source", i, keys)
		body := reflect.New(bodyType)
		if err := md.PrimitiveDecode(prim, body.Interface()); err != nil {
			errs = append(errs, fileError(topo.path, where, err))
			continue
		}
		src := sourceTOML{keys: keys, values: map[string]map[string]any{}}
		for k, sk := range reg.Sources() {
			tbl := body.Elem().Field(k)
			if tbl.IsNil() {
				continue
			}
			src.present = append(src.present, sk.Name())
			vals := map[string]any{}
			src.values[sk.Name()] = vals
			kf := sk.Fields()
			for j := range kf {
				prim := tbl.Elem().Field(j).Interface().(toml.Primitive)
				if reflect.ValueOf(prim).IsZero() {
					continue
				}
				if err := md.PrimitiveDecode(prim, &fieldLeaf{f: &kf[j], dst: vals}); err != nil {
					errs = append(errs, fileError(topo.path, where+" "+sk.Name()+"."+kf[j].Key, err))
				}
			}
		}
		topo.sources = append(topo.sources, src)
	}
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
	p := &Problem{File: path, Table: where, Key: key, Value: value, Why: why}
	if value != "" {
		p.msg = fmt.Sprintf("config: %s%s: %s = %s: %s (TOML only: no flag or environment form)", loc, where, key, value, why)
	} else {
		p.msg = fmt.Sprintf("config: %s%s: %s %s (TOML only: no flag or environment form)", loc, where, key, why)
	}
	return p
}

// buildTopology applies defaults to the topology tables, validates them
// and the rules that tie them to the [sink], and stores them in c.
func buildTopology(ks []knob, c *Config, topo *topologyTOML, wd string) []error {
	var errs []error
	if !c.Sink.Durable {
		why := "the [sink] is the pipeline's primary raw, its system of record, and must be durable: nothing may be acknowledged before it is on stable storage"
		if c.Gate == "raw" {
			why = `the [sink] is the gate of the sources (gate = "raw") and the pipeline's primary raw: a source's position may move only once its records are on stable storage there`
		}
		errs = append(errs, invalid(knobByKey(ks, "sink.durable"), "false", why+" (only a [[secondary]] may set durable = false)"))
	}
	if topo == nil {
		topo = &topologyTOML{}
	}
	names := map[string]string{}
	for i, st := range topo.secondaries {
		sc, serrs := buildSecondary(ks, c, topo.path, i, st, names, wd)
		errs = append(errs, serrs...)
		c.Secondaries = append(c.Secondaries, sc)
	}
	errs = append(errs, checkPrimaryRaw(ks, c)...)
	names = map[string]string{}
	for i, st := range topo.sources {
		sc, serrs := buildSource(c, topo.path, i, st, names, wd)
		errs = append(errs, serrs...)
		c.Sources = append(c.Sources, sc)
	}
	errs = append(errs, checkOwnRaw(ks, c, topo.path)...)
	errs = append(errs, checkRawGate(ks, c)...)
	errs = append(errs, buildContracts(c, topo, wd)...)
	return append(errs, checkRecoveryNode(ks, c, topo.path)...)
}

// checkUnique checks that a secondary's or a source's name is not used
// by an earlier table of the same array (names maps name to table). A
// name that is not well formed is reported by its own check.
func checkUnique(path, where, table string, i int, name string, names map[string]string) error {
	if validName(name) != "" {
		return nil
	}
	if prev, dup := names[name]; dup {
		return topoErr(path, where, "name", fmt.Sprintf("%q", name), "is already used by "+prev+"; names must be unique")
	}
	names[name] = fmt.Sprintf("[[%s]] #%d", table, i+1)
	return nil
}

// tableKeys fills cfg, the i-th table of an array, from the table's own
// keys (fields, keys as read): parsed, range-checked, paths made absolute
// against wd, the name unique. It returns how messages name the table, and
// the problems found.
func tableKeys(path, table string, i int, keys map[string]any, fields []component.Field, cfg any, names map[string]string, wd string) (string, []error) {
	where := tableWhere(table, i, keys)
	var errs []error
	report := func(key, value, why string) { errs = append(errs, topoErr(path, where, key, value, why)) }
	setKeys(fields, cfg, keys, report)
	resolveFields(fields, cfg, wd, true, report)
	for j := range fields {
		if f := &fields[j]; f.Key == "name" {
			if err := checkUnique(path, where, table, i, f.Get(cfg).(string), names); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return where, errs
}

// buildSecondary builds the i-th [[secondary]].
func buildSecondary(ks []knob, c *Config, path string, i int, st secondaryTOML, names map[string]string, wd string) (SecondaryConfig, []error) {
	var sc SecondaryConfig
	where, errs := tableKeys(path, "secondary", i, st.keys, secondaryFields(c.Components), &sc, names, wd)
	explicit := sc.QuarantineDir != "" // empty: not set
	if !explicit && c.DataDir != "" && sc.Name != "" {
		sc.QuarantineDir = filepath.Join(c.DataDir, DefaultQuarantineDirName, sc.Name)
	}
	errs = append(errs, checkQuarantineDir(c, path, where, sc, explicit)...)
	var serrs []error
	sc.Sink, serrs = buildSecondarySink(ks, c, path, where, sc, st, wd)
	return sc, append(errs, serrs...)
}

// The gates' quarantine lanes, under <data_dir>/quarantine: what the
// buffer gate refuses from a [[source]] (over max_frame_bytes), and what
// the [sink] refuses with gate = "raw".
const (
	BufferGateQuarantine = "buffer"
	RawGateQuarantine    = "raw"
)

// GateQuarantineDir is the directory of a gate's quarantine lane
// (BufferGateQuarantine or RawGateQuarantine).
func (c *Config) GateQuarantineDir(lane string) string {
	return filepath.Join(c.DataDir, DefaultQuarantineDirName, lane)
}

// checkQuarantineDir refuses a secondary's quarantine directory that
// another lane writes — a gate's, or an earlier secondary's: each lane
// bounds its directory by the size of every file in it, so a shared
// directory would shed one lane's records for the other's files. A
// secondary without quarantine_dir defaults to <data_dir>/quarantine/<name>,
// so the names of the gates' lanes are reserved; explicit says whether
// quarantine_dir was given (and is then the key to blame).
func checkQuarantineDir(c *Config, path, where string, sc SecondaryConfig, explicit bool) []error {
	dir := sc.QuarantineDir
	if dir == "" || c.DataDir == "" {
		return nil
	}
	var errs []error
	for _, lane := range []struct{ name, what string }{
		{BufferGateQuarantine, "the buffer gate's quarantine lane (records a [[source]] sends over max_frame_bytes)"},
		{RawGateQuarantine, `the raw gate's quarantine lane (records the [sink] refuses with gate = "raw")`},
	} {
		if dir != c.GateQuarantineDir(lane.name) {
			continue
		}
		if explicit {
			errs = append(errs, topoErr(path, where, "quarantine_dir", fmt.Sprintf("%q", dir), "is "+lane.what+"; choose another directory"))
		} else {
			errs = append(errs, topoErr(path, where, "name", fmt.Sprintf("%q", sc.Name), fmt.Sprintf(
				"is reserved: the quarantine directory it would default to, %q, is %s; choose another name or set quarantine_dir", dir, lane.what)))
		}
	}
	for _, prev := range c.Secondaries {
		if prev.QuarantineDir == dir {
			errs = append(errs, topoErr(path, where, "quarantine_dir", fmt.Sprintf("%q", dir), fmt.Sprintf("is also the quarantine_dir of [[secondary]] %q; each secondary needs its own", prev.Name)))
		}
	}
	return errs
}

// buildSecondarySink builds a secondary's sink — its kind sc.Sink.Type,
// durable and [secondary.<type>] — through the [sink] knobs: the same
// defaults, the same ranges, and the same rules of its kind.
func buildSecondarySink(ks []knob, c *Config, path, where string, sc SecondaryConfig, st secondaryTOML, wd string) (SinkConfig, []error) {
	var errs []error
	reg := c.Components
	tmp := &Config{DataDir: c.DataDir}
	for j := range ks {
		if strings.HasPrefix(ks[j].Key, "sink.") {
			ks[j].apply(tmp, st.sink)
		}
	}
	for j := range ks {
		k := &ks[j]
		if !strings.HasPrefix(k.Key, "sink.") || !k.isSet(st.sink) {
			continue
		}
		if why := k.check(tmp); why != "" {
			errs = append(errs, topoErr(path, where, strings.TrimPrefix(k.Key, "sink."), k.value(tmp), why))
		}
	}
	typ, durable := sc.Sink.Type, sc.Sink.Durable
	sk, ok := reg.Sink(typ)
	if !ok {
		return SinkConfig{Durable: durable}, errs // type itself is reported
	}
	for _, tbl := range st.present {
		if tbl != typ {
			errs = append(errs, topoErr(path, where, "["+"secondary."+tbl+"]", "", fmt.Sprintf("is given but type is %q; use [secondary.%s] or change type", typ, typ)))
		}
	}
	if !durable && !sk.Caps().NonDurable {
		errs = append(errs, topoErr(path, where, "durable", "false", fmt.Sprintf(
			"is not supported by a %s sink: it has no way to commit without waiting for stable storage (see the kinds table), so it would still be durable; remove the key", typ)))
	}
	settings := tmp.Sink.Kinds[typ]
	report := func(key, value, why string) { errs = append(errs, topoErr(path, where, typ+"."+key, value, why)) }
	checkKind(sk.Fields(), settings, sk.Check(settings), fmt.Sprintf("type is %q", typ), report)
	if f := sk.Dir(); f != nil && f.Get(settings).(string) == "" && c.DataDir != "" && sc.Name != "" {
		f.Set(settings, filepath.Join(c.DataDir, DefaultSecondaryDirName, sc.Name))
	}
	resolveFields(sk.Fields(), settings, wd, true, report)
	out := SinkConfig{Type: typ, Durable: durable, Kinds: map[string]any{typ: settings}}
	errs = append(errs, checkSecondaryDir(c, path, where, out)...)
	return out, errs
}

// checkKind reports a kind's required keys that are not set (need says
// why they are needed) and the problems its own rules found.
func checkKind(fields []component.Field, settings any, problems []component.Problem, need string, report func(key, value, why string)) {
	for i := range fields {
		if f := &fields[i]; f.Required && f.IsZero(settings) {
			report(f.Key, "", "is required because "+need)
		}
	}
	for _, p := range problems {
		report(p.Key, p.Value, p.Why)
	}
}

// resolveFields makes a kind's path keys absolute against wd (refusing
// NUL and `..`, like every path setting) and its glob keys absolute; with
// dirs false it leaves the kind's directory key alone.
func resolveFields(fields []component.Field, settings any, wd string, dirs bool, report func(key, value, why string)) {
	for i := range fields {
		f := &fields[i]
		v, _ := f.Get(settings).(string)
		if v == "" || (f.DirName != "" && !dirs) {
			continue
		}
		switch f.Kind {
		case setting.KindPath:
			if abs, why := resolvePath(v, wd); why != "" {
				report(f.Key, f.Value(settings), why)
			} else {
				f.Set(settings, abs)
			}
		case setting.KindGlob:
			if !filepath.IsAbs(v) {
				f.Set(settings, filepath.Join(wd, v))
			}
		}
	}
}

// checkSecondaryDir refuses a secondary directory that another writer
// already uses: the write-ahead buffer, primary raw, an earlier secondary.
func checkSecondaryDir(c *Config, path, where string, s SinkConfig) []error {
	dir := c.SinkDir(s)
	if dir == "" {
		return nil
	}
	key := s.Type + "." + c.sinkDirField(s.Type).Key
	var errs []error
	others := []struct{ what, dir string }{{"wab_dir", c.WABDir}}
	if raw := c.SinkDir(c.Sink); raw != "" {
		others = append(others, struct{ what, dir string }{"sink." + c.Sink.Type + "." + c.sinkDirField(c.Sink.Type).Key + " (primary raw)", raw})
	}
	for _, prev := range c.Secondaries {
		others = append(others, struct{ what, dir string }{fmt.Sprintf("the directory of [[secondary]] %q", prev.Name), c.SinkDir(prev.Sink)})
	}
	for _, o := range others {
		if dir == o.dir {
			why := "must differ from " + o.what
			if strings.HasPrefix(o.what, "the directory") {
				why = "is also " + o.what
			}
			errs = append(errs, topoErr(path, where, key, fmt.Sprintf("%q", dir), why))
		}
	}
	return errs
}

// buildSource builds the i-th [[source]].
func buildSource(c *Config, path string, i int, st sourceTOML, names map[string]string, wd string) (SourceConfig, []error) {
	var sc SourceConfig
	where, errs := tableKeys(path, "source", i, st.keys, sourceFields(c.Components), &sc, names, wd)
	sk, ok := c.Components.Source(sc.Type) // type itself is reported
	for _, tbl := range st.present {
		if ok && tbl != sc.Type {
			errs = append(errs, topoErr(path, where, "[source."+tbl+"]", "", fmt.Sprintf("is given but type is %q", sc.Type)))
		}
	}
	if ok {
		settings := sk.NewConfig()
		report := func(key, value, why string) { errs = append(errs, topoErr(path, where, sc.Type+"."+key, value, why)) }
		fields := sk.Fields()
		for j := range fields {
			f := &fields[j]
			if v, set := st.values[sc.Type][f.Key]; set {
				f.Set(settings, v)
				if why := f.Check(settings); why != "" {
					report(f.Key, f.Value(settings), why)
				}
			}
		}
		checkKind(fields, settings, sk.Check(settings), fmt.Sprintf("type is %q", sc.Type), report)
		resolveFields(fields, settings, wd, true, report)
		sc.Settings = settings
	}
	if sc.RawDir != "" && !sc.OwnRaw {
		return sc, append(errs, topoErr(path, where, "raw_dir", fmt.Sprintf("%q", sc.RawDir), "is only used with own_raw = true"))
	}
	if sc.OwnRaw && sc.RawDir == "" && c.DataDir != "" && sc.Name != "" {
		sc.RawDir = filepath.Join(c.DataDir, DefaultOriginDirName, sc.Name)
	}
	return sc, append(errs, checkRawDir(c, path, where, sc)...)
}

// checkRawDir refuses a raw_dir (an own-raw source's index and offset
// store) that another writer uses: the write-ahead buffer, a secondary's
// sink or quarantine lane.
func checkRawDir(c *Config, path, where string, sc SourceConfig) []error {
	if !sc.OwnRaw || sc.RawDir == "" || !filepath.IsAbs(sc.RawDir) {
		return nil // not used, or its path is reported
	}
	others := []struct{ what, dir string }{{"wab_dir", c.WABDir}}
	for _, s := range c.Secondaries {
		others = append(others, struct{ what, dir string }{fmt.Sprintf("the directory of [[secondary]] %q", s.Name), c.SinkDir(s.Sink)},
			struct{ what, dir string }{fmt.Sprintf("the quarantine_dir of [[secondary]] %q", s.Name), s.QuarantineDir})
	}
	var errs []error
	for _, o := range others {
		if o.dir != "" && o.dir == sc.RawDir {
			errs = append(errs, topoErr(path, where, "raw_dir", fmt.Sprintf("%q", sc.RawDir), "must differ from "+o.what))
		}
	}
	return errs
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
		if sk, ok := c.Components.Source(sc.Type); ok && !sk.Replayable() {
			errs = append(errs, topoErr(path, where, "own_raw", "true", fmt.Sprintf(
				"is refused for a %s source: %s, so it cannot be the system of record; leave own_raw unset and it writes through the write-ahead buffer into the [sink]",
				sc.Type, notReplayable(sk.Caps().Regime))))
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

// notReplayable says why a source of regime r cannot be read again.
func notReplayable(r source.Regime) string {
	if r == source.ProducerManaged {
		return "its origin is a stream its producers cannot rewind (a Flight DoPut): once a batch is acknowledged the producer drops it and nothing upstream keeps it, so the primary raw is the only replay path of what it took. That holds only because its producers resume — each keeps every batch until its acknowledgement and resends the rest after a reconnect; a producer that does not loses what was in flight when the node stops"
	}
	return "its origin is not replayable (the broker's retention and acknowledgements decide what can be read again)"
}

// checkPrimaryRaw checks the [sink] when it is primary raw — when
// [[secondary]] sinks are configured, or on a recovery node: its kind must
// have a raw mode (replayable, read back by position for recovery), and
// its settings follow the kind's rules for raw.
func checkPrimaryRaw(ks []knob, c *Config) []error {
	if len(c.Secondaries) == 0 {
		return nil
	}
	sk, ok := c.Components.Sink(c.Sink.Type)
	if !ok {
		return nil // sink.type itself is reported
	}
	if !sk.PrimaryRaw() {
		return []error{invalid(knobByKey(ks, "sink.type"), fmt.Sprintf("%q", c.Sink.Type),
			fmt.Sprintf(`must be one of %q when [[secondary]] sinks are configured: the [sink] is then primary raw, which must be replayable (read back by position for recovery), and only those sinks have that raw (positions) mode`, c.Components.RawSinkNames()))}
	}
	var errs []error
	for _, p := range sk.CheckRaw(c.Sink.Settings()) {
		errs = append(errs, invalid(knobByKey(ks, "sink."+c.Sink.Type+"."+p.Key), p.Value, p.Why))
	}
	return errs
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
// replays another node's primary raw (the [sink], read-only) into the
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
