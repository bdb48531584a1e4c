package quarantine

import (
	"bufio"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/weir-io/weir/internal/vfs"
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
		Source          string `json:"source"`
		Payload         string `json:"payload"`
		PayloadEncoding string `json:"payload_encoding"`
	} `json:"record"`
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
