// Package engine holds the parts of a pipeline that sit between sources and
// sinks: the gate a source writes through (the write-ahead buffer, see
// NewWABGate), the offset store's file-backed cursor store (see
// OpenFileCursorStore) and the position invariant checker every source's
// tests run (see Checker).
package engine
