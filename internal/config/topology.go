package config

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/config/setting"
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

type sourceTOML struct {
	name    *string
	typ     *string
	ownRaw  bool
	rawDir  string
	values  map[string]map[string]any // kind → key → value given
	present []string                  // [source.<table>] tables given
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
func decodeTopology(reg *component.Registry, root *tomlNode, md toml.MetaData, doc reflect.Value, p *partial, path string) []error {
	topo := &topologyTOML{path: path}
	errs := decodeSecondaries(root, md, doc, topo)
	errs = append(errs, decodeSources(reg, md, doc, topo)...)
	p.topology = topo
	return errs
}

// decodeSecondaries reads each [[secondary]]: its own keys, and type,
// durable and the [secondary.<kind>] tables through the [sink] knobs, so
// they get the same parsing and ranges as [sink] and [sink.<kind>].
func decodeSecondaries(root *tomlNode, md toml.MetaData, doc reflect.Value, topo *topologyTOML) []error {
	var errs []error
	path := topo.path
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
	return errs
}

// sourceBodyType mirrors the [source.<kind>] tables of reg's source
// kinds: a pointer (nil when the table is absent) to a struct of one
// toml.Primitive per key, so the decoder reports every key a kind does
// not know as undecoded.
func sourceBodyType(reg *component.Registry) reflect.Type {
	var tables []reflect.StructField
	for i, sk := range reg.Sources() {
		var keys []reflect.StructField
		for j, f := range sk.Fields() {
			keys = append(keys, reflect.StructField{Name: fmt.Sprintf("F%d", j), Type: primitiveType, Tag: reflect.StructTag(fmt.Sprintf(`toml:%q`, f.Key))})
		}
		tables = append(tables, reflect.StructField{Name: fmt.Sprintf("K%d", i),
			Type: reflect.PointerTo(reflect.StructOf(keys)), Tag: reflect.StructTag(fmt.Sprintf(`toml:%q`, sk.Name()))})
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

// decodeSources reads each [[source]]: its own keys and the
// [source.<kind>] tables, each key through its kind's Field.
func decodeSources(reg *component.Registry, md toml.MetaData, doc reflect.Value, topo *topologyTOML) []error {
	var errs []error
	bodyType := sourceBodyType(reg)
	for i, prim := range doc.FieldByName(sourceField).Interface().([]toml.Primitive) {
		where := fmt.Sprintf("[[source]] #%d", i+1)
		var head struct {
			Name   *string `toml:"name"`
			Type   *string `toml:"type"`
			OwnRaw bool    `toml:"own_raw"`
			RawDir string  `toml:"raw_dir"`
		}
		if err := md.PrimitiveDecode(prim, &head); err != nil {
			errs = append(errs, fileError(topo.path, where, err))
			continue
		}
		if head.Name != nil {
			where = fmt.Sprintf("[[source]] %q", *head.Name)
		}
		body := reflect.New(bodyType)
		if err := md.PrimitiveDecode(prim, body.Interface()); err != nil {
			errs = append(errs, fileError(topo.path, where, err))
			continue
		}
		src := sourceTOML{name: head.Name, typ: head.Type, ownRaw: head.OwnRaw, rawDir: head.RawDir, values: map[string]map[string]any{}}
		for k, sk := range reg.Sources() {
			tbl := body.Elem().Field(k)
			if tbl.IsNil() {
				continue
			}
			src.present = append(src.present, sk.Name())
			vals := map[string]any{}
			src.values[sk.Name()] = vals
			fields := sk.Fields()
			for j := range fields {
				prim := tbl.Elem().Field(j).Interface().(toml.Primitive)
				if reflect.ValueOf(prim).IsZero() {
					continue
				}
				if err := md.PrimitiveDecode(prim, &fieldLeaf{f: &fields[j], dst: vals}); err != nil {
					errs = append(errs, fileError(topo.path, where+" "+sk.Name()+"."+fields[j].Key, err))
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
	return append(errs, checkRecoveryNode(ks, c, topo.path)...)
}

// checkName checks a secondary's or a source's name: well formed and not
// used by an earlier table of the same array (names maps name to table).
func checkName(path, where, table string, i int, name, purpose string, names map[string]string) error {
	if why := validName(name); why != "" {
		return topoErr(path, where, "name", fmt.Sprintf("%q", name), why+" ("+purpose+")")
	}
	if prev, dup := names[name]; dup {
		return topoErr(path, where, "name", fmt.Sprintf("%q", name), "is already used by "+prev+"; names must be unique")
	}
	names[name] = fmt.Sprintf("[[%s]] #%d", table, i+1)
	return nil
}

// buildSecondary builds the i-th [[secondary]].
func buildSecondary(ks []knob, c *Config, path string, i int, st secondaryTOML, names map[string]string, wd string) (SecondaryConfig, []error) {
	where := fmt.Sprintf("[[secondary]] #%d", i+1)
	sc := SecondaryConfig{QueueBatches: DefaultQueueBatches, QuarantineBuffer: DefaultQuarantineBuffer,
		QuarantineMaxBytes: DefaultQuarantineMaxBytes, StartAtEnd: st.startAtEnd}
	if st.name != nil {
		sc.Name = *st.name
		where = fmt.Sprintf("[[secondary]] %q", sc.Name)
	}
	var errs []error
	if err := checkName(path, where, "secondary", i, sc.Name, "a stable name keying the sink's coverage in the offset store", names); err != nil {
		errs = append(errs, err)
	}
	bound := func(key string, v *int64, lo, hi int64, why string, dst func(int64)) {
		if v == nil {
			return
		}
		if *v < lo || *v > hi {
			errs = append(errs, topoErr(path, where, key, fmt.Sprint(*v), why))
		}
		dst(*v)
	}
	bound("queue_batches", st.queue, 1, 65536, "must be between 1 and 65536", func(v int64) { sc.QueueBatches = int(v) })
	bound("quarantine_buffer", st.quarantine, 1, 1<<24, "must be between 1 and 16777216", func(v int64) { sc.QuarantineBuffer = int(v) })
	bound("quarantine_max_bytes", st.qMaxBytes, 0, 1<<50, "must be between 0 (keep no files: log and count) and 1125899906842624",
		func(v int64) { sc.QuarantineMaxBytes = v })
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
	var serrs []error
	sc.Sink, serrs = buildSecondarySink(ks, c, path, where, sc.Name, st, wd)
	return sc, append(errs, serrs...)
}

// buildSecondarySink builds a secondary's sink — type, durable and
// [secondary.<type>] — through the [sink] knobs: the same defaults, the
// same ranges, and the same rules of its kind.
func buildSecondarySink(ks []knob, c *Config, path, where, name string, st secondaryTOML, wd string) (SinkConfig, []error) {
	var errs []error
	reg := c.Components
	tmp := &Config{DataDir: c.DataDir}
	for j := range ks {
		if strings.HasPrefix(ks[j].Key, "sink.") {
			ks[j].apply(tmp, st.sink)
		}
	}
	if st.sink.SinkType == nil {
		errs = append(errs, topoErr(path, where, "type", "", "is required: one of "+strings.Join(setting.QuoteAll(reg.SinkNames()), ", ")))
		tmp.Sink.Type = ""
	} else if why := knobByKey(ks, "sink.type").check(tmp); why != "" {
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
	typ := tmp.Sink.Type
	for _, tbl := range st.present {
		if typ != "" && tbl != typ {
			errs = append(errs, topoErr(path, where, "["+"secondary."+tbl+"]", "", fmt.Sprintf("is given but type is %q; use [secondary.%s] or change type", typ, typ)))
		}
	}
	sk, ok := reg.Sink(typ)
	if !ok {
		return SinkConfig{Durable: tmp.Sink.Durable}, errs
	}
	if !tmp.Sink.Durable && !sk.Caps().NonDurable {
		errs = append(errs, topoErr(path, where, "durable", "false", fmt.Sprintf(
			"is not supported by a %s sink: it has no way to commit without waiting for stable storage (see the kinds table), so it would still be durable; remove the key", typ)))
	}
	settings := tmp.Sink.Kinds[typ]
	report := func(key, value, why string) { errs = append(errs, topoErr(path, where, typ+"."+key, value, why)) }
	checkKind(sk.Fields(), settings, sk.Check(settings), fmt.Sprintf("type is %q", typ), report)
	if f := sk.Dir(); f != nil && f.Get(settings).(string) == "" && c.DataDir != "" && name != "" {
		f.Set(settings, filepath.Join(c.DataDir, DefaultSecondaryDirName, name))
	}
	resolveFields(sk.Fields(), settings, wd, true, report)
	out := SinkConfig{Type: typ, Durable: tmp.Sink.Durable, Kinds: map[string]any{typ: settings}}
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
	where := fmt.Sprintf("[[source]] #%d", i+1)
	var sc SourceConfig
	if st.name != nil {
		sc.Name = *st.name
		where = fmt.Sprintf("[[source]] %q", sc.Name)
	}
	var errs []error
	if err := checkName(path, where, "source", i, sc.Name, "names the source in metrics, record origins and the cursor store", names); err != nil {
		errs = append(errs, err)
	}
	if st.typ != nil {
		sc.Type = *st.typ
	}
	kinds := strings.Join(setting.QuoteAll(c.Components.SourceNames()), ", ")
	sk, ok := c.Components.Source(sc.Type)
	switch {
	case sc.Type == "":
		errs = append(errs, topoErr(path, where, "type", "", "is required: one of "+kinds))
	case !ok:
		errs = append(errs, topoErr(path, where, "type", fmt.Sprintf("%q", sc.Type), "must be one of "+kinds))
	}
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
	sc.OwnRaw, sc.RawDir = st.ownRaw, st.rawDir
	if sc.OwnRaw && sc.RawDir == "" && c.DataDir != "" && sc.Name != "" {
		sc.RawDir = filepath.Join(c.DataDir, DefaultOriginDirName, sc.Name)
	}
	if st.rawDir != "" && !st.ownRaw {
		errs = append(errs, topoErr(path, where, "raw_dir", fmt.Sprintf("%q", st.rawDir), "is only used with own_raw = true"))
	}
	return sc, errs
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
