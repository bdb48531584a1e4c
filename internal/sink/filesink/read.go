package filesink

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/weir-io/weir/internal/sink/recjson"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// Line is one record read back from an output file.
type Line struct {
	File       string // base name of the file
	Number     int    // line number in the file, from 1
	ID         sink.RecordID
	Durability sink.Durability
	Received   time.Time
	Source     string
	Payload    []byte // decoded
	Key        []byte // decoded; nil when the record has none
	Headers    []sink.Header
	EventTime  time.Time // zero when the record has none
}

// Record is the line as the record a sink was given (the raw reader's).
func (l *Line) Record() sink.Record {
	return sink.Record{
		ID: l.ID, Payload: l.Payload, Durability: l.Durability, Received: l.Received, Source: l.Source,
		Key: l.Key, Headers: l.Headers, EventTime: l.EventTime,
	}
}

type lineJSON struct {
	ID          string           `json:"weir_record_id"`
	Durability  string           `json:"durability"`
	Received    time.Time        `json:"received_at"`
	Source      string           `json:"source"`
	Payload     *string          `json:"payload"`
	Encoding    string           `json:"payload_encoding"`
	Key         *string          `json:"key"`
	KeyEncoding string           `json:"key_encoding"`
	Headers     []recjson.Header `json:"headers"`
	EventTime   *time.Time       `json:"event_time"`
}

// ReadDir reads every finished (.ndjson) file in dir, in name order, which
// is the order the files were started (raw mode's files included). Duplicates are returned as written;
// deduplicate on ID.
func ReadDir(dir string) ([]Line, error) { return ReadDirFS(vfs.OS, dir, false) }

