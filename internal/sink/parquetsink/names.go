package parquetsink

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// File names: weir-<unix nanos, 20 digits>-<sequence, 6 digits>-<writer,
// 8 hex digits><suffix>. The base (everything before the suffix) names one
// file through its life: staged, being converted, finished.
const (
	filePrefix = "weir-"
	// SuffixParquet marks a finished Parquet file: complete, synced, never
	// changed again.
	SuffixParquet = ".parquet"
	// SuffixStage marks the durable log of committed records that will
	// become the Parquet file of the same base.
	SuffixStage = ".stage"
	// SuffixTemp marks a Parquet file being written; it is renamed to
	// .parquet once complete and synced, or removed.
	SuffixTemp   = ".parquet.tmp"
	lockSuffix   = ".lock"
	maxSeq       = 1_000_000
	writerIDLen  = 8
	nsDigits     = 20
	seqDigits    = 6
	baseNameSize = len(filePrefix) + nsDigits + 1 + seqDigits + 1 + writerIDLen
)

func newWriterID() (string, error) {
	var b [writerIDLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("parquetsink: writer id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func baseName(ns int64, seq int, writer string) string {
	return fmt.Sprintf("%s%0*d-%0*d-%s", filePrefix, nsDigits, ns, seqDigits, seq, writer)
}

func lockName(writer string) string { return filePrefix + writer + lockSuffix }

type parsedName struct {
	base   string
	ns     int64
	seq    int
	writer string
	suffix string
}

// parseName splits a file name of this sink; ok is false for any other.
func parseName(name string) (p parsedName, ok bool) {
	for _, suf := range []string{SuffixTemp, SuffixParquet, SuffixStage} {
		if strings.HasSuffix(name, suf) {
			p.suffix = suf
			break
		}
	}
	if p.suffix == "" || !strings.HasPrefix(name, filePrefix) {
		return p, false
	}
	p.base = strings.TrimSuffix(name, p.suffix)
	if len(p.base) != baseNameSize {
		return p, false
	}
	parts := strings.Split(strings.TrimPrefix(p.base, filePrefix), "-")
	if len(parts) != 3 || len(parts[0]) != nsDigits || len(parts[1]) != seqDigits || !isWriterID(parts[2]) {
		return p, false
	}
	var err1, err2 error
	p.ns, err1 = strconv.ParseInt(parts[0], 10, 64)
	p.seq, err2 = strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return p, false
	}
	p.writer = parts[2]
	return p, true
}

// parseLockName returns the writer id of a lock file name.
func parseLockName(name string) (string, bool) {
	if !strings.HasPrefix(name, filePrefix) || !strings.HasSuffix(name, lockSuffix) {
		return "", false
	}
	w := strings.TrimSuffix(strings.TrimPrefix(name, filePrefix), lockSuffix)
	return w, isWriterID(w)
}

func isWriterID(s string) bool {
	if len(s) != writerIDLen {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Raw-mode file names: raw-<first position, 20 digits><suffix>, with the
// same suffixes. One lock file, raw.lock, guards the whole directory.
const (
	rawPrefix   = "raw-"
	rawDigits   = 20
	rawLockName = "raw.lock"
)

func rawBase(first uint64) string { return fmt.Sprintf("%s%0*d", rawPrefix, rawDigits, first) }

// parseRawName splits raw-<first><suffix>; ok is false for any other name.
func parseRawName(name string) (first uint64, suffix string, ok bool) {
	for _, suf := range []string{SuffixTemp, SuffixParquet, SuffixStage} {
		if strings.HasSuffix(name, suf) {
			suffix = suf
			break
		}
	}
	if suffix == "" || !strings.HasPrefix(name, rawPrefix) {
		return 0, "", false
	}
	mid := strings.TrimSuffix(strings.TrimPrefix(name, rawPrefix), suffix)
	if len(mid) != rawDigits {
		return 0, "", false
	}
	n, err := strconv.ParseUint(mid, 10, 64)
	if err != nil {
		return 0, "", false
	}
	return n, suffix, true
}

// parseAnyName splits a file name of this sink, raw mode or not, into its
// base and suffix.
func parseAnyName(name string) (base, suffix string, ok bool) {
	if p, ok := parseName(name); ok {
		return p.base, p.suffix, true
	}
	if _, suffix, ok := parseRawName(name); ok {
		return strings.TrimSuffix(name, suffix), suffix, true
	}
	return "", "", false
}
