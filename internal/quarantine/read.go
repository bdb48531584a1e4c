package quarantine

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/sink/recjson"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// Entry is one quarantined record read back. Lines written before reason
// codes existed leave the rejection fields empty (ReasonCode "").
type Entry struct {
	Sink          string `json:"sink"`
	RawPosition   uint64 `json:"raw_position"`
	OriginPos     string `json:"origin_pos"`
	FoundBy       string `json:"found_by"`
	Reason        string `json:"reason"`
	QuarantinedAt string `json:"quarantined_at"`
	ReasonCode    string `json:"reason_code"`
	Stage         string `json:"stage"`
	Component     string `json:"component"`
	Rule          string `json:"rule"`
	Error         string `json:"error"`
	Attempts      int    `json:"attempts"`
	FirstSeen     string `json:"first_seen"`
	Key           string `json:"key"`
	KeyEncoding   string `json:"key_encoding"`
	Headers       []struct {
		Key           string `json:"key"`
		Value         string `json:"value"`
		ValueEncoding string `json:"value_encoding"`
	} `json:"headers"`
	EventTime string `json:"event_time"`
	Record    struct {
		ID              string `json:"weir_record_id"`
		Durability      string `json:"durability"`
		ReceivedAt      string `json:"received_at"`
		Source          string `json:"source"`
		Payload         string `json:"payload"`
		PayloadEncoding string `json:"payload_encoding"`
	} `json:"record"`
}

// Rejected is the lane record e holds: what the tools show, filter and
// replay (under e's record id). A line written before reason codes existed
// reads as code unknown, its reason as the error text.
func (e *Entry) Rejected() (lane.Rejected, error) {
	r := lane.Rejected{Sink: e.Sink, Pos: e.RawPosition, OriginPos: e.OriginPos, Recovery: e.FoundBy == "recovery"}
	id, err := hex.DecodeString(e.Record.ID)
	if err != nil || len(id) != len(r.Record.ID) {
		return r, fmt.Errorf("quarantine: record id %q is not 32 hex digits", e.Record.ID)
	}
	copy(r.Record.ID[:], id)
	r.Record.Source = e.Record.Source
	if e.Record.Durability == "buffered" {
		r.Record.Durability = sink.Buffered
	}
	if r.Record.Payload, err = decodeField("payload", e.Record.Payload, e.Record.PayloadEncoding); err != nil {
		return r, err
	}
	if e.KeyEncoding != "" {
		if r.Record.Key, err = decodeField("key", e.Key, e.KeyEncoding); err != nil {
			return r, err
		}
	}
	for _, h := range e.Headers {
		v, err := decodeField("header value", h.Value, h.ValueEncoding)
		if err != nil {
			return r, err
		}
		r.Record.Headers = append(r.Record.Headers, sink.Header{Key: h.Key, Value: v})
	}
	r.Record.Received, _ = time.Parse(time.RFC3339Nano, e.Record.ReceivedAt)
	r.Record.EventTime, _ = time.Parse(time.RFC3339Nano, e.EventTime)
	rj := &r.Reject
	if e.ReasonCode != "" {
		if rj.Code, err = record.ParseCode(e.ReasonCode); err != nil {
			return r, fmt.Errorf("quarantine: %w", err)
		}
	}
	rj.Stage, rj.Component, rj.Rule, rj.Error, rj.Attempts = record.Stage(e.Stage), e.Component, e.Rule, e.Error, e.Attempts
	if rj.Error == "" {
		rj.Error = e.Reason
	}
	if t, err := time.Parse(time.RFC3339Nano, e.FirstSeen); err == nil {
		rj.FirstSeen = t.UnixNano()
	} else if t, err := time.Parse(time.RFC3339Nano, e.QuarantinedAt); err == nil {
		rj.FirstSeen = t.UnixNano() // a line without first_seen: when it was written
	}
	return r, nil
}

func decodeField(name, s, enc string) ([]byte, error) {
	if enc == "" {
		enc = recjson.UTF8
	}
	b, err := recjson.Decode(s, enc)
	if err != nil {
		return nil, fmt.Errorf("quarantine: %s: %w", name, err)
	}
	return b, nil
}

// Read reads the lane records of dir, oldest file first — and when dir is
// a parent of lanes (<data_dir>/quarantine: one directory per secondary,
// "raw" for the raw gate's), of each directory below it, by name.
func Read(fsys vfs.FS, dir string) ([]lane.Rejected, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	dirs := []string{dir}
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("quarantine: list %s: %w", dir, err)
	}
	sort.Strings(names)
	for _, n := range names {
		if fi, err := fsys.Stat(filepath.Join(dir, n)); err == nil && fi.IsDir() {
			dirs = append(dirs, filepath.Join(dir, n))
		}
	}
	var out []lane.Rejected
	for _, d := range dirs {
		es, err := ReadDir(fsys, d)
		if err != nil {
			return nil, err
		}
		for i := range es {
			r, err := es[i].Rejected()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d, err)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// ReadDir reads every quarantined record in dir, oldest file first. A
// torn last line (a crash mid-write, never acknowledged) is skipped.
func ReadDir(fsys vfs.FS, dir string) ([]Entry, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	names, err := files(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, n := range names {
		f, err := fsys.Open(filepath.Join(dir, n))
		if err != nil {
			return nil, fmt.Errorf("quarantine: %w", err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 256<<20)
		var bad error
		for line := 1; sc.Scan(); line++ {
			if bad != nil {
				break // a bad line with more after it: not a torn tail
			}
			var e Entry
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				bad = fmt.Errorf("quarantine: %s line %d: %w", n, line, err)
				continue
			}
			out = append(out, e)
		}
		err = sc.Err()
		more := bad != nil && sc.Err() == nil && len(sc.Bytes()) > 0
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("quarantine: read %s: %w", n, err)
		}
		if more {
			return nil, bad
		}
	}
	return out, nil
}