// ReadDirFS is ReadDir on fs; with includeOpen it also reads the file still
// being written (.ndjson.open), ignoring a partial last line. Abandoned
// (.ndjson.failed) files are never read.
func ReadDirFS(fs vfs.FS, dir string, includeOpen bool) ([]Line, error) {
	names, err := fs.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("filesink: read %s: %w", dir, err)
	}
	var out []Line
	for _, name := range names {
		_, _, suffix, ok := parseName(name)
		if !ok {
			_, suffix, ok = parseRawName(name) // raw mode's files
		}
		if !ok || (suffix != SuffixDone && !(includeOpen && suffix == SuffixOpen)) {
			continue
		}
		out, err = readFile(fs, filepath.Join(dir, name), suffix == SuffixOpen, out)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func readFile(fs vfs.FS, path string, open bool, out []Line) ([]Line, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("filesink: read %s: %w", path, err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<16)
	name := filepath.Base(path)
	for n := 1; ; n++ {
		raw, err := r.ReadBytes('\n')
		if len(raw) == 0 && err != nil {
			break
		}
		if raw[len(raw)-1] != '\n' {
			if open {
				break // still being written
			}
			return nil, fmt.Errorf("filesink: %s:%d: no newline at end of file", path, n)
		}
		l, perr := parseLine(bytes.TrimSuffix(raw, []byte{'\n'}))
		if perr != nil {
			return nil, fmt.Errorf("filesink: %s:%d: %w", path, n, perr)
		}
		l.File, l.Number = name, n
		out = append(out, l)
		if err != nil {
			break
		}
	}
	return out, nil
}

// parseLine parses one line (without its newline). The Line may hold
// slices of raw. A line as the sink writes it for a record without a key
// or headers, whose strings need no escape, is read directly (parseDirect);
// any other line — or one the direct reading does not recognise — is
// decoded by encoding/json, which defines the format (parseJSON), so both
// give the same Line or, for a line the direct reading passes on, the same
// error.
func parseLine(raw []byte) (Line, error) {
	if l, ok := parseDirect(raw); ok {
		return l, nil
	}
	return parseJSON(raw)
}

// parseDirect reads a line laid out exactly as appendRecord writes it —
// the fields in its order, no key, no headers, an optional event time —
// whose strings hold no escape, no control character and only valid UTF-8,
// so that their bytes are their values. It reports false for anything
// else, and for values parseJSON would refuse, leaving the line to it.
func parseDirect(raw []byte) (Line, bool) {
	d := direct{b: raw}
	var l Line
	id, ok := d.field(`{"weir_record_id":"`)
	if !ok || len(id) != 2*len(l.ID) {
		return Line{}, false
	}
	if _, err := hex.Decode(l.ID[:], id); err != nil {
		return Line{}, false
	}
	dur, ok := d.field(`,"durability":"`)
	switch {
	case !ok:
		return Line{}, false
	case string(dur) == "durable":
		l.Durability = sink.Durable
	case string(dur) == "buffered":
		l.Durability = sink.Buffered
	default:
		return Line{}, false
	}
	recv, ok := d.field(`,"received_at":"`)
	if !ok || l.Received.UnmarshalText(recv) != nil {
		return Line{}, false
	}
	src, ok := d.field(`,"source":"`)
	if !ok {
		return Line{}, false
	}
	l.Source = string(src)
	payload, ok := d.field(`,"payload":"`)
	if !ok {
		return Line{}, false
	}
	enc, ok := d.field(`,"payload_encoding":"`)
	switch {
	case !ok:
		return Line{}, false
	case string(enc) == recjson.UTF8:
		l.Payload = payload[:len(payload):len(payload)]
	case string(enc) == recjson.Base64:
		l.Payload = make([]byte, base64.StdEncoding.DecodedLen(len(payload)))
		n, err := base64.StdEncoding.Decode(l.Payload, payload)
		if err != nil {
			return Line{}, false
		}
		l.Payload = l.Payload[:n]
	default:
		return Line{}, false
	}
	if ev, ok := d.field(`,"event_time":"`); ok {
		if l.EventTime.UnmarshalText(ev) != nil {
			return Line{}, false
		}
	}
	if string(d.b) != "}" {
		return Line{}, false
	}
	return l, true
}

// direct is parseDirect's place in the line.
type direct struct{ b []byte }

// field reads prefix, then a string's bytes up to its closing quote; false
// (and nothing read) unless the line goes on with prefix and the string
// holds no backslash, no control character and only valid UTF-8.
func (d *direct) field(prefix string) ([]byte, bool) {
	if !bytes.HasPrefix(d.b, []byte(prefix)) {
		return nil, false
	}
	rest := d.b[len(prefix):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return nil, false
	}
	v := rest[:end]
	ascii := true
	for _, c := range v {
		if c < 0x20 || c == '\\' {
			return nil, false
		}
		ascii = ascii && c < utf8.RuneSelf
	}
	if !ascii && !utf8.Valid(v) {
		return nil, false
	}
	d.b = rest[end+1:]
	return v, true
}

// parseJSON decodes a line with encoding/json.
func parseJSON(raw []byte) (Line, error) {
	var j lineJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return Line{}, err
	}
	var l Line
	var err error
	if l.ID, err = sink.ParseRecordID(j.ID); err != nil {
		return Line{}, err
	}
	switch j.Durability {
	case "durable":
		l.Durability = sink.Durable
	case "buffered":
		l.Durability = sink.Buffered
	default:
		return Line{}, fmt.Errorf("unknown durability %q", j.Durability)
	}
	if j.Payload == nil {
		return Line{}, fmt.Errorf("no payload")
	}
	if l.Payload, err = recjson.Decode(*j.Payload, j.Encoding); err != nil {
		return Line{}, fmt.Errorf("payload: %w", err)
	}
	if j.Key != nil {
		if l.Key, err = recjson.Decode(*j.Key, j.KeyEncoding); err != nil {
			return Line{}, fmt.Errorf("key: %w", err)
		}
	}
	if l.Headers, err = recjson.DecodeHeaders(j.Headers); err != nil {
		return Line{}, err
	}
	if j.EventTime != nil {
		l.EventTime = *j.EventTime
	}
	l.Received, l.Source = j.Received, j.Source
	return l, nil
}
