// Package rawfiles holds what the file sink and the Parquet sink share
// about a raw-mode directory read by a process that does not write it (a
// recovery-only node): the checks made when a read-only reader opens it.
// How each sink lists, scans and decodes its files stays in its package;
// how many records one read returns is sink.ReadLimit's.
package rawfiles

import (
	"fmt"
	"path/filepath"

	"github.com/weir-io/weir/internal/vfs"
)

// Kind says how a sink names what it writes, for OpenDir.
type Kind struct {
	// Pkg prefixes the errors ("filesink").
	Pkg string
	// Output names what the sink writes without raw mode, for the error
	// that refuses it ("file-sink output").
	Output string
	// Raw reports whether a file name is one of raw mode's; Plain whether
	// it is one of the sink's output without raw mode.
	Raw, Plain func(name string) bool
}

// OpenDir checks that dir, on fsys (nil means vfs.OS), can be read as the
// raw-mode directory of a sink of kind k: it exists and is a directory —
// it may be empty, the writer has not committed anything yet — and does
// not hold the sink's output written without raw mode only, which has no
// positions to read. It returns fsys and dir cleaned.
func OpenDir(fsys vfs.FS, dir string, k Kind) (vfs.FS, string, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	dir = filepath.Clean(dir)
	st, err := fsys.Stat(dir)
	if err != nil {
		return nil, "", fmt.Errorf("%s: raw reader: %w", k.Pkg, err)
	}
	if !st.IsDir() {
		return nil, "", fmt.Errorf("%s: raw reader: %s is not a directory", k.Pkg, dir)
	}
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, "", fmt.Errorf("%s: raw reader: list %s: %w", k.Pkg, dir, err)
	}
	raw, plain := false, false
	for _, n := range names {
		if k.Raw(n) {
			raw = true
		} else if k.Plain(n) {
			plain = true
		}
	}
	if plain && !raw {
		return nil, "", fmt.Errorf("%s: raw reader: %s holds %s written without raw mode (no positions to read)", k.Pkg, dir, k.Output)
	}
	return fsys, dir, nil
}
