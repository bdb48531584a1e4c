package wab

import "github.com/weir-io/weir/internal/vfs"

// FS is the file-system seam every function of this package does its I/O
// through. Code outside this module can implement it (to inject faults, to
// simulate crashes) or pass nil, which everywhere means the real file
// system, OSFS.
type FS = vfs.FS

// File is an open file of an FS.
type File = vfs.File

// OSFS is the real file system.
var OSFS FS = vfs.OS
