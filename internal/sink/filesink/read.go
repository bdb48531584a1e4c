package filesink

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

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

func parseLine(raw []byte) (Line, error) {
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
