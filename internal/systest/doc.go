// Package systest holds weir's system tests: each builds the real weir
// binary (with the faultinject tag, and with the race detector when the
// tests run under it), spawns it per test in its own temporary directory,
// and drives it over its real socket. There is no non-test code here.
package systest
