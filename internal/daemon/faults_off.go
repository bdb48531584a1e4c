//go:build !faultinject

package daemon

import "github.com/weir-io/weir/internal/vfs"

// faultFS is the identity in production builds. Builds with the faultinject
// tag (system tests only) wrap the FS with rules read from WEIR_FAULTS.
func faultFS(fs vfs.FS) (vfs.FS, error) { return fs, nil }
